/**
 * ZipfianGenerator and ScrambledZipfianGenerator as in YCSB (Gray et al., "Quickly Generating
 * Billion-Record Synthetic Databases", SIGMOD 1994), including YCSB's incremental extension of
 * zeta when the item count grows and its quirk of recomputing eta from the constructor's item
 * count rather than the new one.
 */
import { fnvhash64Mod } from '../hash.js';
import { Random } from '../random.js';
import type { NumberGenerator } from './number-generator.js';

export const ZIPFIAN_CONSTANT = 0.99;

/** zeta(n, theta) = sum_{i=st}^{n-1} 1/(i+1)^theta, starting from initialSum. */
export function zetaStatic(st: number, n: number, theta: number, initialSum = 0): number {
  let sum = initialSum;
  for (let i = st; i < n; i++) sum += 1 / Math.pow(i + 1, theta);
  return sum;
}

export class ZipfianGenerator implements NumberGenerator {
  readonly items: number;
  private readonly base: number;
  private readonly theta: number;
  private readonly zeta2theta: number;
  private readonly alpha: number;
  /** 1 + 0.5^theta: the cut between returning base+1 and the general formula */
  private readonly secondCut: number;
  private zetan: number;
  private eta: number;
  private countForZeta: number;
  private last = 0;
  private rankTable: ZipfianRankTable | null = null;

  constructor(
    private readonly rng: Random,
    min: number,
    max: number,
    zipfianConstant = ZIPFIAN_CONSTANT,
    zetan?: number,
  ) {
    this.items = max - min + 1;
    this.base = min;
    this.theta = zipfianConstant;
    this.zeta2theta = zetaStatic(0, 2, this.theta);
    this.alpha = 1 / (1 - this.theta);
    this.zetan = zetan ?? zetaStatic(0, this.items, this.theta);
    this.countForZeta = this.items;
    this.eta = (1 - Math.pow(2 / this.items, 1 - this.theta)) / (1 - this.zeta2theta / this.zetan);
    this.secondCut = 1 + Math.pow(0.5, this.theta);
    this.nextValue(); // YCSB draws once in the constructor
  }

  /** Generator over [0, items). */
  static ofItems(rng: Random, items: number, zipfianConstant = ZIPFIAN_CONSTANT): ZipfianGenerator {
    return new ZipfianGenerator(rng, 0, items - 1, zipfianConstant);
  }

  nextLong(itemCount: number): number {
    if (itemCount !== this.countForZeta && itemCount > this.countForZeta) {
      // more items were added: extend zeta incrementally (YCSB recomputes eta with `items`)
      this.zetan = zetaStatic(this.countForZeta, itemCount, this.theta, this.zetan);
      this.countForZeta = itemCount;
      this.eta = (1 - Math.pow(2 / this.items, 1 - this.theta)) / (1 - this.zeta2theta / this.zetan);
      this.rankTable = null; // built for the old eta
    }
    const u = this.rng.nextDouble();
    const uz = u * this.zetan;
    if (uz < 1) return this.base;
    if (uz < this.secondCut) return this.base + 1;
    const table = this.rankTable;
    const ret =
      this.base + (table !== null && u < table.end && itemCount === this.items ? table.rank(u) : this.formulaRank(u, itemCount));
    this.last = ret;
    return ret;
  }

  /**
   * Gray et al.'s rank for a draw u above the two cuts. x^alpha as exp(alpha ln x): half the
   * cost of Math.pow here, within a few ulps of it. Java's and V8's pow are not bit-identical
   * either, and the draws are random, so only the distribution has to match, and it does (see
   * the closed-form test).
   */
  private formulaRank(u: number, itemCount: number): number {
    return Math.trunc(itemCount * Math.exp(this.alpha * Math.log(this.eta * u - this.eta + 1)));
  }

  /**
   * A table of this generator's `size` most popular ranks (see ZipfianRankTable). Only for a
   * generator whose item count never grows: the table is built for the current eta.
   */
  buildRankTable(size: number): ZipfianRankTable {
    const n = this.items;
    // the formula's region starts where u * zetan reaches secondCut; start a little below it
    const start = (this.secondCut / this.zetan) * (1 - 1e-9);
    const rankOf = (u: number): number => this.formulaRank(u, n);
    // the formula solved for u, to start each threshold's search near it
    const guess = (rank: number): number => 1 - (1 - Math.pow(rank / n, 1 / this.alpha)) / this.eta;
    return ZipfianRankTable.build(rankOf, guess, start, size);
  }

