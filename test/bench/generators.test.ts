import test from 'ava';
import { Random } from '../../bench/ycsb/random.js';
import {
  ScrambledZipfianGenerator,
  ZipfianGenerator,
  ZipfianRankTable,
  scrambledRankTable,
  zetaStatic,
  SCRAMBLED_ITEM_COUNT,
  SCRAMBLED_ZETAN,
} from '../../bench/ycsb/generators/zipfian.js';
import { SkewedLatestGenerator } from '../../bench/ycsb/generators/skewed-latest.js';
import { AcknowledgedCounterGenerator, ACK_WINDOW_SIZE, CounterGenerator, SequentialGenerator, newSharedCell } from '../../bench/ycsb/generators/counters.js';
import { ConstantIntegerGenerator, DiscreteGenerator, ExponentialGenerator, HotspotIntegerGenerator, UniformLongGenerator } from '../../bench/ycsb/generators/simple.js';
import { chiSquareFit, ksCritical001, ksStatistic } from './stats.js';

const N = 200_000;

/**
 * Exact distribution of Gray et al.'s zipfian algorithm as YCSB implements it: rank 0 for
 * u*zeta < 1, rank 1 below 1 + 0.5^theta, otherwise trunc(n * (eta*u - eta + 1)^alpha).
 */
function grayZipfianProbabilities(n: number, theta: number): number[] {
  const zetan = zetaStatic(0, n, theta);
  const alpha = 1 / (1 - theta);
  const eta = (1 - Math.pow(2 / n, 1 - theta)) / (1 - zetaStatic(0, 2, theta) / zetan);
  const p = new Array<number>(n).fill(0);
  const u1 = 1 / zetan;
  const u2 = (1 + Math.pow(0.5, theta)) / zetan;
  p[0] = u1;
  p[1] = u2 - u1;
  // rank k (general branch) when (k/n)^(1/alpha) <= 1 - eta(1-u) < ((k+1)/n)^(1/alpha)
  const uOf = (v: number): number => 1 - (1 - v) / eta;
  for (let k = 0; k < n; k++) {
    const lo = Math.max(u2, uOf(Math.pow(k / n, 1 / alpha)));
    const hi = Math.min(1, uOf(Math.pow((k + 1) / n, 1 / alpha)));
    if (hi > lo) p[k]! += hi - lo;
  }
  return p;
}

test('Random is reproducible per seed and nextDouble is uniform (KS)', (t) => {
  const a = new Random(7);
  const b = new Random(7);
  for (let i = 0; i < 100; i++) t.is(a.nextUint32(), b.nextUint32());
  const r = new Random(1);
  const sample = Array.from({ length: 50_000 }, () => r.nextDouble());
  t.true(sample.every((x) => x >= 0 && x < 1));
  t.true(ksStatistic(sample, (x) => x) < ksCritical001(sample.length));
});

test('UniformLongGenerator: uniform over [lb, ub] (chi-square)', (t) => {
  const g = new UniformLongGenerator(new Random(11), 10, 59);
  const counts = new Array<number>(50).fill(0);
  for (let i = 0; i < N; i++) {
    const v = g.nextValue();
    t.true(v >= 10 && v <= 59);
    counts[v - 10]!++;
  }
  const [x2, crit] = chiSquareFit(counts, new Array<number>(50).fill(1 / 50), N);
  t.true(x2 < crit, `chi2 ${x2} >= ${crit}`);
  t.is(g.mean(), 34.5);
});

test('ZipfianGenerator matches the closed form of Gray et al.\'s algorithm (chi-square)', (t) => {
  const n = 100;
  const g = ZipfianGenerator.ofItems(new Random(12), n);
  const counts = new Array<number>(n).fill(0);
  for (let i = 0; i < N; i++) counts[g.nextValue()]!++;
  const p = grayZipfianProbabilities(n, 0.99);
  t.true(Math.abs(p.reduce((a, b) => a + b, 0) - 1) < 1e-9);
  const [x2, crit] = chiSquareFit(counts, p, N);
  t.true(x2 < crit, `chi2 ${x2} >= ${crit}`);
  // and the head is Zipf's law exactly: P(0) = 1/zeta(n), P(1) = 2^-theta / zeta(n)
  const zeta = zetaStatic(0, n, 0.99);
  t.true(Math.abs(counts[0]! / N - 1 / zeta) < 0.005);
  t.true(Math.abs(counts[1]! / N - Math.pow(0.5, 0.99) / zeta) < 0.005);
});

