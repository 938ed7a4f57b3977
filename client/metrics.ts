// A client's own Prometheus metrics, when the application passes a registry
// (KvClientOptions.metrics). Several clients may share one registry: they
// share its metrics too, which then count for all of them.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

import { KvOp, KvStatus } from '../protocol/constants.js';
import type { KvError } from '../protocol/errors.js';
import { opName } from './op-names.js';
import type { OpResult } from './op-queue.js';
import type { ClientStats } from './types.js';

/** Microseconds to a second: RDMA round trips are a few µs, a lost server seconds. */
const LATENCY_BUCKETS = [5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.25, 1];

function metric<T>(registry: Registry, name: string, make: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? make();
}

export class ClientMetrics {
  private readonly operations: Counter<'op' | 'result'>;
  private readonly latency: Histogram<'op'>;
  private readonly retries: Counter<'op'>;
  private readonly lockContended: Counter;
  private readonly serverStates = new Set<() => string[]>();
  private readonly clientStats = new Set<() => ClientStats>();

  constructor(registry: Registry) {
    const registers = [registry];
    this.operations = metric(registry, 'rdmakv_client_operations_total', () => new Counter({
      name: 'rdmakv_client_operations_total', help: 'Operations finished, by type and result (ok, not_found, mismatch, or the error code).',
      labelNames: ['op', 'result'], registers,
    }));
    this.latency = metric(registry, 'rdmakv_client_operation_seconds', () => new Histogram({
      name: 'rdmakv_client_operation_seconds', help: 'Operation latency from call to result, by type.',
      labelNames: ['op'], buckets: LATENCY_BUCKETS, registers,
    }));
    this.retries = metric(registry, 'rdmakv_client_retries_total', () => new Counter({
      name: 'rdmakv_client_retries_total', help: 'Round trips an operation repeated: bucket locks held by others, torn reads, a held lock item.',
      labelNames: ['op'], registers,
    }));
    this.lockContended = metric(registry, 'rdmakv_client_lock_contended_total', () => new Counter({
      name: 'rdmakv_client_lock_contended_total', help: 'lock() calls that found the lock held (and waited, or failed with KV_LOCK_CONTENDED).',
      registers,
    }));
    const states = this.serverStates;
    metric(registry, 'rdmakv_client_servers', () => new Gauge({
      name: 'rdmakv_client_servers', help: 'Servers of the cluster map by connection state (ready, reconnecting, down: no address).',
      labelNames: ['state'], registers,
      collect() {
        this.reset();
        for (const read of states) for (const state of read()) this.inc({ state });
      },
    }));
    const stats = this.clientStats;
    metric(registry, 'rdmakv_client_get_location_cache_total', () => new Counter({
      name: 'rdmakv_client_get_location_cache_total',
      help: 'GETs by location-cache result: hit (one READ), miss (two round trips), validation_failure (the cached item was stale: two round trips).',
      labelNames: ['result'], registers,
      collect() {
        this.reset();
        for (const read of stats) {
          const { hits, misses, validationFailures } = read().locationCache;
          this.inc({ result: 'hit' }, hits);
          this.inc({ result: 'miss' }, misses);
          this.inc({ result: 'validation_failure' }, validationFailures);
        }
      },
    }));
  }

  /**
   * Counts a client's servers (their states) in rdmakv_client_servers, and its GETs by the
   * path they took in rdmakv_client_get_location_cache_total, until the returned function is called.
   */
  watchServers(read: () => string[], stats: () => ClientStats): () => void {
    this.serverStates.add(read);
    this.clientStats.add(stats);
    return () => {
      this.serverStates.delete(read);
      this.clientStats.delete(stats);
    };
  }

  observe(type: KvOp, pending: Promise<OpResult>): Promise<OpResult> {
    const op = opName(type);
    const start = performance.now();
    return pending.then(
      (r) => {
        this.latency.observe({ op }, (performance.now() - start) / 1e3);
        this.operations.inc({ op, result: r.status === KvStatus.OK ? 'ok' : r.status === KvStatus.NOT_FOUND ? 'not_found' : 'mismatch' });
        if (r.retries > 0) {
          this.retries.inc({ op }, r.retries);
          if (type === KvOp.LOCK) this.lockContended.inc();
        }
        return r;
      },
      (error: KvError) => {
        this.latency.observe({ op }, (performance.now() - start) / 1e3);
        this.operations.inc({ op, result: error.code ?? 'error' });
        if (error.code === 'KV_LOCK_CONTENDED' && type === KvOp.LOCK) this.lockContended.inc();
        throw error;
      },
    );
  }
}
