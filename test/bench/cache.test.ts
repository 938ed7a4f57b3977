/**
 * kv-bench cache mode's pieces, without servers: the workload's zipfian request sequence and
 * its values, the read-through loop against fake stores (hits, misses, refused PUTs, wrong
 * values, a failing store), the goal per policy, and how a kv-server without --eviction is
 * recognized. Behaviour only: no timing.
 */
import test from 'ava';

import { zetaStatic } from '../../bench/ycsb/generators/zipfian.js';
import { hitRatioPercent, readThrough, type CacheStore } from '../../bench/ycsb/cache/read-through.js';
import { cacheGoals, type CacheRow } from '../../bench/ycsb/cache/run.js';
import { cacheSettings } from '../../bench/ycsb/cache/options.js';
import { refusedEviction } from '../../bench/ycsb/cache/stores.js';
import { Properties } from '../../bench/ycsb/properties.js';
import { UsageError } from '../../protocol/operator-input.js';
import { CacheWorkload, type CacheWorkloadOptions } from '../../bench/ycsb/cache/workload.js';

const base: CacheWorkloadOptions = { keys: 1000, valueBytes: 64, warmup: 0, operations: 200_000, theta: 0.99, seed: 7 };

test('the request sequence: keynums in range, the same for the same seed, another for another seed', (t) => {
  const a = new CacheWorkload(base);
  t.is(a.sequence.length, base.warmup + base.operations);
  t.true(a.sequence.every((k) => k < base.keys));
  t.deepEqual(new CacheWorkload(base).sequence, a.sequence);
  t.notDeepEqual(new CacheWorkload({ ...base, seed: 8 }).sequence, a.sequence);
  t.is(new CacheWorkload({ ...base, warmup: 500, operations: 1500 }).sequence.length, 2000);
});

test('the request sequence is skewed as YCSB\'s zipfian: ranks 0 and 1 take their exact shares, popularity falls by decade', (t) => {
  const w = new CacheWorkload(base);
  const counts = new Uint32Array(base.keys);
  for (const k of w.sequence) counts[k]!++;
  const n = w.sequence.length;
  const zetaN = zetaStatic(0, base.keys, base.theta);
  // Gray et al.'s generator returns rank 0 for u·ζ(n) < 1 and rank 1 below 1 + 0.5^θ: exact
  // shares (200,000 draws: a share's standard error is under 0.12 points; 1 point is 8 of them)
  const shares = [1 / zetaN, Math.pow(0.5, base.theta) / zetaN];
  shares.forEach((expected, rank) => t.true(Math.abs(counts[rank]! / n - expected) < 0.01, `rank ${rank}: ${((100 * counts[rank]!) / n).toFixed(2)} % against ${(100 * expected).toFixed(2)} %`));
  const mean = (from: number, to: number): number => counts.slice(from, to).reduce((a, c) => a + c, 0) / (to - from);
  t.true(mean(0, 10) > mean(10, 100) && mean(10, 100) > mean(100, 1000));
  t.true(mean(0, 100) * 100 > n / 2, 'the top tenth of the keys takes most requests');
});

test('key names are YCSB\'s and distinct; a value carries its keynum and is checked by it', (t) => {
  const w = new CacheWorkload({ ...base, operations: 1 });
  t.true(w.names.every((name) => name.startsWith('user')));
  t.is(new Set(w.names).size, base.keys);
  const buffer = Buffer.alloc(base.valueBytes);
  const v = w.valueOf(42, buffer);
  t.is(v, buffer);
  t.is(v.readUInt32LE(0), 42);
  t.true(w.isValueOf(42, v, true));
  t.false(w.isValueOf(43, v, false));
  t.false(w.isValueOf(42, v.subarray(0, 32), false));
  const damaged = Buffer.from(v);
  damaged[40] ^= 1;
  t.true(w.isValueOf(42, damaged, false)); // the cheap check reads the keynum only
  t.false(w.isValueOf(42, damaged, true));
  t.throws(() => w.valueOf(1, Buffer.alloc(8)), { instanceOf: RangeError });
});