test('ZipfianGenerator with a base offset and another constant', (t) => {
  const g = new ZipfianGenerator(new Random(13), 1000, 1019, 0.5);
  const counts = new Array<number>(20).fill(0);
  for (let i = 0; i < N; i++) {
    const v = g.nextValue();
    t.true(v >= 1000 && v < 1020);
    counts[v - 1000]!++;
  }
  const [x2, crit] = chiSquareFit(counts, grayZipfianProbabilities(20, 0.5), N);
  t.true(x2 < crit, `chi2 ${x2} >= ${crit}`);
});

test('ZipfianGenerator extends zeta incrementally when the item count grows', (t) => {
  const g = ZipfianGenerator.ofItems(new Random(14), 1000);
  t.is(g.zeta, zetaStatic(0, 1000, 0.99));
  g.nextLong(1500);
  t.true(Math.abs(g.zeta - zetaStatic(0, 1500, 0.99)) < 1e-9);
  g.nextLong(1200); // a smaller count does not shrink zeta (allowitemcountdecrease is false)
  t.true(Math.abs(g.zeta - zetaStatic(0, 1500, 0.99)) < 1e-9);
  for (let i = 0; i < 10_000; i++) t.true(g.nextLong(1500) < 1500);
});

test('ScrambledZipfianGenerator = min + fnvhash64(zipfian over 10^10 + 1 items) % itemcount', (t) => {
  t.is(SCRAMBLED_ZETAN, 26.46902820178302);
  const itemCount = 1000;
  const scrambled = new ScrambledZipfianGenerator(new Random(15), 0, itemCount - 1);
  const underlying = new ZipfianGenerator(new Random(15), 0, SCRAMBLED_ITEM_COUNT, 0.99, SCRAMBLED_ZETAN);
  const fnv = (v: bigint): bigint => {
    let h = BigInt.asIntN(64, 0xcbf29ce484222325n);
    for (let i = 0n; i < 8n; i++) h = BigInt.asIntN(64, (h ^ ((v >> (8n * i)) & 0xffn)) * 1099511628211n);
    return h < 0n ? -h : h;
  };
  for (let i = 0; i < 2000; i++) {
    t.is(scrambled.nextValue(), Number(fnv(BigInt(underlying.nextValue())) % BigInt(itemCount)));
  }
});

test('ZipfianRankTable gives the formula\'s rank bit for bit: random draws and both sides of every threshold', (t) => {
  let draw = 0;
  const fixed = { nextDouble: () => draw } as unknown as Random; // the generators draw what the test sets
  const looked = new ZipfianGenerator(fixed, 0, SCRAMBLED_ITEM_COUNT, 0.99, SCRAMBLED_ZETAN);
  const computed = new ZipfianGenerator(fixed, 0, SCRAMBLED_ITEM_COUNT, 0.99, SCRAMBLED_ZETAN);
  const size = 1 << 16;
  const table = looked.buildRankTable(size);
  looked.useRankTable(table);
  // the table covers about half of all draws (ranks below 65,536 of a 10^10-item zipfian)
  t.true(table.end > 0.45 && table.end < 0.5, `end ${table.end}`);
  const mismatches: string[] = [];
  const check = (u: number): void => {
    draw = u;
    const a = looked.nextValue();
    const b = computed.nextValue();
    if (a !== b && mismatches.length < 5) mismatches.push(`u=${u}: table ${a}, formula ${b}`);
  };
  const rng = new Random(21);
  for (let i = 0; i < 1_000_000; i++) check(rng.nextDouble() * table.end * 1.1);
  const bits = new BigInt64Array(1);
  const asDouble = new Float64Array(bits.buffer);
  const step = (u: number, by: bigint): number => {
    asDouble[0] = u;
    bits[0]! += by;
    return asDouble[0]!;
  };
  let thresholds = 0;
  for (let r = 0; r <= size; r++) {
    const u = table.threshold(r);
    if (u === -Infinity) continue;
    thresholds++;
    check(step(u, -1n));
    check(u);
    check(step(u, 1n));
    draw = u;
    t.true(computed.nextValue() >= r);
    draw = step(u, -1n);
    if (computed.nextValue() >= r) mismatches.push(`threshold of rank ${r} is not the smallest draw`);
  }
  t.true(thresholds > size - 10);
  t.deepEqual(mismatches, []);
});

