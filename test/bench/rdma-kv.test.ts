/**
 * The rdma-kv binding of kv-bench: its record encoding, its YCSB semantics against a KvServer
 * started in this process on a temporary shm socket, and `kv-bench load` / `run` of workloada
 * through the CLI with worker threads (each with its own KvClient).
 */
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { KvClient } from '../../client/index.js';
import { KvServer } from '../../server/kv-server.js';
import { main } from '../../bench/ycsb/cli.js';
import { Status, type FieldValues } from '../../bench/ycsb/db/db.js';
import { ReadResult } from '../../bench/ycsb/db/read-result.js';
import { createBinding } from '../../bench/ycsb/db/registry.js';
import RdmaKvClient, { decodeFields, decodeRecord, encodeFields, encodeRecord, mergeRecord, qualifiedKey } from '../../bench/ycsb/db/rdma-kv.js';
import { Properties } from '../../bench/ycsb/properties.js';
import { LazyFieldValues } from '../../bench/ycsb/workload/field-values.js';
import { Random } from '../../bench/ycsb/random.js';

const WORKLOADS = fileURLToPath(new URL('../../../bench/workloads/', import.meta.url));

/** Plain field values (name, value) in order. */
function fields(...pairs: [string, string][]): FieldValues {
  return { size: pairs.length, fieldName: (i) => pairs[i]![0], fieldValue: (i) => pairs[i]![1] };
}

function decoded(bytes: Buffer, subset: string[] | null = null): Map<string, string> {
  const result = new ReadResult();
  if (!decodeRecord(bytes, subset, result)) throw new Error('not a well-formed record');
  return new Map(result);
}

// ---- encoding ---------------------------------------------------------------------------------

test('encoding: YCSB-style records round-trip, all fields or a subset', (t) => {
  const values = new LazyFieldValues(new Random(7), false);
  values.reset('user42');
  for (let i = 0; i < 10; i++) values.add(`field${i}`, 100);
  const bytes = encodeRecord(values);
  t.is(bytes.length, 3 + 6 * 10 + 10 * (6 + 100));
  t.is(bytes[2], 1, 'printable ASCII takes the ASCII path');
  const all = decoded(bytes);
  t.deepEqual([...all.keys()], Array.from({ length: 10 }, (_, i) => `field${i}`));
  for (let i = 0; i < 10; i++) t.is(all.get(`field${i}`), values.fieldValue(i));
  const some = decoded(bytes, ['field3', 'field9', 'nosuchfield']);
  t.deepEqual([...some.entries()], [['field3', values.fieldValue(3)], ['field9', values.fieldValue(9)]]);
});

test('encoding: non-ASCII, empty and long fields round-trip exactly', (t) => {
  const pairs: [string, string][] = [
    ['', ''],
    ['naïve', 'café ☕ 😀'],
    ['f', 'x'.repeat(70000)],
    ['lone', '\ud800'], // a lone surrogate becomes U+FFFD, as Buffer.from(string) makes it
    ['ascii', 'plain'],
  ];
  const bytes = encodeRecord(fields(...pairs));
  t.is(bytes[2], 0, 'not all ASCII');
  const names: string[] = [];
  const values: string[] = [];
  t.true(decodeFields(bytes, names, values));
  t.deepEqual(names, pairs.map((p) => p[0]));
  t.deepEqual(values, pairs.map((p) => Buffer.from(p[1], 'utf8').toString('utf8')));
  t.deepEqual(encodeFields([], []), Buffer.from([0, 0, 1]));
  t.deepEqual(decoded(encodeFields([], [])), new Map());
});

test('encoding: an encoded record is not changed by the next encoding (scratch is copied out)', (t) => {
  const a = encodeFields(['k'], ['first']);
  const b = encodeFields(['k'], ['second']);
  t.is(decoded(a).get('k'), 'first');
  t.is(decoded(b).get('k'), 'second');
});

test('encoding: malformed bytes are refused, never misread', (t) => {
  const good = encodeFields(['a', 'b'], ['one', 'two']);
  const names: string[] = [];
  const values: string[] = [];
  t.false(decodeFields(Buffer.alloc(0), names, values));
  t.false(decodeFields(good.subarray(0, good.length - 1), names, values), 'truncated body');
  t.false(decodeFields(Buffer.concat([good, Buffer.from('x')]), names, values), 'trailing bytes');
  t.false(decodeFields(good.subarray(0, 8), names, values), 'truncated header');
  const huge = Buffer.from(good);
  huge.writeUInt32LE(0xffffffff, 3 + 2);
  t.false(decodeFields(huge, names, values), 'a length past the end');
  t.is(mergeRecord(Buffer.from('not a record'), fields(['a', 'x'])), undefined);
});

test('encoding: merge writes the given fields and keeps the others', (t) => {
  const current = encodeFields(['field0', 'field1', 'field2'], ['a', 'b', 'c']);
  const merged = mergeRecord(current, fields(['field1', 'B'], ['field7', 'new']))!;
  t.deepEqual([...decoded(merged).entries()], [['field0', 'a'], ['field1', 'B'], ['field2', 'c'], ['field7', 'new']]);
});