/** A cache of `capacity` keys evicting the least recently used, counting what it was asked. */
class FakeLru implements CacheStore {
  readonly map = new Map<string, Buffer>();
  gets = 0;
  puts = 0;
  constructor(private readonly capacity: number) {}
  async get(key: string): Promise<Buffer | undefined> {
    this.gets++;
    await Promise.resolve();
    const v = this.map.get(key);
    if (v !== undefined) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }
  async put(key: string, value: Buffer): Promise<boolean> {
    this.puts++;
    await Promise.resolve();
    this.map.delete(key);
    this.map.set(key, Buffer.from(value)); // the loop reuses its buffer: a store keeps a copy
    if (this.map.size > this.capacity) this.map.delete(this.map.keys().next().value!);
    return true;
  }
}

test('read-through, one lane: a miss is followed by a PUT; every first request of a key misses, the rest hit in a cache that holds them all', async (t) => {
  const w = new CacheWorkload({ ...base, operations: 20_000 });
  const store = new FakeLru(Infinity);
  const r = await readThrough(store, w, 0, w.sequence.length, 1);
  const distinct = new Set(w.sequence).size;
  t.is(r.operations, 20_000);
  t.is(r.misses, distinct);
  t.is(r.hits, 20_000 - distinct);
  t.is(store.puts, distinct);
  t.is(store.gets, 20_000);
  t.is(r.notCached, 0);
  t.is(r.wrong, 0);
  t.is(hitRatioPercent(r), (100 * (20_000 - distinct)) / 20_000);
  t.true(r.latencyUs.p50 > 0 && r.latencyUs.p99 >= r.latencyUs.p50 && r.latencyUs.max >= r.latencyUs.p99);
});

test('read-through, many lanes over a range: each request once; a smaller cache hits less; a warm cache more', async (t) => {
  const w = new CacheWorkload({ ...base, warmup: 10_000, operations: 30_000 });
  const small = new FakeLru(50);
  const big = new FakeLru(500);
  const rs = await readThrough(small, w, 0, 30_000, 16);
  const rb = await readThrough(big, w, 0, 30_000, 16);
  for (const [r, s] of [[rs, small], [rb, big]] as const) {
    t.is(r.operations, 30_000);
    t.is(r.hits + r.misses, 30_000);
    t.is(s.gets, 30_000);
    t.is(s.puts, r.misses);
  }
  t.true(rs.hits < rb.hits);
  // the measured part after a warm-up: the same requests, a cache already filled by the ones before
  const cold = await readThrough(new FakeLru(500), w, 10_000, 40_000, 16);
  const warm = new FakeLru(500);
  await readThrough(warm, w, 0, 10_000, 16);
  const measured = await readThrough(warm, w, 10_000, 40_000, 16);
  t.is(measured.operations, 30_000);
  t.true(measured.hits > cold.hits);
});

test('read-through: PUTs refused for lack of memory are counted as not cached, and those keys keep missing', async (t) => {
  const w = new CacheWorkload({ ...base, operations: 5_000 });
  const full: CacheStore = { get: async () => undefined, put: async () => false };
  const r = await readThrough(full, w, 0, 5_000, 4);
  t.like(r, { operations: 5_000, hits: 0, misses: 5_000, notCached: 5_000, wrong: 0 });
  t.is(hitRatioPercent(r), 0);
});

test('read-through: a hit with another key\'s value, or damaged bytes, is counted wrong', async (t) => {
  const w = new CacheWorkload({ ...base, operations: 3_000 });
  const other = w.valueOf(999_999, Buffer.alloc(base.valueBytes));
  const liar: CacheStore = { get: async () => other, put: async () => true };
  const r = await readThrough(liar, w, 0, 3_000, 2);
  t.is(r.hits, 3_000);
  t.is(r.wrong, 3_000);
  // a value right in length and keynum but damaged after it: found by the full check of every 1024th hit
  const damagedStore: CacheStore = {
    get: async (key) => {
      const k = w.names.indexOf(key);
      const v = Buffer.from(w.valueOf(k, Buffer.alloc(base.valueBytes)));
      v[10] ^= 0xff;
      return v;
    },
    put: async () => true,
  };
  const d = await readThrough(damagedStore, w, 0, 3_000, 1);
  t.is(d.wrong, 2); // hits 1024 and 2048
});