test('the scrambled zipfian\'s rank table is shared memory: a copy posted to a thread draws the same keys', (t) => {
  const posted = structuredClone(scrambledRankTable().shared); // what workerData does
  t.true(posted.thresholds.buffer instanceof SharedArrayBuffer);
  t.true(posted.bucketRanks.buffer instanceof SharedArrayBuffer);
  const withPosted = new ScrambledZipfianGenerator(new Random(22), 0, 999, 0.99, new ZipfianRankTable(posted));
  const withOwn = new ScrambledZipfianGenerator(new Random(22), 0, 999);
  let differ = 0;
  for (let i = 0; i < 100_000; i++) if (withPosted.nextValue() !== withOwn.nextValue()) differ++;
  t.is(differ, 0);
});

test('ScrambledZipfianGenerator: the two most popular items are the hashes of ranks 0 and 1', (t) => {
  const itemCount = 1000;
  const g = new ScrambledZipfianGenerator(new Random(16), 0, itemCount - 1);
  const counts = new Array<number>(itemCount).fill(0);
  for (let i = 0; i < N; i++) counts[g.nextValue()]!++;
  const order = counts.map((c, i) => [c, i] as const).sort((a, b) => b[0] - a[0]);
  const hot0 = Number(BigInt(fnvMod(0n, itemCount)));
  const hot1 = Number(BigInt(fnvMod(1n, itemCount)));
  t.is(order[0]![1], hot0);
  t.is(order[1]![1], hot1);
  // rank 0 alone has probability 1/zeta(10^10) = 3.78 %
  t.true(Math.abs(counts[hot0]! / N - 1 / SCRAMBLED_ZETAN) < 0.004);
});

function fnvMod(v: bigint, m: number): bigint {
  let h = BigInt.asIntN(64, 0xcbf29ce484222325n);
  for (let i = 0n; i < 8n; i++) h = BigInt.asIntN(64, (h ^ ((v >> (8n * i)) & 0xffn)) * 1099511628211n);
  return (h < 0n ? -h : h) % BigInt(m);
}

test('SkewedLatestGenerator: max - zipfian(max) over the acknowledged counter (chi-square)', (t) => {
  const counter = new AcknowledgedCounterGenerator(AcknowledgedCounterGenerator.newState(201));
  t.is(counter.lastValue(), 200);
  const g = new SkewedLatestGenerator(new Random(17), counter);
  const counts = new Array<number>(200).fill(0);
  for (let i = 0; i < N; i++) {
    const v = g.nextValue();
    t.true(v <= 200 && v > 0);
    counts[200 - v]!++;
  }
  const [x2, crit] = chiSquareFit(counts, grayZipfianProbabilities(200, 0.99), N);
  t.true(x2 < crit, `chi2 ${x2} >= ${crit}`);
});

test('SkewedLatestGenerator follows new acknowledged inserts', (t) => {
  const counter = new AcknowledgedCounterGenerator(AcknowledgedCounterGenerator.newState(100));
  const g = new SkewedLatestGenerator(new Random(18), counter);
  for (let i = 0; i < 50; i++) counter.acknowledge(counter.nextValue());
  t.is(counter.lastValue(), 149);
  let sawNew = false;
  for (let i = 0; i < 10_000; i++) {
    const v = g.nextValue();
    t.true(v <= 149);
    if (v > 99) sawNew = true;
  }
  t.true(sawNew);
});

