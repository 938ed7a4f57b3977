/**
 * Garbage-collection totals per collector, the Node counterpart of the JVM GC beans YCSB reports
 * as [TOTAL_GCS_<collector>] and [TOTAL_GC_TIME_<collector>]. Every isolate (main thread and each
 * client thread) observes its own collections; an isolate shared by several in-process client
 * threads is observed once (by the main thread), or its collections would count once per thread.
 */
import { PerformanceObserver, constants, performance } from 'node:perf_hooks';
import type { GcCollector } from './protocol.js';

const COLLECTOR_NAMES: { [kind: number]: string } = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'Scavenge',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'MarkSweepCompact',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'IncrementalMarking',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'ProcessWeakCallbacks',
};

export class GcStats {
  private readonly totals = new Map<string, GcCollector>();
  private readonly observer: PerformanceObserver | undefined;
  /** performance.now() from which collections count (see begin()). */
  private since = 0;

  constructor(observe = true) {
    this.clear();
    if (!observe) return;
    this.observer = new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        // Entries arrive after the fact: one that started before begin() belongs to the set-up.
        if (entry.startTime < this.since) continue;
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

  /**
   * Counts only collections from now on: a client thread's set-up (loading its binding's
   * modules, the JIT's first compilations) is not part of the phase's runtime, so its
   * collections are not part of the phase's GC time either.
   */
  begin(): void {
    this.since = performance.now();
    this.clear();
  }

  /** Stops observing; entries are delivered asynchronously, so give the event loop a turn first. */
  async finish(): Promise<GcCollector[]> {
    await new Promise((resolve) => setImmediate(resolve));
    this.observer?.disconnect();
    return [...this.totals.values()];
  }

  private clear(): void {
    this.totals.clear();
    for (const name of ['Scavenge', 'MarkSweepCompact']) this.totals.set(name, { name, count: 0, timeMs: 0 });
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

/** Total collection time of `collectors`, in ms. */
export function gcTimeMs(collectors: readonly GcCollector[]): number {
  return collectors.reduce((sum, c) => sum + c.timeMs, 0);
}
