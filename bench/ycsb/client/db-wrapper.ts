/**
 * YCSB's DBWrapper: times every binding call (start to end, and intended start to end) and
 * counts its return code. A failed call's latency goes to "<OP>-FAILED" (or "<OP>-<STATUS>"
 * with reportlatencyforeacherror / latencytrackederrors) while its return code is counted
 * under "<OP>", exactly as YCSB does.
 */
// The module's `performance`, not the global one: the global is a lazy accessor that costs a
// getter call on every read (~15 ns of a ~45 ns clock read on the reference machine).
import { performance } from 'node:perf_hooks';
import { Status, type DB, type FieldValues, type MaybePromise } from '../db/db.js';
import { ReadResult } from '../db/read-result.js';
import type { Properties } from '../properties.js';
import type { OpMeasurement, ThreadMeasurements } from '../measurements/thread-measurements.js';
import type { LazyFieldValues } from '../workload/field-values.js';

/** Per in-flight-operation scratch state (YCSB keeps the intended start time per thread). */
export interface Lane {
  values: LazyFieldValues;
  /** The lane's read result, emptied before each read (ReadResult.clear). */
  result: ReadResult;
  scanResult: ReadResult[];
  /** performance.now() of the throttle deadline for this lane's next operation; 0 = none */
  intendedStart: number;
  /** The lane's operation in flight (one at a time): its intended and actual start. */
  opIntended: number;
  opStart: number;
  /** Per operation type, the callback that finishes this lane's asynchronous call (made once, not per call). */
  finishers: ((status: Status) => Status)[];
}

export function newLane(values: LazyFieldValues): Lane {
  return { values, result: new ReadResult(), scanResult: [], intendedStart: 0, opIntended: 0, opStart: 0, finishers: [] };
}

const READ = 0;
const SCAN = 1;
const UPDATE = 2;
const INSERT = 3;
const DELETE = 4;
const NAMES = ['READ', 'SCAN', 'UPDATE', 'INSERT', 'DELETE'];

export class DBWrapper {
  private readonly reportLatencyForEachError: boolean;
  private readonly latencyTrackedErrors: ReadonlySet<string>;
  /** measurements of successful calls, resolved once per operation */
  private readonly okMeasurement: (OpMeasurement | undefined)[] = [];
  private readonly okIntended: (OpMeasurement | undefined)[] = [];
  private readonly statusMeasurement: (OpMeasurement | undefined)[] = [];
  private readonly trackActual: boolean;
  private readonly trackIntended: boolean;
  /** performance.now() at the end of the last binding call (the client thread paces its control checks by it) */
  lastEnd = 0;

  constructor(readonly db: DB, readonly measurements: ThreadMeasurements, props: Properties) {
    this.reportLatencyForEachError = props.getBoolean('reportlatencyforeacherror', false);
    const tracked = props.get('latencytrackederrors');
    this.latencyTrackedErrors = new Set(!this.reportLatencyForEachError && tracked !== undefined ? tracked.split(',') : []);
    this.trackActual = measurements.tracksActual;
    this.trackIntended = measurements.tracksIntended;
  }

  now(): number {
    return performance.now();
  }

  /** Measurements.getIntendedStartTimeNs: 0 when not tracked, else the deadline or now. */
  intendedStartTime(lane: Lane): number {
    if (!this.trackIntended) return 0;
    return lane.intendedStart === 0 ? performance.now() : lane.intendedStart;
  }

  read(lane: Lane, table: string, key: string, fields: readonly string[] | null, result: ReadResult): MaybePromise<Status> {
    const ist = this.intendedStartTime(lane);
    const st = performance.now();
    const res = this.db.read(table, key, fields, result);
    if (res instanceof Status) return this.finish(READ, res, ist, st);
    return this.later(lane, READ, res, ist, st);
  }

  scan(lane: Lane, table: string, startKey: string, recordCount: number, fields: readonly string[] | null, result: ReadResult[]): MaybePromise<Status> {
    const ist = this.intendedStartTime(lane);
    const st = performance.now();
    const res = this.db.scan(table, startKey, recordCount, fields, result);
    if (res instanceof Status) return this.finish(SCAN, res, ist, st);
    return this.later(lane, SCAN, res, ist, st);
  }

  update(lane: Lane, table: string, key: string, values: FieldValues): MaybePromise<Status> {
    const ist = this.intendedStartTime(lane);
    const st = performance.now();
    const res = this.db.update(table, key, values);
    if (res instanceof Status) return this.finish(UPDATE, res, ist, st);
    return this.later(lane, UPDATE, res, ist, st);
  }

  insert(lane: Lane, table: string, key: string, values: FieldValues): MaybePromise<Status> {
    const ist = this.intendedStartTime(lane);
    const st = performance.now();
    const res = this.db.insert(table, key, values);
    if (res instanceof Status) return this.finish(INSERT, res, ist, st);
    return this.later(lane, INSERT, res, ist, st);
  }

  delete(lane: Lane, table: string, key: string): MaybePromise<Status> {
    const ist = this.intendedStartTime(lane);
    const st = performance.now();
    const res = this.db.delete(table, key);
    if (res instanceof Status) return this.finish(DELETE, res, ist, st);
    return this.later(lane, DELETE, res, ist, st);
  }

  /** DBWrapper.cleanup: measured as CLEANUP (no return code), intended start reset first. */
  async cleanup(lane: Lane): Promise<void> {
    lane.intendedStart = 0;
    const ist = this.intendedStartTime(lane);
    const st = performance.now();
    await this.db.cleanup();
    const en = performance.now();
    this.measurements.measure('CLEANUP', Math.trunc((en - st) * 1000));
    this.measurements.measureIntended('CLEANUP', Math.trunc((en - ist) * 1000));
  }

  /** Finishes an asynchronous call when it settles, through the lane's own callback (no closure per call). */
  private later(lane: Lane, op: number, res: Promise<Status>, ist: number, st: number): Promise<Status> {
    lane.opIntended = ist;
    lane.opStart = st;
    const f = lane.finishers[op] ?? (lane.finishers[op] = (s: Status) => this.finish(op, s, lane.opIntended, lane.opStart));
    return res.then(f);
  }

  private finish(op: number, status: Status, ist: number, st: number): Status {
    const en = performance.now();
    this.lastEnd = en;
    if (status.isOk) {
      if (this.trackActual) {
        const m = this.okMeasurement[op] ?? (this.okMeasurement[op] = this.measurements.operation(NAMES[op]!));
        m.recorder.record(Math.trunc((en - st) * 1000));
      }
      if (this.trackIntended) {
        const m = this.okIntended[op] ?? (this.okIntended[op] = this.measurements.intendedOperation(NAMES[op]!));
        m.recorder.record(Math.trunc((en - ist) * 1000));
      }
    } else {
      const name =
        this.reportLatencyForEachError || this.latencyTrackedErrors.has(status.name) ? `${NAMES[op]}-${status.name}` : `${NAMES[op]}-FAILED`;
      this.measurements.measure(name, Math.trunc((en - st) * 1000));
      this.measurements.measureIntended(name, Math.trunc((en - ist) * 1000));
    }
    const target = this.statusMeasurement[op] ?? (this.statusMeasurement[op] = this.measurements.statusTarget(NAMES[op]!));
    target.reportStatus(status);
    return status;
  }
}
