/**
 * ZipfianGenerator and ScrambledZipfianGenerator as in YCSB (Gray et al., "Quickly Generating
 * Billion-Record Synthetic Databases", SIGMOD 1994), including YCSB's incremental extension of
 * zeta when the item count grows and its quirk of recomputing eta from the constructor's item
 * count rather than the new one.
 */
import { fnvhash64Mod } from '../hash.js';
import type { Random } from '../random.js';
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
    }
    const u = this.rng.nextDouble();
    const uz = u * this.zetan;
    if (uz < 1) return this.base;
    if (uz < this.secondCut) return this.base + 1;
    // x^alpha as exp(alpha ln x): half the cost of Math.pow here, within a few ulps of it. Java's
    // and V8's pow are not bit-identical either, and the draws are random, so only the
    // distribution has to match, and it does (see the closed-form test).
    const ret = this.base + Math.trunc(itemCount * Math.exp(this.alpha * Math.log(this.eta * u - this.eta + 1)));
    this.last = ret;
    return ret;
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

/** Items of the underlying zipfian of ScrambledZipfianGenerator, and its precomputed zeta. */
export const SCRAMBLED_ITEM_COUNT = 10_000_000_000;
export const SCRAMBLED_ZETAN = 26.46902820178302;
const HASHED_RANK_CACHE = 1 << 16;

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
  private readonly hashedRanks = new Float64Array(HASHED_RANK_CACHE).fill(-1);
  private last = 0;

  constructor(rng: Random, min: number, max: number, zipfianConstant = ZIPFIAN_CONSTANT) {
    this.min = min;
    this.max = max;
    this.itemCount = max - min + 1;
    // YCSB passes max = ITEM_COUNT, so the underlying generator has ITEM_COUNT + 1 items
    this.gen =
      zipfianConstant === ZIPFIAN_CONSTANT
        ? new ZipfianGenerator(rng, 0, SCRAMBLED_ITEM_COUNT, zipfianConstant, SCRAMBLED_ZETAN)
        : new ZipfianGenerator(rng, 0, SCRAMBLED_ITEM_COUNT, zipfianConstant);
  }

  static ofItems(rng: Random, items: number): ScrambledZipfianGenerator {
    return new ScrambledZipfianGenerator(rng, 0, items - 1);
  }

  nextValue(): number {
    const rank = this.gen.nextValue();
    let offset: number;
    if (rank < HASHED_RANK_CACHE) {
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
