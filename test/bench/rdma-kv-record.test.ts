// The rdma-kv binding's allocation-free record paths (encodeInto, mergeInto, LazyFieldValues'
// bytes) write exactly what the string paths (encodeRecord, mergeRecord, fieldValue) write, and
// draw the same random values in the same order.
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { KvServer } from '../../server/kv-server.js';
import { Status, type FieldValues } from '../../bench/ycsb/db/db.js';
import { ReadResult } from '../../bench/ycsb/db/read-result.js';
import RdmaKvClient from '../../bench/ycsb/db/rdma-kv.js';
import { decodeRecord, encodeFields, encodeInto, encodeRecord, encodedBytes, mergeInto, mergeRecord, mergedBytesBound } from '../../bench/ycsb/db/rdma-kv-record.js';
import { Properties } from '../../bench/ycsb/properties.js';
import { Random } from '../../bench/ycsb/random.js';
import { LazyFieldValues, randomPrintable } from '../../bench/ycsb/workload/field-values.js';

function lazy(seed: number, key: string, fields: [string, number][], deterministic = false): LazyFieldValues {
  const values = new LazyFieldValues(new Random(seed), deterministic);
  values.reset(key);
  for (const [name, length] of fields) values.add(name, length);
  return values;
}

const TEN: [string, number][] = Array.from({ length: 10 }, (_, i): [string, number] => [`field${i}`, 100]);

test('field values: bytes and strings are the same values, drawn in the order fields are first asked for', (t) => {
  const fields: [string, number][] = [['a', 7], ['b', 100], ['c', 0], ['d', 13]];
  const order = [2, 0, 3, 1];
  const expected = new Random(11);
  const want = new Map<number, string>(order.map((i): [number, string] => [i, randomPrintable(expected, fields[i]![1])]));
  // bytes first for some, strings first for others: the generator is drawn at the first ask either way
  const values = lazy(11, 'user1', fields);
  const target = Buffer.alloc(200);
  for (const [k, i] of order.entries()) {
    if (k % 2 === 0) {
      t.is(values.writeValue(i, target, 50), fields[i]![1]);
      t.is(target.toString('latin1', 50, 50 + fields[i]![1]), want.get(i)!);
    }
    t.is(values.fieldValue(i), want.get(i)!);
    t.is(values.valueLength(i), fields[i]![1]);
  }
  // a new set reuses the object and draws new values
  values.reset('user2');
  values.add('a', 7);
  t.is(values.fieldValue(0), randomPrintable(expected, 7));
});

test('field values: deterministic values (dataintegrity) as bytes; a non-ASCII one says so', (t) => {
  const values = lazy(1, 'user9', [['field0', 40]], true);
  const target = Buffer.alloc(40);
  values.writeValue(0, target, 0);
  t.is(target.toString('latin1'), values.fieldValue(0));
  t.true(values.fieldValue(0).startsWith('user9:field0:'));
  t.is(lazy(1, 'user9', [['feld\u00e9', 40]], true).valueLength(0), -1);
});

test('encodeInto writes the bytes encodeRecord makes', (t) => {
  for (const fields of [TEN, [] as [string, number][], [['x', 0], ['y', 3000]] as [string, number][]]) {
    const a = lazy(3, 'user7', fields);
    const b = lazy(3, 'user7', fields);
    const out = Buffer.alloc(encodedBytes(a) + 5, 0xee);
    const n = encodeInto(a, out);
    t.is(n, encodedBytes(b));
    t.deepEqual(out.subarray(0, n), encodeRecord(b));
  }
  // names that are not ASCII, and values without bytes, take the string path
  t.is(encodedBytes(lazy(3, 'k', [['n\u00e4me', 5]])), -1);
  t.is(encodedBytes({ size: 1, fieldName: () => 'a', fieldValue: () => 'b' }), -1);
});

