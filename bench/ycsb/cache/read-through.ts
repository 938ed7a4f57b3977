/**
 * The read-through loop of kv-bench's cache mode, over any store: GET the key; on a miss, PUT
 * its value, as an application in front of a slower source of truth would. `lanes` loops share
 * one event loop and one cursor over the workload's sequence, each with one request in flight.
 * A PUT the store refuses for lack of memory (rdma-kv's KV_OUT_OF_MEMORY without eviction,
 * Redis's OOM under noeviction) is counted as "not cached", not as a failure: the request
 * was still answered from the source. Anything else a store throws ends the run.
 */
import { createHistogram } from 'node:perf_hooks';

import type { CacheWorkload } from './workload.js';

/** What the loop needs of a store. */
export interface CacheStore {
  /** the value, or null/undefined for a miss */
  get(key: string): Promise<Buffer | null | undefined>;
  /** stores the value: true, or false when the store had no memory for it (the caller moves on) */
  put(key: string, value: Buffer): Promise<boolean>;
}

export interface ReadThroughCounts {
  operations: number;
  hits: number;
  misses: number;
  /** misses whose PUT was refused for lack of memory */
  notCached: number;
  /** hits whose value was not the key's */
  wrong: number;
}

export interface ReadThroughResult extends ReadThroughCounts {
  seconds: number;
  /** per request (a miss's GET and PUT together), µs */
  latencyUs: { p50: number; p99: number; max: number };
}

/**
 * Runs requests `from` … `to` - 1 of the workload's sequence against the store, `lanes` at a
 * time; resolves when they are all answered (rejects with a store's first error, after every
 * lane has stopped).
 */
export async function readThrough(store: CacheStore, workload: CacheWorkload, from: number, to: number, lanes: number): Promise<ReadThroughResult> {
  const histogram = createHistogram();
  const counts: ReadThroughCounts = { operations: 0, hits: 0, misses: 0, notCached: 0, wrong: 0 };
  const { sequence, names } = workload;
  let cursor = from;
  let failure: unknown;

  const lane = async (): Promise<void> => {
    const buffer = Buffer.alloc(workload.valueBytes); // this lane's PUTs; reused once each is answered
    try {
      while (cursor < to && failure === undefined) {
        const k = sequence[cursor++]!;
        const t = performance.now();
        const value = await store.get(names[k]!);
        if (value !== null && value !== undefined) {
          counts.hits++;
          if (!workload.isValueOf(k, value, (counts.hits & 1023) === 0)) counts.wrong++;
        } else {
          counts.misses++;
          if (!(await store.put(names[k]!, workload.valueOf(k, buffer)))) counts.notCached++;
        }
        histogram.record(Math.max(1, Math.round((performance.now() - t) * 1e6)));
        counts.operations++;
      }
    } catch (error) {
      failure ??= error; // the other lanes stop at their next request
    }
  };

  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.max(1, lanes) }, lane));
  const seconds = (performance.now() - t0) / 1000;
  if (failure !== undefined) throw failure;
  const us = (ns: number): number => ns / 1000;
  return {
    ...counts,
    seconds,
    latencyUs: counts.operations > 0 ? { p50: us(histogram.percentile(50)), p99: us(histogram.percentile(99)), max: us(histogram.max) } : { p50: 0, p99: 0, max: 0 },
  };
}

/** Hits over requests, in percent (NaN with no requests). */
export function hitRatioPercent(c: ReadThroughCounts): number {
  return (100 * c.hits) / (c.hits + c.misses);
}
