/**
 * Seedable PRNG standing in for Java's ThreadLocalRandom (which YCSB uses and which cannot be
 * seeded). xoshiro128** is small, fast in JS (32-bit integer ops only) and statistically sound;
 * tests seed it to get reproducible samples, real runs seed it from the OS.
 */
import { randomBytes } from 'node:crypto';

const TWO_POW_32 = 4294967296;
const TWO_POW_53_INV = 1 / 9007199254740992;

export class Random {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed?: number) {
    if (seed === undefined) {
      const bytes = randomBytes(16);
      this.a = bytes.readUInt32LE(0);
      this.b = bytes.readUInt32LE(4);
      this.c = bytes.readUInt32LE(8);
      this.d = bytes.readUInt32LE(12);
    } else {
      // splitmix32 spreads a small integer seed over the 128-bit state
      let s = seed >>> 0;
      const next = (): number => {
        s = (s + 0x9e3779b9) | 0;
        let z = s;
        z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
        z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
        return (z ^ (z >>> 16)) >>> 0;
      };
      this.a = next();
      this.b = next();
      this.c = next();
      this.d = next();
    }
    if ((this.a | this.b | this.c | this.d) === 0) this.d = 1;
  }

  /** Uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result;
  }

  /** Signed 32-bit integer, like Java's Random.nextInt(). */
  nextInt32(): number {
    return this.nextUint32() | 0;
  }

  /** Uniform double in [0, 1) with 53 random bits, like Java's nextDouble(). */
  nextDouble(): number {
    const hi = this.nextUint32() >>> 5; // 27 bits
    const lo = this.nextUint32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) * TWO_POW_53_INV;
  }

  /**
   * Uniform integer in [0, bound), bound <= 2^53. YCSB writes Math.abs(nextLong()) % bound; both
   * are uniform up to a bias below 2^-11 for any realistic bound.
   */
  nextBelow(bound: number): number {
    if (bound <= TWO_POW_32) return Math.floor((this.nextUint32() / TWO_POW_32) * bound);
    return Math.floor(this.nextDouble() * bound);
  }

  /** A fresh seed for a child generator (one per worker thread). */
  nextSeed(): number {
    return this.nextUint32();
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
