/**
 * Seedable PRNG standing in for Java's ThreadLocalRandom (which YCSB uses and which cannot be
 * seeded). xoshiro128** is small, fast in JS (32-bit integer ops only) and statistically sound;
 * tests seed it to get reproducible samples, real runs seed it from the OS.
 */
import { randomBytes } from 'node:crypto';

const TWO_POW_32 = 4294967296;
const TWO_POW_53_INV = 1 / 9007199254740992;

export class Random {
  /**
   * The 128-bit state a, b, c, d. An Int32Array rather than four fields: values above 2^30 in
   * object fields are boxed, and nextUint32 runs several times per operation.
   */
  private readonly s = new Int32Array(4);

  constructor(seed?: number) {
    const s = this.s;
    if (seed === undefined) {
      const bytes = randomBytes(16);
      for (let i = 0; i < 4; i++) s[i] = bytes.readInt32LE(4 * i);
    } else {
      // splitmix32 spreads a small integer seed over the 128-bit state
      let x = seed >>> 0;
      for (let i = 0; i < 4; i++) {
        x = (x + 0x9e3779b9) | 0;
        let z = x;
        z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
        z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
        s[i] = z ^ (z >>> 16);
      }
    }
    if ((s[0]! | s[1]! | s[2]! | s[3]!) === 0) s[3] = 1;
  }

  /** Uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const s = this.s;
    const a = s[0]!;
    const b = s[1]!;
    const result = Math.imul(rotl(Math.imul(b, 5), 7), 9) >>> 0;
    const c = s[2]! ^ a;
    const d = s[3]! ^ b;
    s[0] = a ^ d;
    s[1] = b ^ c;
    s[2] = c ^ (b << 9);
    s[3] = rotl(d, 11);
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