test('mergeInto writes the bytes mergeRecord makes: replaced, kept and appended fields', (t) => {
  const current = encodeFields(['field0', 'field1', 'field2', 'field3'], ['a', 'bb', '', 'dddd']);
  const cases: [string, number][][] = [
    [['field1', 100]],
    [['field0', 1]],
    [['field3', 0]],
    [['field2', 9], ['field0', 2]],
    // values of the lengths they replace: the record keeps its layout (copied whole, then written over)
    [['field3', 4], ['field1', 2]],
    [['field2', 0]],
    [['field9', 5]],
    [['field9', 5], ['field1', 50], ['field8', 0]],
    [],
  ];
  for (const fields of cases) {
    const a = lazy(5, 'k', fields);
    const b = lazy(5, 'k', fields);
    const bound = mergedBytesBound(current, a);
    t.true(bound >= 0);
    const out = Buffer.alloc(bound, 0xee);
    const n = mergeInto(current, a, out);
    t.deepEqual(out.subarray(0, n), mergeRecord(current, b), JSON.stringify(fields));
  }
  const empty = encodeFields([], []);
  const a = lazy(6, 'k', TEN);
  const out = Buffer.alloc(mergedBytesBound(empty, a));
  t.deepEqual(out.subarray(0, mergeInto(empty, a, out)), mergeRecord(empty, lazy(6, 'k', TEN)));
});

test('mergeInto refuses malformed records, and leaves what it cannot merge to mergeRecord', (t) => {
  const good = encodeFields(['a', 'b'], ['x', 'yy']);
  const values = lazy(1, 'k', [['a', 3]]);
  const bad = [good.subarray(0, good.length - 1), Buffer.concat([good, Buffer.from('z')]), good.subarray(0, 8), good.subarray(0, 2)];
  const huge = Buffer.from(good);
  huge.writeUInt32LE(0xffffffff, 3 + 2);
  bad.push(huge, Buffer.concat([encodeFields([], []), Buffer.from('junk')]));
  for (const bytes of bad) {
    const bound = mergedBytesBound(bytes, values);
    if (bound < 0) continue;
    t.is(mergeInto(bytes, values, Buffer.alloc(bound)), -2, bytes.toString('hex'));
    t.is(mergeRecord(bytes, lazy(1, 'k', [['a', 3]])), undefined);
  }
  t.is(mergedBytesBound(encodeFields(['\u00e9'], ['x']), values), -1, 'a record that is not ASCII');
  t.is(mergedBytesBound(good, lazy(1, 'k', [['a', 3], ['a', 4]])), -1, 'the same field twice');
});

test.serial('binding: writes in flight at once each keep their own record buffer', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-record-test-'));
  const server = await KvServer.start({ listen: [`shm://${join(dir, 'kv.sock')}`], memoryBytes: 64 << 20, graceMs: 200 });
  const db = new RdmaKvClient();
  try {
    await db.init(new Properties([['rdmakv.url', server.urls[0]!], ['fieldcount', '10']]));
    const inserted = Array.from({ length: 32 }, (_, i) => lazy(100 + i, `user${i}`, TEN));
    t.true((await Promise.all(inserted.map((v, i) => db.insert('usertable', `user${i}`, v)))).every((s) => s === Status.OK));
    const updates = Array.from({ length: 32 }, (_, i) => lazy(200 + i, `user${i}`, [[`field${i % 10}`, 100]]));
    t.true((await Promise.all(updates.map((v, i) => db.update('usertable', `user${i}`, v)))).every((s) => s === Status.OK));
    for (let i = 0; i < 32; i++) {
      const result = new ReadResult();
      t.is(await db.read('usertable', `user${i}`, null, result), Status.OK);
      const want = new ReadResult();
      t.true(decodeRecord(mergeRecord(encodeRecord(inserted[i]!), updates[i]!)!, null, want));
      t.deepEqual(result.toObject(), want.toObject(), `user${i}`);
    }
  } finally {
    await db.cleanup();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

// FieldValues without bytes still work through the binding (the string path).
test.serial('binding: plain field values take the string path', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-record-test-'));
  const server = await KvServer.start({ listen: [`shm://${join(dir, 'kv.sock')}`], memoryBytes: 64 << 20, graceMs: 200 });
  const db = new RdmaKvClient();
  const plain = (pairs: [string, string][]): FieldValues => ({ size: pairs.length, fieldName: (i) => pairs[i]![0], fieldValue: (i) => pairs[i]![1] });
  try {
    await db.init(new Properties([['rdmakv.url', server.urls[0]!]]));
    t.is(await db.insert('t', 'k', plain([['n\u00e4me', 'v\u00e4lue'], ['b', 'x']])), Status.OK);
    t.is(await db.update('t', 'k', lazy(1, 'k', [['b', 10]])), Status.OK, 'a non-ASCII record merges through mergeRecord');
    const result = new ReadResult();
    t.is(await db.read('t', 'k', null, result), Status.OK);
    t.is(result.get('n\u00e4me'), 'v\u00e4lue');
    t.is(result.get('b')!.length, 10);
  } finally {
    await db.cleanup();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