  /** Looks ranks up in `table` (built by buildRankTable of a generator with the same parameters). */
  useRankTable(table: ZipfianRankTable): void {
    this.rankTable = table;
  }

  nextValue(): number {
    return this.nextLong(this.items);
  }

  lastValue(): number {
    return this.last;
  }

  mean(): number {
    throw new Error('ZipfianGenerator.mean() is not implemented (as in YCSB)');
  }

  /** Current zeta(n) (exposed for tests of the incremental extension). */
  get zeta(): number {
    return this.zetan;
  }
}

/**
 * Exact ranks of a zipfian's most popular draws by lookup instead of `exp` and `log`: about half
 * of the scrambled zipfian's draws fall on its first 65,536 ranks.
 *
 * The rank formula is non-decreasing in u: `eta * u - eta + 1` is rounded arithmetic on a
 * monotonic expression, and log, the product with alpha and exp each map two different inputs
 * to true results several ulps apart (x^alpha with alpha = 100 magnifies every step of u), more
 * than their error of under one ulp, so they cannot swap. So rank r is drawn exactly when
 * thresholds[r] <= u < thresholds[r + 1], with thresholds[r] the smallest double whose formula
 * rank is at least r, found by bisection over the doubles with the formula itself. The lookup
 * thus returns what the formula would, bit for bit (the tests compare them on millions of
 * draws and on both sides of every threshold). The arrays live in shared memory, so the client
 * threads of a run share one table (`shared`) instead of each building its own.
 */
/** A ZipfianRankTable's data, in shared memory: it can be posted to worker threads. */
export interface SharedRankTable {
  thresholds: Float64Array;
  bucketRanks: Int32Array;
  start: number;
}

export class ZipfianRankTable {
  /** draws u >= end have ranks of `size` or more: not in the table */
  readonly end: number;
  private readonly start: number;
  /** thresholds[r] = smallest u with rank(u) >= r; -Infinity for ranks at or below rank(start) */
  private readonly thresholds: Float64Array;
  /** a rank near the start of each of `size` equal slices of [start, end): the search starts there */
  private readonly bucketRanks: Int32Array;
  private readonly bucketScale: number;
  private readonly lastBucket: number;

  /** A table over arrays built by `build` (in this thread or another). */
  constructor(readonly shared: SharedRankTable) {
    this.thresholds = shared.thresholds;
    this.bucketRanks = shared.bucketRanks;
    this.start = shared.start;
    const size = this.bucketRanks.length;
    this.end = this.thresholds[size]!;
    this.bucketScale = size / (this.end - this.start);
    this.lastBucket = size - 1;
  }

  /**
   * @param rankOf the generator's formula, non-decreasing in u
   * @param guess an estimate of the smallest u of a rank (the formula solved for u)
   * @param start a draw at or below the first one the table will be asked about
   * @param size ranks below size are looked up
   */
  static build(rankOf: (u: number) => number, guess: (rank: number) => number, start: number, size: number): ZipfianRankTable {
    const thresholds = new Float64Array(new SharedArrayBuffer(8 * (size + 1)));
    const first = rankOf(start);
    thresholds.fill(-Infinity, 0, Math.min(first, size) + 1);
    for (let r = first + 1; r <= size; r++) {
      let lo = Math.max(start, thresholds[r - 1]!); // rankOf(lo) < r unless rank r - 1 is never drawn
      if (rankOf(lo) >= r) {
        thresholds[r] = lo;
        continue;
      }
      // a bracket around the estimate, widened until it holds the threshold
      const g = guess(r);
      let step = Math.max(Math.abs(g) * 4e-14, Number.MIN_VALUE);
      let hi = Math.max(g + step, lo);
      while (rankOf(hi) < r) {
        hi += step;
        step *= 2;
      }
      const below = g - step;
      if (below > lo && below < hi && rankOf(below) < r) lo = below;
      for (;;) {
        const mid = lo + (hi - lo) / 2;
        if (mid <= lo || mid >= hi) break; // adjacent doubles
        if (rankOf(mid) >= r) hi = mid;
        else lo = mid;
      }
      thresholds[r] = hi;
    }
    const bucketRanks = new Int32Array(new SharedArrayBuffer(4 * size));
    const bucketScale = size / (thresholds[size]! - start);
    for (let b = 0, r = Math.max(first, 0); b < size; b++) {
      const u = start + b / bucketScale;
      while (r + 1 < size && u >= thresholds[r + 1]!) r++;
      bucketRanks[b] = r;
    }
    return new ZipfianRankTable({ thresholds, bucketRanks, start });
  }