// ---- semantics against a server ---------------------------------------------------------------------

async function withServer(run: (url: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-bench-test-'));
  const server = await KvServer.start({ listen: [`shm://${join(dir, 'kv.sock')}`], memoryBytes: 64 << 20, graceMs: 200 });
  try {
    await run(server.urls[0]!);
  } finally {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

test.serial('binding: insert, read, update of a subset, delete, scan, and their statuses', async (t) => {
  await withServer(async (url) => {
    const db = await createBinding('rdma-kv');
    t.true(db instanceof RdmaKvClient);
    await db.init(new Properties([['rdmakv.url', url], ['fieldcount', '3']]));
    try {
      const result = new ReadResult();
      t.is(await db.read('usertable', 'user1', null, result), Status.NOT_FOUND);
      t.is(await db.update('usertable', 'user1', fields(['field0', 'x'])), Status.NOT_FOUND, 'a subset update needs the record');
      t.is(await db.insert('usertable', 'user1', fields(['field0', 'a'], ['field1', 'b'], ['field2', 'c'])), Status.OK);
      t.is(await db.update('usertable', 'user1', fields(['field1', 'B'])), Status.OK);
      t.is(await db.read('usertable', 'user1', null, result), Status.OK);
      t.deepEqual(result.toObject(), { field0: 'a', field1: 'B', field2: 'c' });
      result.clear();
      t.is(await db.read('usertable', 'user1', ['field2'], result), Status.OK);
      t.deepEqual(result.toObject(), { field2: 'c' });
      // every field of the schema: a plain PUT
      t.is(await db.update('usertable', 'user1', fields(['field2', 'C'], ['field0', 'A'], ['field1', 'BB'])), Status.OK);
      result.clear();
      await db.read('usertable', 'user1', null, result);
      t.deepEqual(result.toObject(), { field0: 'A', field1: 'BB', field2: 'C' });
      // the table is part of the key
      t.is(await db.read('othertable', 'user1', null, new ReadResult()), Status.NOT_FOUND);
      t.is(await db.scan('usertable', 'user1', 10, null, []), Status.NOT_IMPLEMENTED);
      t.is(await db.delete('usertable', 'user1'), Status.OK);
      t.is(await db.delete('usertable', 'user1'), Status.NOT_FOUND);
      t.is(await db.read('usertable', 'user1', null, new ReadResult()), Status.NOT_FOUND);
    } finally {
      await db.cleanup();
    }
  });
});

test.serial('binding: a read lands in the result\'s own buffer, which grows for a record longer than it and keeps serving shorter ones', async (t) => {
  await withServer(async (url) => {
    const db = await createBinding('rdma-kv');
    await db.init(new Properties([['rdmakv.url', url], ['fieldcount', '3']]));
    try {
      const result = new ReadResult();
      const first = result.recordBuffer(0);
      t.is(await db.insert('usertable', 'short', fields(['field0', 'a'], ['field1', 'b'])), Status.OK);
      t.is(await db.read('usertable', 'short', null, result), Status.OK);
      t.deepEqual(result.toObject(), { field0: 'a', field1: 'b' });
      t.is(result.recordBuffer(0), first, 'a short record is read into the buffer the result had');
      const long = 'L'.repeat(3 * first.length);
      t.is(await db.insert('usertable', 'long', fields(['field0', long], ['field1', 'x'])), Status.OK);
      result.clear();
      t.is(await db.read('usertable', 'long', null, result), Status.OK, 'a record longer than the buffer is read again into a longer one');
      t.deepEqual(result.toObject(), { field0: long, field1: 'x' });
      t.true(result.recordBuffer(0).length > 3 * first.length);
      result.clear();
      t.is(await db.read('usertable', 'short', ['field1'], result), Status.OK);
      t.deepEqual(result.toObject(), { field1: 'b' });
    } finally {
      await db.cleanup();
    }
  });
});

test.serial('binding: concurrent subset updates of one record lose nothing (cas)', async (t) => {
  await withServer(async (url) => {
    const props = new Properties([['rdmakv.url', url], ['fieldcount', '16']]);
    const writers = [new RdmaKvClient(), new RdmaKvClient()];
    await Promise.all(writers.map((w) => w.init(props)));
    try {
      const names = Array.from({ length: 16 }, (_, i) => `field${i}`);
      t.is(await writers[0]!.insert('t', 'k', fields(...names.map((n): [string, string] => [n, '0']))), Status.OK);
      // each update sets one field; both clients race on the same record
      const statuses = await Promise.all(names.map((n, i) => writers[i % 2]!.update('t', 'k', fields([n, `v${i}`]))));
      t.true(statuses.every((s) => s === Status.OK));
      const result = new ReadResult();
      t.is(await writers[0]!.read('t', 'k', null, result), Status.OK);
      t.deepEqual(result.toObject(), Object.fromEntries(names.map((n, i) => [n, `v${i}`])));
    } finally {
      await Promise.all(writers.map((w) => w.cleanup()));
    }
  });
});

test.serial('binding: bad properties and an unreachable store fail init with one clear message', async (t) => {
  const db = new RdmaKvClient();
  await t.throwsAsync(db.init(new Properties([['rdmakv.pollmode', 'spin']])), { message: /rdmakv.pollmode must be busy or event/ });
  const dir = mkdtempSync(join(tmpdir(), 'rkv-bench-test-'));
  try {
    const url = `shm://${join(dir, 'nobody.sock')}`;
    await t.throwsAsync(db.init(new Properties([['rdmakv.url', url], ['rdmakv.timeoutms', '500']])), { message: new RegExp(`rdma-kv: cannot connect to ${url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`) });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---- kv-bench load + run -------------------------------------------------------------------------

/** `[OP], name, value` lines of YCSB's text output. */
function ycsbLines(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^\[([^\]]+)\], ([^,]+), (.+)$/.exec(line);
    if (m) out.set(`${m[1]}/${m[2]}`, m[3]!);
  }
  return out;
}

test.serial('kv-bench load + run of workloada through the binding, two worker threads', async (t) => {
  await withServer(async (url) => {
    const common = ['-P', join(WORKLOADS, 'workloada'), '-db', 'rdma-kv', '-threads', '2', '-p', `rdmakv.url=${url}`,
      '-p', 'recordcount=300', '-p', 'operationcount=600', '-p', 'kvbench.report=false', '--seed', '11'];
    let out = '';
    let err = '';
    const io = { stdout: (s: string) => void (out += s), stderr: (s: string) => void (err += s) };
    t.is(await main(['load', ...common], io), 0, err);
    const load = ycsbLines(out);
    t.is(load.get('INSERT/Operations'), '300');
    t.is(load.get('INSERT/Return=OK'), '300');
    t.is(load.get('INSERT-FAILED/Operations'), undefined);

    out = '';
    t.is(await main(['run', ...common], io), 0, err);
    const run = ycsbLines(out);
    const reads = Number(run.get('READ/Return=OK') ?? 0);
    const updates = Number(run.get('UPDATE/Return=OK') ?? 0);
    t.true(reads > 0 && updates > 0);
    t.is(reads + updates, 600, out);
    t.is(run.get('READ-FAILED/Operations'), undefined);
    t.is(run.get('UPDATE-FAILED/Operations'), undefined);
    t.regex(out, /^\[OVERALL\], Throughput\(ops\/sec\), \d/m);
    t.regex(out, /^\[READ\], 99thPercentileLatency\(us\), \d+/m);

    // what load wrote is there, as YCSB records of 10 fields of 100 bytes
    const client = await KvClient.connect({ url });
    try {
      const { buildKeyName } = await import('../../bench/ycsb/workload/keys.js');
      const value = await client.get(qualifiedKey('usertable', buildKeyName(5, 1, false)));
      t.truthy(value);
      const record = decoded(value!);
      t.is(record.size, 10);
      t.true([...record.values()].every((v) => v.length === 100));
    } finally {
      await client.close();
    }
  });
});

test.serial('dataintegrity: the values read (decoded from their bytes only to check them) verify; a changed record fails VERIFY', async (t) => {
  await withServer(async (url) => {
    const common = ['-db', 'rdma-kv', '-threads', '1', '-p', `rdmakv.url=${url}`, '-p', 'recordcount=50', '-p', 'operationcount=200',
      '-p', 'dataintegrity=true', '-p', 'kvbench.report=false', '--seed', '5'];
    let out = '';
    let err = '';
    const io = { stdout: (s: string) => void (out += s), stderr: (s: string) => void (err += s) };
    t.is(await main(['load', '-P', join(WORKLOADS, 'workloada'), ...common], io), 0, err);
    out = '';
    t.is(await main(['run', '-P', join(WORKLOADS, 'workloada'), ...common], io), 0, err);
    let run = ycsbLines(out);
    const reads = Number(run.get('READ/Return=OK') ?? 0);
    t.true(reads > 0);
    t.is(run.get('VERIFY/Return=OK'), String(reads), out);
    t.is(run.get('VERIFY/Return=UNEXPECTED_STATE'), undefined);

    // Every record rewritten with the right field names and lengths but other bytes: each read fails its check.
    const client = await KvClient.connect({ url });
    try {
      const { buildKeyName } = await import('../../bench/ycsb/workload/keys.js');
      const names = Array.from({ length: 10 }, (_, i) => `field${i}`);
      for (let k = 0; k < 50; k++) await client.put(qualifiedKey('usertable', buildKeyName(k, 1, false)), encodeFields(names, names.map(() => 'x'.repeat(100))));
    } finally {
      await client.close();
    }
    out = '';
    t.is(await main(['run', '-P', join(WORKLOADS, 'workloadc'), ...common], io), 0, err);
    run = ycsbLines(out);
    t.is(run.get('READ/Return=OK'), '200');
    t.is(run.get('VERIFY/Return=UNEXPECTED_STATE'), '200', out);
    t.is(run.get('VERIFY/Return=OK'), undefined);
  });
});
