// The harness's read results: each read that a binding filled is followed by a fresh result
// map, never a cleared one. A cleared Map's old table points to its successor, so a long-lived
// map cleared once per read keeps every read's table and strings alive through the scavenges
// (the main job's client threads spent ~10x longer per scavenge: docs/benchmarks.md).
import test from 'ava';
import { Properties } from '../../bench/ycsb/properties.js';
import { Random } from '../../bench/ycsb/random.js';
import { Status, type DB, type Record } from '../../bench/ycsb/db/db.js';
import { DBWrapper, newLane } from '../../bench/ycsb/client/db-wrapper.js';
import { ThreadMeasurements } from '../../bench/ycsb/measurements/thread-measurements.js';
import { CoreWorkload } from '../../bench/ycsb/workload/core-workload.js';
import { newWorkloadSharedState, parseCoreWorkloadConfig } from '../../bench/ycsb/workload/core-config.js';

/** A binding whose reads fill the result with the key (as every real binding does), sync or async. */
function fillingBinding(async: boolean, seen: Record[]): DB {
  const done = (s: Status) => (async ? Promise.resolve(s) : s);
  return {
    init: () => undefined,
    cleanup: () => undefined,
    read: (_table: string, key: string, _fields: readonly string[] | null, result: Record) => {
      expectEmpty(result);
      result.set('field0', key);
      seen.push(result);
      return done(Status.OK);
    },
    scan: () => Status.NOT_IMPLEMENTED,
    update: () => done(Status.OK),
    insert: () => done(Status.OK),
    delete: () => done(Status.OK),
  };
}

/** A binding is handed an empty map. */
function expectEmpty(result: Record): void {
  if (result.size !== 0) throw new Error(`the result map handed to read() holds ${result.size} fields`);
}

for (const [name, props] of [
  ['read', [['readproportion', '1'], ['updateproportion', '0']]],
  ['read-modify-write', [['readproportion', '0'], ['updateproportion', '0'], ['readmodifywriteproportion', '1']]],
] as [string, [string, string][]][]) {
  for (const async of [false, true]) {
    test(`${name} (${async ? 'async' : 'sync'} binding): every read gets a fresh map, and earlier results are left as they were`, async (t) => {
      const p = new Properties([['recordcount', '100'], ['operationcount', '10'], ...props]);
      const config = parseCoreWorkloadConfig(p);
      const workload = new CoreWorkload(config, newWorkloadSharedState(config), new Random(7), true);
      const seen: Record[] = [];
      const db = new DBWrapper(fillingBinding(async, seen), new ThreadMeasurements(0), p);
      const lane = newLane(workload.newFieldValues());
      for (let i = 0; i < 5; i++) await workload.doTransaction(db, lane);
      t.is(seen.length, 5);
      t.is(new Set(seen).size, 5, 'a map handed to the binding again');
      for (const result of seen) t.is(result.size, 1, 'an earlier result was cleared');
      t.is(lane.result, seen[4]!, 'the lane keeps the last result');
    });
  }
}