test('read-through: a store\'s error rejects the run once every lane has stopped, and no request starts after it', async (t) => {
  const w = new CacheWorkload({ ...base, operations: 10_000 });
  let gets = 0;
  let inFlight = 0;
  let afterFailure = 0;
  let failed = false;
  const failing: CacheStore = {
    get: async () => {
      if (failed) afterFailure++;
      gets++;
      inFlight++;
      await new Promise((resolve) => setImmediate(resolve));
      inFlight--;
      if (gets === 100) {
        failed = true;
        throw new Error('connection lost');
      }
      return undefined;
    },
    put: async () => true,
  };
  await t.throwsAsync(readThrough(failing, w, 0, 10_000, 8), { message: 'connection lost' });
  t.is(inFlight, 0);
  t.is(afterFailure, 0);
  t.true(gets < 10_000);
});

const row = (db: CacheRow['db'], policy: CacheRow['policy'], hit: number, cpu: number): CacheRow => ({
  db,
  policy,
  result: { operations: 1, hits: 0, misses: 0, notCached: 0, wrong: 0, seconds: 1, latencyUs: { p50: 1, p99: 1, max: 1 } },
  hitRatioPercent: hit,
  serverCpuUsPerOp: cpu,
});

test('the goal per policy: within 2 points of Redis\'s hit ratio or better, at lower server CPU; only where both ran', (t) => {
  const goals = cacheGoals([
    row('rdma-kv', 'lru', 70.5, 1),
    row('redis', 'lru', 72, 3),
    row('rdma-kv', 'lfu', 75, 1),
    row('redis', 'lfu', 77.5, 3),
    row('rdma-kv', 'none', 80, 1),
    row('redis', 'none', 80, 3),
    { db: 'rdma-kv', policy: 'none', unavailable: 'not built (server has no --eviction)' },
  ]);
  t.deepEqual(goals.map((g) => [g.policy, g.met]), [['lru', true], ['lfu', false]]);
  t.is(goals[0]!.hitRatioPoints, -1.5);
  t.is(goals[0]!.serverCpuRatio, 1 / 3);
  t.false(cacheGoals([row('rdma-kv', 'lru', 80, 3), row('redis', 'lru', 70, 2)])[0]!.met); // more CPU
  t.deepEqual(cacheGoals([{ db: 'rdma-kv', policy: 'lru', unavailable: 'not built (server has no --eviction)' }, row('redis', 'lru', 70, 2)]), []);
});

test('a kv-server without --eviction is recognized by its refusal naming the flag; other start failures are not', (t) => {
  // what compare/servers.ts's startKvServer throws when kv-server exits before it is ready
  t.true(refusedEviction('kv-server did not start: it exited (code 2) before it was ready: kv-server: Unknown argument: eviction (see kv-server --help)'));
  t.true(refusedEviction('kv-server did not start: it exited (code 2) before it was ready: kv-server: unknown option --eviction'));
  t.false(refusedEviction('kv-server did not start: it exited (code 2) before it was ready: kv-server: --eviction: \'lfu2\' is not none, lru or lfu'));
  t.false(refusedEviction('kv-server did not start: it exited (code 1) before it was ready: memory too small'));
});

test('cache.kvserverargs: the watermarks and --grace-ms pass; --eviction, --memory and the like are the benchmark\'s own', (t) => {
  const settings = (args: string) => cacheSettings(new Properties([['cache.kvserverargs', args]]), {});
  t.deepEqual(settings('--eviction-high 97 --eviction-low 94 --grace-ms 50').kvServerArgs, ['--eviction-high', '97', '--eviction-low', '94', '--grace-ms', '50']);
  t.deepEqual(settings('--eviction-high=97').kvServerArgs, ['--eviction-high=97']);
  for (const own of ['--eviction lru', '--eviction=lfu', '--memory 1GiB', '--buckets 1024']) {
    t.throws(() => settings(own), { instanceOf: UsageError, message: /is set by kv-bench cache itself/ }, own);
  }
});
