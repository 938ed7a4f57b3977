/**
 * The per-operation latency recorder used in the client threads' hot loop. It keeps counts in
 * exactly the bucket layout of an HdrHistogram with 3 significant digits (YCSB's `new
 * Recorder(3)`), but records with a few integer ops instead of hdr-histogram-js's generic
 * recordValue (which costs ~140 ns on the reference machine, more than the whole basic-binding
 * operation budget). Snapshots travel to the main thread as sparse (index, count) pairs and are
 * merged into real hdr-histogram-js histograms, which compute the reported statistics.
 */

/** 2^ceil(log2(2 * 10^3)): sub-buckets per bucket for 3 significant digits. */
const SUB_BUCKET_COUNT = 2048;
const SUB_BUCKET_HALF_COUNT = 1024;
const SUB_BUCKET_HALF_COUNT_MAGNITUDE = 10;
const SUB_BUCKET_MASK = SUB_BUCKET_COUNT - 1;
/** 32 - unitMagnitude(0) - subBucketHalfCountMagnitude - 1, for Math.clz32 */
const LEADING_ZERO_COUNT_BASE = 21;
/** Latencies are Java ints (µs): the largest bucket index needed for 2^31 - 1. */
export const MAX_RECORDABLE = 0x7fffffff;
const COUNTS_LENGTH = countsIndex(MAX_RECORDABLE) + 1;

export function countsIndex(value: number): number {
  const bucketIndex = LEADING_ZERO_COUNT_BASE - Math.clz32(value | SUB_BUCKET_MASK);
  const subBucketIndex = value >>> bucketIndex;
  return ((bucketIndex + 1) << SUB_BUCKET_HALF_COUNT_MAGNITUDE) + (subBucketIndex - SUB_BUCKET_HALF_COUNT);
}

/** The lowest value that maps to a counts index (HdrHistogram's valueFromIndex). */
export function valueFromIndex(index: number): number {
  let bucketIndex = (index >> SUB_BUCKET_HALF_COUNT_MAGNITUDE) - 1;
  let subBucketIndex = (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT;
  if (bucketIndex < 0) {
    subBucketIndex -= SUB_BUCKET_HALF_COUNT;
    bucketIndex = 0;
  }
  return subBucketIndex * 2 ** bucketIndex;
}

/** Sparse copy of a recorder's counts: parallel arrays of counts-array indices and counts. */
export interface RecorderSnapshot {
  indices: number[];
  counts: number[];
}

export class LatencyRecorder {
  private counts = new Float64Array(COUNTS_LENGTH);
  /** indices touched since the last snapshot, so snapshots do not scan 22k slots */
  private touched: number[] = [];
  totalCount = 0;

  record(latencyUs: number): void {
    const v = latencyUs < 0 ? 0 : latencyUs > MAX_RECORDABLE ? MAX_RECORDABLE : latencyUs | 0;
    const i = v < SUB_BUCKET_COUNT ? v : countsIndex(v);
    if (this.counts[i]++ === 0) this.touched.push(i);
    this.totalCount++;
  }

  /** Takes the counts recorded since the last call and clears them (an interval histogram). */
  takeInterval(): RecorderSnapshot {
    const indices = this.touched.sort((a, b) => a - b);
    const counts = indices.map((i) => this.counts[i]!);
    for (const i of indices) this.counts[i] = 0;
    this.touched = [];
    this.totalCount = 0;
    return { indices, counts };
  }
}
