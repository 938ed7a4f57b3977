/** The stateless YCSB generators: uniform, hotspot, exponential, constant, discrete, histogram. */
import { readFileSync } from 'node:fs';
import { UsageError } from '../../../protocol/operator-input.js';
import type { Random } from '../random.js';
import type { NumberGenerator } from './number-generator.js';

/** UniformLongGenerator: uniform over [lb, ub]. */
export class UniformLongGenerator implements NumberGenerator {
  private readonly interval: number;
  private last = 0;

  constructor(private readonly rng: Random, private readonly lb: number, private readonly ub: number) {
    this.interval = ub - lb + 1;
  }

  nextValue(): number {
    const ret = this.rng.nextBelow(this.interval) + this.lb;
    this.last = ret;
    return ret;
  }

  lastValue(): number {
    return this.last;
  }

  mean(): number {
    return (this.lb + this.ub) / 2;
  }
}

/**
 * HotspotIntegerGenerator: a fraction hotOpnFraction of draws fall uniformly in the first
 * hotsetFraction of [lower, upper], the rest uniformly in the remainder.
 */
export class HotspotIntegerGenerator implements NumberGenerator {
  readonly lowerBound: number;
  readonly upperBound: number;
  readonly hotInterval: number;
  readonly coldInterval: number;
  readonly hotsetFraction: number;
  readonly hotOpnFraction: number;
  private last = 0;

  constructor(private readonly rng: Random, lowerBound: number, upperBound: number, hotsetFraction: number, hotOpnFraction: number) {
    if (hotsetFraction < 0 || hotsetFraction > 1) {
      process.stderr.write('Hotset fraction out of range. Setting to 0.0\n');
      hotsetFraction = 0;
    }
    if (hotOpnFraction < 0 || hotOpnFraction > 1) {
      process.stderr.write('Hot operation fraction out of range. Setting to 0.0\n');
      hotOpnFraction = 0;
    }
    if (lowerBound > upperBound) {
      process.stderr.write('Upper bound of Hotspot generator smaller than the lower bound. Swapping the values.\n');
      [lowerBound, upperBound] = [upperBound, lowerBound];
    }
    this.lowerBound = lowerBound;
    this.upperBound = upperBound;
    this.hotsetFraction = hotsetFraction;
    const interval = upperBound - lowerBound + 1;
    this.hotInterval = Math.trunc(interval * hotsetFraction);
    this.coldInterval = interval - this.hotInterval;
    this.hotOpnFraction = hotOpnFraction;
    // Java would throw ArithmeticException (% 0) on the first draw from an empty set
    if (this.hotInterval === 0 && hotOpnFraction > 0) throw new UsageError('hotspotdatafraction leaves an empty hot set');
    if (this.coldInterval === 0 && hotOpnFraction < 1) throw new UsageError('hotspotdatafraction leaves an empty cold set');
  }

  nextValue(): number {
    const value =
      this.rng.nextDouble() < this.hotOpnFraction
        ? this.lowerBound + this.rng.nextBelow(this.hotInterval)
        : this.lowerBound + this.hotInterval + this.rng.nextBelow(this.coldInterval);
    this.last = value;
    return value;
  }

  lastValue(): number {
    return this.last;
  }

  mean(): number {
    return (
      this.hotOpnFraction * (this.lowerBound + this.hotInterval / 2) +
      (1 - this.hotOpnFraction) * (this.lowerBound + this.hotInterval + this.coldInterval / 2)
    );
  }
}

export const EXPONENTIAL_PERCENTILE_PROPERTY = 'exponential.percentile';
export const EXPONENTIAL_PERCENTILE_DEFAULT = 95;
export const EXPONENTIAL_FRAC_PROPERTY = 'exponential.frac';
export const EXPONENTIAL_FRAC_DEFAULT = 0.8571428571;

/** ExponentialGenerator: -ln(U)/gamma; with (percentile, range), percentile% of draws fall below range. */
export class ExponentialGenerator implements NumberGenerator {
  readonly gamma: number;
  private last = 0;

