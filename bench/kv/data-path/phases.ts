/**
 * A phase: one way of issuing one operation, run against one store for a fixed time after a
 * warm-up, with every call timed, every GET's answer checked, and the CPU time of the client
 * (this process) and of the store's server (from /proc) read around the measured part.
 *
 *   get      sequential get: one awaited get at a time
 *   get64    64-in-flight get: 64 loops in one event loop, each awaiting its own gets
 *   getmany  getMany(64): one awaited call of 64 keys at a time
 *   put, put64, putmany: the same with put and putMany(64)
 */
import { createHistogram } from 'node:perf_hooks';

import { ownCpuMs, processCpuMs } from './processes.js';
import type { Store } from './stores.js';
import type { Workload } from './workload.js';

export const PHASE_NAMES = ['get', 'get64', 'getmany', 'put', 'put64', 'putmany'] as const;
export type PhaseName = (typeof PHASE_NAMES)[number];

export interface PhaseSpec {
  name: PhaseName;
  /** as the table names it */
  label: string;
  op: 'get' | 'put';
  /** loops in flight */
  lanes: number;
  /** keys per call: 1 for get/put, 64 for getMany/putMany */
  batch: number;
}

export const PHASES: Record<PhaseName, PhaseSpec> = {
  get: { name: 'get', label: 'sequential get', op: 'get', lanes: 1, batch: 1 },
  get64: { name: 'get64', label: '64-in-flight get', op: 'get', lanes: 64, batch: 1 },
  getmany: { name: 'getmany', label: 'getMany(64), per key', op: 'get', lanes: 1, batch: 64 },
  put: { name: 'put', label: 'sequential put', op: 'put', lanes: 1, batch: 1 },
  put64: { name: 'put64', label: '64-in-flight put', op: 'put', lanes: 64, batch: 1 },
  putmany: { name: 'putmany', label: 'putMany(64), per key', op: 'put', lanes: 1, batch: 64 },
};

export interface PhaseResult {
  phase: PhaseName;
  store: string;
  /** keys read or written in the measured part */
  keys: number;
  calls: number;
  seconds: number;
  keysPerSec: number;
  /** wall time per key: 1 / keysPerSec, in µs */
  usPerKey: number;
  /** per call (a getMany is one call), µs */
  latencyUs: { p50: number; p99: number; max: number };
  /** GETs that found nothing, or something else than the key's value */
  wrong: number;
  clientCpuUsPerKey: number;
  serverCpuMs: number;
  serverCpuUsPerKey: number;
}

/** Waits out work a phase left behind (or the load did) before CPU clocks are read. */
const SETTLE_MS = 50;
const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, SETTLE_MS));

export async function runPhase(spec: PhaseSpec, store: Store, workload: Workload, seconds: number): Promise<PhaseResult> {
  const histogram = createHistogram();
  const { names, values } = workload;
  let cursor = 0;
  let stopAt = 0;
  let measuring = false;
  let keys = 0;
  let calls = 0;
  let wrong = 0;

  const batch = async (): Promise<void> => {
    const at = cursor;
    cursor += spec.batch;
    const ks = Array.from({ length: spec.batch }, (_, j) => workload.keyAt(at + j));
    if (spec.op === 'put') {
      await store.putMany(ks.map((k) => [names[k]!, values[k]!]));
    } else {
      const vs = await store.getMany(ks.map((k) => names[k]!));
      if (measuring) for (let j = 0; j < ks.length; j++) if (!workload.isValueOf(ks[j]!, vs[j], j === 0 && (calls & 63) === 0)) wrong++;
    }
  };
  // A single key's call is written out in the lane, not in a function of its own: an async layer
  // per call cost ~0.1 µs here (measured against a store that does nothing). A call's latency is
  // the store call alone, read right before and after it: the lane's own work between calls
  // (the answer's check, the histogram) is not the store's (under the guest's TCG it is tens of
  // µs). The clock read that ends one call also decides whether the lane goes on.
  const single = spec.batch === 1;
  const put = spec.op === 'put';
  let failure: unknown;
  const lane = async (): Promise<void> => {
    try {
      let end = performance.now();
      while (end < stopAt) {
        let t: number;
        if (single) {
          const k = workload.keyAt(cursor++);
          t = performance.now();
          if (put) {
            await store.put(names[k]!, values[k]!);
            end = performance.now();
          } else {
            const v = await store.get(names[k]!);
            end = performance.now();
            if (measuring && !workload.isValueOf(k, v, (calls & 1023) === 0)) wrong++;
          }
        } else {
          t = performance.now();
          await batch();
          end = performance.now();
        }
        if (measuring) {
          histogram.record(Math.max(1, Math.round((end - t) * 1e6)));
          calls++;
          keys += spec.batch;
        }
      }
    } catch (error) {
      failure ??= error;
      stopAt = 0; // the other lanes stop too: nothing of this phase may run into the next
    }
  };
  const lanes = async (): Promise<void> => {
    await Promise.all(Array.from({ length: spec.lanes }, lane));
    if (failure !== undefined) throw failure;
  };

  stopAt = performance.now() + Math.min(1000, seconds * 250); // warm-up: JIT, connection state
  await lanes();
  await settle();
  measuring = true;
  const server0 = processCpuMs(store.serverPid);
  const client0 = ownCpuMs();
  const t0 = performance.now();
  stopAt = t0 + seconds * 1000;
  await lanes();
  const elapsed = (performance.now() - t0) / 1000;
  const clientMs = ownCpuMs() - client0;
  await settle(); // the server's share of the last writes (draining their notices) is still this phase's
  const serverMs = processCpuMs(store.serverPid) - server0;
  const us = (ns: number): number => ns / 1000;
  return {
    phase: spec.name,
    store: store.name,
    keys,
    calls,
    seconds: elapsed,
    keysPerSec: keys / elapsed,
    usPerKey: (elapsed * 1e6) / keys,
    latencyUs: { p50: us(histogram.percentile(50)), p99: us(histogram.percentile(99)), max: us(histogram.max) },
    wrong,
    clientCpuUsPerKey: (clientMs * 1000) / keys,
    serverCpuMs: serverMs,
    serverCpuUsPerKey: (serverMs * 1000) / keys,
  };
}
