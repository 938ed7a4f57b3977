/**
 * SkewedLatestGenerator: zipfian popularity anchored at the newest acknowledged insert, so
 * recent records are the hot ones (workload D). The zipfian's item count follows the counter,
 * which exercises ZipfianGenerator's incremental zeta.
 */
import type { Random } from '../random.js';
import type { NumberGenerator } from './number-generator.js';
import { ZipfianGenerator } from './zipfian.js';

export class SkewedLatestGenerator implements NumberGenerator {
  private readonly zipfian: ZipfianGenerator;
  private last = 0;

  constructor(rng: Random, private readonly basis: { lastValue(): number }) {
    this.zipfian = ZipfianGenerator.ofItems(rng, basis.lastValue());
    this.nextValue();
  }

  nextValue(): number {
    const max = this.basis.lastValue();
    const next = max - this.zipfian.nextLong(max);
    this.last = next;
    return next;
  }

  lastValue(): number {
    return this.last;
  }

  mean(): number {
    throw new Error("Can't compute mean of non-stationary distribution!");
  }
}
