/**
 * The main thread's view of all measurements: interval snapshots from every client thread are
 * merged into hdr-histogram-js histograms — a total per measurement (what the exporters print),
 * one since the last status line, and one per sampling tick (for the report's time series).
 */
import * as hdr from 'hdr-histogram-js';
import { javaHashOrder } from '../java-format.js';
import { javaStringHashCode } from '../hash.js';
import { valueFromIndex } from './recorder.js';
import type { MeasurementSnapshot, StatusCount } from './thread-measurements.js';

export type Histogram = hdr.Histogram;

export function newHistogram(): Histogram {
  return hdr.build({ bitBucketSize: 64, numberOfSignificantValueDigits: 3, autoResize: true });
}

/** Statistics as YCSB's HdrHistogram exporter and status lines compute them. */
export interface LatencySummary {
  count: number;
  mean: number;
  min: number;
  max: number;
  percentile(p: number): number;
}

type JsHistogramInternals = {
  getCountAtIndex(i: number): number;
  lowestEquivalentValue(v: number): number;
  highestEquivalentValue(v: number): number;
  minNonZeroValue: number;
  maxValue: number;
};

/** HdrHistogram 2.1.12 (YCSB's) semantics, including 0 for everything when empty. */
export function summarize(h: Histogram): LatencySummary {
  const count = h.totalCount;
  if (count === 0) return { count: 0, mean: 0, min: 0, max: 0, percentile: () => 0 };
  const js = h as unknown as JsHistogramInternals;
  return {
    count,
    mean: h.mean,
    // getMinValue(): 0 if zeros were recorded, else the lowest value equivalent to the smallest non-zero one
    min: js.getCountAtIndex(0) > 0 ? 0 : js.lowestEquivalentValue(js.minNonZeroValue),
    max: js.maxValue === 0 ? 0 : js.highestEquivalentValue(js.maxValue),
    percentile: (p) => h.getValueAtPercentile(p),
  };
}

export function addSnapshot(h: Histogram, indices: readonly number[], counts: readonly number[]): void {
  for (let i = 0; i < indices.length; i++) h.recordValueWithCount(valueFromIndex(indices[i]!), counts[i]!);
}

export class AggregatedMeasurement {
  readonly total = newHistogram();
  /** since the last status line */
  readonly sinceStatus = newHistogram();
  /** since the last time-series sample */
  readonly sinceSample = newHistogram();
  /** return codes in first-seen order (Java then prints them in ConcurrentHashMap order) */
  readonly statuses = new Map<string, StatusCount>();

  constructor(readonly operation: string, readonly intended: boolean, readonly exportName: string) {}

  merge(s: MeasurementSnapshot): void {
    if (s.latencies.indices.length > 0) {
      addSnapshot(this.total, s.latencies.indices, s.latencies.counts);
      addSnapshot(this.sinceStatus, s.latencies.indices, s.latencies.counts);
      addSnapshot(this.sinceSample, s.latencies.indices, s.latencies.counts);
    }
    for (const st of s.statuses) {
      const key = `${st.name}\u0000${st.description}`;
      const prev = this.statuses.get(key);
      if (prev) prev.count += st.count;
      else this.statuses.set(key, { ...st });
    }
  }

  /** Return codes in the order YCSB's ConcurrentHashMap<Status, AtomicInteger> iterates them. */
  orderedStatuses(): StatusCount[] {
    return javaHashOrder([...this.statuses.values()], statusHashCode, 12);
  }
}

function statusHashCode(s: StatusCount): number {
  let result = 1;
  result = (Math.imul(31, result) + javaStringHashCode(s.description)) | 0;
  return (Math.imul(31, result) + javaStringHashCode(s.name)) | 0;
}

export class AggregatedMeasurements {
  private readonly actual = new Map<string, AggregatedMeasurement>();
  private readonly intended = new Map<string, AggregatedMeasurement>();

  merge(snapshots: readonly MeasurementSnapshot[]): void {
    for (const s of snapshots) {
      const map = s.intended ? this.intended : this.actual;
      let m = map.get(s.operation);
      if (!m) map.set(s.operation, (m = new AggregatedMeasurement(s.operation, s.intended, s.exportName)));
      m.merge(s);
    }
  }

  /** Measurements in YCSB's export order: the operation map, then the intended map, each in ConcurrentHashMap order. */
  ordered(): AggregatedMeasurement[] {
    const order = (map: Map<string, AggregatedMeasurement>): AggregatedMeasurement[] =>
      javaHashOrder([...map.values()], (m) => javaStringHashCode(m.operation), 12);
    return [...order(this.actual), ...order(this.intended)];
  }

  get(operation: string, intended = false): AggregatedMeasurement | undefined {
    return (intended ? this.intended : this.actual).get(operation);
  }
}
