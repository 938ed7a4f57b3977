/**
 * Garbage-collection totals per collector, the Node counterpart of the JVM GC beans YCSB reports
 * as [TOTAL_GCS_<collector>] and [TOTAL_GC_TIME_<collector>]. Every isolate (main thread and each
 * client thread) observes its own collections.
 */
import { PerformanceObserver, constants } from 'node:perf_hooks';
import type { GcCollector } from './protocol.js';

const COLLECTOR_NAMES: { [kind: number]: string } = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'Scavenge',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'MarkSweepCompact',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'IncrementalMarking',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'ProcessWeakCallbacks',
};

export class GcStats {
  private readonly totals = new Map<string, GcCollector>();
  private readonly observer: PerformanceObserver;

  constructor() {
    for (const name of ['Scavenge', 'MarkSweepCompact']) this.totals.set(name, { name, count: 0, timeMs: 0 });
    this.observer = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        const kind = (entry as unknown as { detail?: { kind?: number } }).detail?.kind ?? -1;
        const name = COLLECTOR_NAMES[kind] ?? 'Other';
        const t = this.totals.get(name) ?? { name, count: 0, timeMs: 0 };
        t.count++;
        t.timeMs += entry.duration;
        this.totals.set(name, t);
      }
    });
    this.observer.observe({ entryTypes: ['gc'] });
  }

  /** Stops observing; entries are delivered asynchronously, so give the event loop a turn first. */
  async finish(): Promise<GcCollector[]> {
    await new Promise((resolve) => setImmediate(resolve));
    this.observer.disconnect();
    return [...this.totals.values()];
  }
}

export function mergeGc(into: Map<string, GcCollector>, add: readonly GcCollector[]): void {
  for (const c of add) {
    const t = into.get(c.name);
    if (t) {
      t.count += c.count;
      t.timeMs += c.timeMs;
    } else into.set(c.name, { ...c });
  }
}