  constructor(private readonly rng: Random, percentileOrMean: number, range?: number) {
    this.gamma = range === undefined ? 1 / percentileOrMean : -Math.log(1 - percentileOrMean / 100) / range;
  }

  nextValue(): number {
    const v = -Math.log(this.rng.nextDouble()) / this.gamma;
    this.last = v;
    return v;
  }

  lastValue(): number {
    return this.last;
  }

  mean(): number {
    return 1 / this.gamma;
  }
}

/** ConstantIntegerGenerator. */
export class ConstantIntegerGenerator implements NumberGenerator {
  constructor(private readonly value: number) {}
  nextValue(): number {
    return this.value;
  }
  lastValue(): number {
    return this.value;
  }
  mean(): number {
    return this.value;
  }
}

/**
 * DiscreteGenerator: picks one of the added values with probability weight / sum(weights).
 * Returns the index of the value (the caller keeps the names) to avoid string compares per op.
 */
export class DiscreteGenerator {
  private readonly weights: number[] = [];
  readonly values: string[] = [];
  private normalised: Float64Array = new Float64Array(0);

  constructor(private readonly rng: Random) {}

  addValue(weight: number, value: string): void {
    this.weights.push(weight);
    this.values.push(value);
    const sum = this.weights.reduce((a, b) => a + b, 0);
    this.normalised = Float64Array.from(this.weights, (w) => w / sum);
  }

  /** Index into `values`, or -1 when no value was added. */
  nextIndex(): number {
    let val = this.rng.nextDouble();
    const pw = this.normalised;
    for (let i = 0; i < pw.length; i++) {
      if (val < pw[i]!) return i;
      val -= pw[i]!;
    }
    // rounding can leave val just above the last weight; Java throws AssertionError here
    return pw.length - 1;
  }

  nextString(): string | null {
    const i = this.nextIndex();
    return i < 0 ? null : this.values[i]!;
  }
}

/**
 * HistogramGenerator (fieldlengthdistribution=histogram): a file whose first line is
 * "BlockSize<TAB>n" followed by "bucket<TAB>count" lines.
 */
export class HistogramGenerator implements NumberGenerator {
  private readonly area: number;
  private readonly meanSize: number;
  private last = 0;

  constructor(private readonly rng: Random, private readonly blockSize: number, private readonly buckets: readonly number[]) {
    let area = 0;
    let weighted = 0;
    buckets.forEach((b, i) => {
      area += b;
      weighted += i * b;
    });
    this.area = area;
    this.meanSize = (blockSize * weighted) / area;
  }

  static fromFile(rng: Random, path: string): HistogramGenerator {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch {
      throw new UsageError(`Couldn't read field length histogram file: ${path}`);
    }
    const lines = text.split(/\r?\n/).filter((l) => l !== '');
    const first = lines.shift()?.split('\t');
    if (!first || first[0] !== 'BlockSize') throw new UsageError(`${path}: first line of histogram is not the BlockSize`);
    const blockSize = parseStrictInt(first[1], path);
    const buckets: number[] = [];
    for (const line of lines) {
      const [bucket, count] = line.split('\t');
      buckets.splice(parseStrictInt(bucket, path), 0, parseStrictInt(count, path)); // ArrayList.add(index, value)
    }
    return new HistogramGenerator(rng, blockSize, buckets);
  }

  nextValue(): number {
    let number = Math.floor(this.rng.nextDouble() * this.area);
    let i: number;
    for (i = 0; i < this.buckets.length - 1; i++) {
      number -= this.buckets[i]!;
      if (number <= 0) return (this.last = (i + 1) * this.blockSize);
    }
    return (this.last = i * this.blockSize);
  }

  lastValue(): number {
    return this.last;
  }

  mean(): number {
    return this.meanSize;
  }
}

function parseStrictInt(text: string | undefined, path: string): number {
  if (text === undefined || !/^[+-]?\d+$/.test(text.trim())) throw new UsageError(`${path}: "${text ?? ''}" is not an integer`);
  return Number(text);
}