  /** The smallest draw whose rank is at least `rank` (-Infinity for ranks at or below the first). */
  threshold(rank: number): number {
    return this.thresholds[rank]!;
  }

  /** The rank of a draw u with start <= u < end. */
  rank(u: number): number {
    const t = this.thresholds;
    let b = ((u - this.start) * this.bucketScale) | 0;
    if (b > this.lastBucket) b = this.lastBucket;
    let r = this.bucketRanks[b]!;
    while (u >= t[r + 1]!) r++;
    while (u < t[r]!) r--;
    return r;
  }
}

/** Items of the underlying zipfian of ScrambledZipfianGenerator, and its precomputed zeta. */
export const SCRAMBLED_ITEM_COUNT = 10_000_000_000;
export const SCRAMBLED_ZETAN = 26.46902820178302;
/** ranks looked up in a table (ZipfianRankTable) and whose hashes are cached: about half of all draws */
const POPULAR_RANKS = 1 << 16;
let defaultScrambledRanks: ZipfianRankTable | undefined;

/**
 * The rank table of the default scrambled zipfian (theta 0.99), the same for every record count.
 * Built once per thread (~60 ms) unless a run's main thread shares its own (WorkloadSharedState).
 */
export function scrambledRankTable(): ZipfianRankTable {
  defaultScrambledRanks ??= new ZipfianGenerator(new Random(1), 0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN).buildRankTable(POPULAR_RANKS);
  return defaultScrambledRanks;
}

/**
 * Zipfian popularity spread over the key space: draws from a 10^10-item zipfian and hashes the
 * rank with FNV-1a 64 modulo the item count, so popular items are not clustered at the start.
 */
export class ScrambledZipfianGenerator implements NumberGenerator {
  private readonly gen: ZipfianGenerator;
  private readonly min: number;
  private readonly max: number;
  private readonly itemCount: number;
  /** fnvhash64(rank) % itemCount for the most popular ranks (about half of all draws); -1 = not yet computed */
  private readonly hashedRanks = new Float64Array(POPULAR_RANKS).fill(-1);
  private last = 0;

  /** `ranks`: the default generator's rank table (scrambledRankTable(), or one shared by another thread) */
  constructor(rng: Random, min: number, max: number, zipfianConstant = ZIPFIAN_CONSTANT, ranks?: ZipfianRankTable) {
    this.min = min;
    this.max = max;
    this.itemCount = max - min + 1;
    // YCSB passes max = ITEM_COUNT, so the underlying generator has ITEM_COUNT + 1 items
    if (zipfianConstant === ZIPFIAN_CONSTANT) {
      this.gen = new ZipfianGenerator(rng, 0, SCRAMBLED_ITEM_COUNT, zipfianConstant, SCRAMBLED_ZETAN);
      this.gen.useRankTable(ranks ?? scrambledRankTable());
    } else {
      this.gen = new ZipfianGenerator(rng, 0, SCRAMBLED_ITEM_COUNT, zipfianConstant);
    }
  }

  static ofItems(rng: Random, items: number): ScrambledZipfianGenerator {
    return new ScrambledZipfianGenerator(rng, 0, items - 1);
  }

  nextValue(): number {
    const rank = this.gen.nextValue();
    let offset: number;
    if (rank < POPULAR_RANKS) {
      offset = this.hashedRanks[rank]!;
      if (offset < 0) offset = this.hashedRanks[rank] = fnvhash64Mod(rank, this.itemCount);
    } else {
      offset = fnvhash64Mod(rank, this.itemCount);
    }
    const ret = this.min + offset;
    this.last = ret;
    return ret;
  }

  lastValue(): number {
    return this.last;
  }

  mean(): number {
    return (this.min + this.max) / 2;
  }
}
