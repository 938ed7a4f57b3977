// The harness's read results: a lane keeps one ReadResult and empties it before each read, so a
// binding is always handed an empty result and a read allocates no map. Values a binding hands
// over as bytes are decoded only when read (as YCSB's ByteIterator), so a run without
// dataintegrity makes no string per field (docs/benchmarks.md).
import test from 'ava';
import { Properties } from '../../bench/ycsb/properties.js';
import { Random } from '../../bench/ycsb/random.js';
import { Status, type DB } from '../../bench/ycsb/db/db.js';
import { ReadResult } from '../../bench/ycsb/db/read-result.js';
import { DBWrapper, newLane } from '../../bench/ycsb/client/db-wrapper.js';
import { ThreadMeasurements } from '../../bench/ycsb/measurements/thread-measurements.js';
import { CoreWorkload } from '../../bench/ycsb/workload/core-workload.js';
import { newWorkloadSharedState, parseCoreWorkloadConfig } from '../../bench/ycsb/workload/core-config.js';

/** A binding whose reads fill the result with the key (as every real binding does), sync or async; it records what each read was handed. */
function fillingBinding(async: boolean, seen: { result: ReadResult; sizeHanded: number; key: string }[]): DB {
  const done = (s: Status) => (async ? Promise.resolve(s) : s);
  return {
    init: () => undefined,
    cleanup: () => undefined,
    read: (_table: string, key: string, _fields: readonly string[] | null, result: ReadResult) => {
      seen.push({ result, sizeHanded: result.size, key });
      result.set('field0', key);
      return done(Status.OK);
    },
    scan: () => Status.NOT_IMPLEMENTED,
    update: () => done(Status.OK),
    insert: () => done(Status.OK),
    delete: () => done(Status.OK),
  };
}

for (const [name, props] of [
  ['read', [['readproportion', '1'], ['updateproportion', '0']]],
  ['read-modify-write', [['readproportion', '0'], ['updateproportion', '0'], ['readmodifywriteproportion', '1']]],
] as [string, [string, string][]][]) {
  for (const async of [false, true]) {
    test(`${name} (${async ? 'async' : 'sync'} binding): every read is handed the lane's one result, empty`, async (t) => {
      const p = new Properties([['recordcount', '100'], ['operationcount', '10'], ...props]);
      const config = parseCoreWorkloadConfig(p);
      const workload = new CoreWorkload(config, newWorkloadSharedState(config), new Random(7), true);
      const seen: { result: ReadResult; sizeHanded: number; key: string }[] = [];
      const db = new DBWrapper(fillingBinding(async, seen), new ThreadMeasurements(0), p);
      const lane = newLane(workload.newFieldValues());
      for (let i = 0; i < 5; i++) {
        await workload.doTransaction(db, lane);
        t.deepEqual(lane.result.toObject(), { field0: seen[i]!.key }, 'after the read: what the binding set, nothing of earlier reads');
      }
      t.is(seen.length, 5);
      t.deepEqual(seen.map((s) => s.sizeHanded), [0, 0, 0, 0, 0], 'a binding is handed an empty result');
      t.true(seen.every((s) => s.result === lane.result), 'no new result per read');
    });
  }
}

test('ReadResult: set replaces a field of the same name; clear empties it; fields keep the order they were first set in', (t) => {
  const r = new ReadResult();
  r.set('b', '1').set('a', '2').set('b', '3');
  t.is(r.size, 2);
  t.deepEqual([...r], [['b', '3'], ['a', '2']]);
  t.deepEqual([r.nameAt(0), r.valueAt(0)], ['b', '3']);
  t.true(r.has('a'));
  t.false(r.has('c'));
  t.is(r.get('c'), undefined);
  r.clear();
  t.is(r.size, 0);
  t.is(r.get('b'), undefined);
  t.false(r.has('a'));
  r.set('c', '4');
  t.deepEqual(r.toObject(), { c: '4' });
});

test('ReadResult: a value set as bytes is decoded when read (latin1 or UTF-8), not before', (t) => {
  const bytes = Buffer.from('xxhelloyycafé ☕', 'utf8');
  const r = new ReadResult();
  r.setBytes('ascii', bytes, 2, 7, true);
  r.setBytes('utf8', bytes, 9, bytes.length, false);
  bytes.write('HELLO', 2, 'latin1'); // before the first read: the read sees what the bytes hold then
  t.is(r.get('ascii'), 'HELLO');
  t.is(r.get('utf8'), 'café ☕');
  bytes.write('hello', 2, 'latin1'); // after it: the decoded text stays
  t.is(r.get('ascii'), 'HELLO');
  r.set('ascii', 'text');
  t.is(r.get('ascii'), 'text', 'a text value replaces a bytes value');
  r.setBytes('ascii', bytes, 2, 7, true);
  t.is(r.get('ascii'), 'hello', 'and a bytes value a text value');
});