test('AcknowledgedCounterGenerator: limit moves only over contiguous acknowledgements', (t) => {
  const c = new AcknowledgedCounterGenerator(AcknowledgedCounterGenerator.newState(10));
  t.is(c.lastValue(), 9);
  const [a, b, d] = [c.nextValue(), c.nextValue(), c.nextValue()];
  t.deepEqual([a, b, d], [10, 11, 12]);
  c.acknowledge(11);
  t.is(c.lastValue(), 9);
  c.acknowledge(12);
  t.is(c.lastValue(), 9);
  c.acknowledge(10);
  t.is(c.lastValue(), 12);
});

test('AcknowledgedCounterGenerator: a full window of unacknowledged keys is an error', (t) => {
  const c = new AcknowledgedCounterGenerator(AcknowledgedCounterGenerator.newState(0));
  c.nextValue(); // 0 stays unacknowledged
  c.acknowledge(5);
  t.throws(() => c.acknowledge(5 + ACK_WINDOW_SIZE), { message: 'Too many unacknowledged insertion keys.' });
});

test('CounterGenerator and SequentialGenerator share their counter', (t) => {
  const cell = newSharedCell(5);
  const c1 = new CounterGenerator(cell);
  const c2 = new CounterGenerator(cell);
  t.deepEqual([c1.nextValue(), c2.nextValue(), c1.nextValue()], [5, 6, 7]);
  t.is(c2.lastValue(), 7);
  const seqCell = newSharedCell(0);
  const s1 = new SequentialGenerator(seqCell, 3, 5);
  const s2 = new SequentialGenerator(seqCell, 3, 5);
  t.deepEqual([s1.nextValue(), s2.nextValue(), s1.nextValue(), s2.nextValue()], [3, 4, 5, 3]);
});

test('HotspotIntegerGenerator: hot set gets hotopnfraction of draws, uniformly (chi-square)', (t) => {
  const g = new HotspotIntegerGenerator(new Random(19), 0, 99, 0.2, 0.8);
  t.is(g.hotInterval, 20);
  const counts = new Array<number>(100).fill(0);
  for (let i = 0; i < N; i++) counts[g.nextValue()]!++;
  const p = counts.map((_, i) => (i < 20 ? 0.8 / 20 : 0.2 / 80));
  const [x2, crit] = chiSquareFit(counts, p, N);
  t.true(x2 < crit, `chi2 ${x2} >= ${crit}`);
  t.true(Math.abs(g.mean() - (0.8 * 10 + 0.2 * 60)) < 1e-9);
});

test('ExponentialGenerator: KS against 1 - exp(-gamma x), percentile parameterisation', (t) => {
  const g = new ExponentialGenerator(new Random(20), 95, 1000);
  t.true(Math.abs(g.gamma - -Math.log(0.05) / 1000) < 1e-15);
  const sample = Array.from({ length: 50_000 }, () => g.nextValue());
  t.true(ksStatistic(sample, (x) => 1 - Math.exp(-g.gamma * x)) < ksCritical001(sample.length));
  const below = sample.filter((x) => x < 1000).length / sample.length;
  t.true(Math.abs(below - 0.95) < 0.01);
});

test('DiscreteGenerator picks by weight (chi-square) and ConstantIntegerGenerator is constant', (t) => {
  const g = new DiscreteGenerator(new Random(21));
  g.addValue(0.5, 'READ');
  g.addValue(0.3, 'UPDATE');
  g.addValue(0.2, 'SCAN');
  const counts = [0, 0, 0];
  for (let i = 0; i < N; i++) counts[g.nextIndex()]!++;
  const [x2, crit] = chiSquareFit(counts, [0.5, 0.3, 0.2], N);
  t.true(x2 < crit, `chi2 ${x2} >= ${crit}`);
  t.is(new DiscreteGenerator(new Random(1)).nextString(), null);
  const c = new ConstantIntegerGenerator(100);
  t.deepEqual([c.nextValue(), c.nextValue(), c.mean()], [100, 100, 100]);
});
