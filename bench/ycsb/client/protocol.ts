/** Messages and shared memory between the main thread and the client threads. */
import type { WorkloadSharedState } from '../workload/core-config.js';
import type { MeasurementSnapshot } from '../measurements/thread-measurements.js';

/** Slots of the control Int32Array. */
export const CONTROL_EPOCH = 0;
export const CONTROL_STOP = 1;

/** Asks every client thread to stop after its current operation (bumps the epoch so they look). */
export function requestStop(control: Int32Array): void {
  Atomics.store(control, CONTROL_STOP, 1);
  Atomics.add(control, CONTROL_EPOCH, 1);
}
export const CONTROL_SLOTS = 2;

export interface ClientThreadData {
  props: [string, string][];
  dbName: string;
  transactions: boolean;
  threadId: number;
  threadCount: number;
  /** 0 = unbounded (until maxexecutiontime), as in YCSB */
  opCount: number;
  /** target operations per ms for this thread; <= 0 = unthrottled */
  targetPerThreadPerMs: number;
  /** operations in flight per thread (YCSB: 1) */
  inflight: number;
  /** false when the thread shares the main thread's isolate (in-process), whose observer counts its collections */
  observeGc: boolean;
  seed: number;
  shared: WorkloadSharedState;
  control: Int32Array;
  /** completed operations per thread, for status lines and the progress bar */
  opsDone: Int32Array;
}

export interface GcCollector {
  name: string;
  count: number;
  timeMs: number;
}

export type ThreadMessage =
  | { type: 'ready'; threadId: number }
  | { type: 'sample'; threadId: number; epoch: number; snapshots: MeasurementSnapshot[] }
  | { type: 'done'; threadId: number; opsDone: number; snapshots: MeasurementSnapshot[]; gc: GcCollector[] }
  | { type: 'error'; threadId: number; message: string; usage: boolean };
