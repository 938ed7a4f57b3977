/**
 * What one client thread measures, organised as YCSB's Measurements: one measurement per
 * operation name (READ, UPDATE, READ-FAILED, CLEANUP...), each with a latency recorder and
 * return-code counts, plus a second map for intended-start latencies
 * (measurement.interval=intended|both).
 */
import { Status } from '../db/db.js';
import { LatencyRecorder, type RecorderSnapshot } from './recorder.js';

/** measurement.interval: op (0), intended (1), both (2) — YCSB's numbering. */
export type MeasurementInterval = 0 | 1 | 2;

export function parseMeasurementInterval(text: string): MeasurementInterval | undefined {
  return ({ op: 0, intended: 1, both: 2 } as const)[text as 'op' | 'intended' | 'both'];
}

export class OpMeasurement {
  readonly recorder = new LatencyRecorder();
  private readonly wellKnown = new Float64Array(Status.WELL_KNOWN.length);
  private readonly others = new Map<string, { status: Status; count: number }>();

  constructor(readonly name: string) {}

  reportStatus(status: Status): void {
    if (status.code >= 0) {
      this.wellKnown[status.code]!++;
      return;
    }
    const key = `${status.name}\u0000${status.description}`;
    const entry = this.others.get(key);
    if (entry) entry.count++;
    else this.others.set(key, { status, count: 1 });
  }

  takeStatusCounts(): StatusCount[] {
    const out: StatusCount[] = [];
    this.wellKnown.forEach((count, code) => {
      if (count > 0) {
        const s = Status.WELL_KNOWN[code]!;
        out.push({ name: s.name, description: s.description, count });
      }
    });
    for (const { status, count } of this.others.values()) out.push({ name: status.name, description: status.description, count });
    this.wellKnown.fill(0);
    this.others.clear();
    return out;
  }
}

export interface StatusCount {
  name: string;
  description: string;
  count: number;
}

/** One measurement's interval data as sent from a client thread to the main thread. */
export interface MeasurementSnapshot {
  /** the operation name (map key) */
  operation: string;
  intended: boolean;
  /** the name it is exported under ("READ", or "Intended-READ" with interval=both) */
  exportName: string;
  latencies: RecorderSnapshot;
  statuses: StatusCount[];
}

export class ThreadMeasurements {
  private readonly byOperation = new Map<string, OpMeasurement>();
  private readonly intendedByOperation = new Map<string, OpMeasurement>();

  constructor(readonly interval: MeasurementInterval) {}

  get tracksIntended(): boolean {
    return this.interval !== 0;
  }

  get tracksActual(): boolean {
    return this.interval !== 1;
  }

  operation(name: string): OpMeasurement {
    let m = this.byOperation.get(name);
    if (!m) this.byOperation.set(name, (m = new OpMeasurement(name)));
    return m;
  }

  intendedOperation(name: string): OpMeasurement {
    let m = this.intendedByOperation.get(name);
    if (!m) this.intendedByOperation.set(name, (m = new OpMeasurement(this.interval === 1 ? name : `Intended-${name}`)));
    return m;
  }

  /** Where YCSB's reportStatus(op, status) counts: the intended map when only intended latency is kept. */
  statusTarget(name: string): OpMeasurement {
    return this.interval === 1 ? this.intendedOperation(name) : this.operation(name);
  }

  measure(name: string, latencyUs: number): void {
    if (this.interval !== 1) this.operation(name).recorder.record(latencyUs);
  }

  measureIntended(name: string, latencyUs: number): void {
    if (this.interval !== 0) this.intendedOperation(name).recorder.record(latencyUs);
  }

  /** Interval data of every measurement, clearing it (YCSB's getIntervalHistogramAndAccumulate). */
  takeSnapshot(): MeasurementSnapshot[] {
    const out: MeasurementSnapshot[] = [];
    for (const [operation, m] of this.byOperation) {
      out.push({ operation, intended: false, exportName: m.name, latencies: m.recorder.takeInterval(), statuses: m.takeStatusCounts() });
    }
    for (const [operation, m] of this.intendedByOperation) {
      out.push({ operation, intended: true, exportName: m.name, latencies: m.recorder.takeInterval(), statuses: m.takeStatusCounts() });
    }
    return out;
  }
}
