// A client's own Prometheus metrics, when the application passes a registry
// (KvClientOptions.metrics). Several clients may share one registry: they
// share its metrics too, which then count for all of them (the readers a
// metric collects from are the registry's, not one client's).
//
// get, put, getMany and putMany keep their fast paths with metrics on: they are
// counted per call from what the call resolves (a batch: one latency sample
// under get_many or put_many, its keys' results counted at once), and retries
// are the op queues' counts, read when the registry is collected.
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

/** What a registry's collected metrics read, from every client that uses it. */
interface Readers {
  serverStates: Set<() => string[]>;
  clientStats: Set<() => ClientStats>;
  /** Each client's op queues' retries by KvOp (OpQueue.retried). */
  retried: Set<() => Float64Array[]>;
}
const readersOf = new WeakMap<Registry, Readers>();

export type OpLabel = ReturnType<typeof opName> | 'get_many' | 'put_many';

export class ClientMetrics {
  private readonly operations: Counter<'op' | 'result'>;
  private readonly latency: Histogram<'op'>;
  private readonly lockContended: Counter;
  /** GETs (get, getMany's keys, getWithVersion, getInto) by hit or miss: a cache's hit ratio. */
  private readonly gets: Counter<'result'>;
  private readonly readers: Readers;

  constructor(registry: Registry) {
    const registers = [registry];
    let readers = readersOf.get(registry);
    if (!readers) readersOf.set(registry, (readers = { serverStates: new Set(), clientStats: new Set(), retried: new Set() }));
    this.readers = readers;
    const retried = readers.retried;
    this.operations = metric(registry, 'rdmakv_client_operations_total', () => new Counter({
      name: 'rdmakv_client_operations_total', help: 'Operations finished, by type and result (ok, not_found, mismatch, or the error code).',
      labelNames: ['op', 'result'], registers,
    }));
    this.latency = metric(registry, 'rdmakv_client_operation_seconds', () => new Histogram({
      name: 'rdmakv_client_operation_seconds', help: 'Operation latency from call to result, by type.',
      labelNames: ['op'], buckets: LATENCY_BUCKETS, registers,
    }));
    metric(registry, 'rdmakv_client_retries_total', () => new Counter({
      name: 'rdmakv_client_retries_total', help: 'Round trips an operation repeated: bucket locks held by others, torn reads, a held lock item.',
      labelNames: ['op'], registers,
      collect() {
        this.reset();
        for (const read of retried) {
          for (const counts of read()) counts.forEach((n, type) => n > 0 && this.inc({ op: opName(type as KvOp) }, n));
        }
      },
    }));
    this.lockContended = metric(registry, 'rdmakv_client_lock_contended_total', () => new Counter({
      name: 'rdmakv_client_lock_contended_total', help: 'lock() calls that found the lock held (and waited, or failed with KV_LOCK_CONTENDED).',
      registers,
    }));
    this.gets = metric(registry, 'rdmakv_client_gets_total', () => new Counter({
      name: 'rdmakv_client_gets_total', help: 'GETs by result: hit (the key had a value) or miss (not found: never written, deleted, expired or evicted).',
      labelNames: ['result'], registers,
    }));
    const states = readers.serverStates;
    metric(registry, 'rdmakv_client_servers', () => new Gauge({
      name: 'rdmakv_client_servers', help: 'Servers of the cluster map by connection state (ready, reconnecting, down: no address).',
      labelNames: ['state'], registers,
      collect() {
        this.reset();
        for (const read of states) for (const state of read()) this.inc({ state });
      },
    }));
    const stats = readers.clientStats;
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
   * path they took in rdmakv_client_get_location_cache_total, and its retries in
   * rdmakv_client_retries_total, until the returned function is called.
   */
  watchServers(read: () => string[], stats: () => ClientStats, retried: () => Float64Array[]): () => void {
    const { serverStates, clientStats, retried: retriedReaders } = this.readers;
    serverStates.add(read);
    clientStats.add(stats);
    retriedReaders.add(retried);
    return () => {
      serverStates.delete(read);
      clientStats.delete(stats);
      retriedReaders.delete(retried);
    };
  }

  /** An op on its fast path: what it resolves says its result (a GET's undefined: not_found; a CAS's false: mismatch). */
  observeValue<T>(type: KvOp, pending: Promise<T>): Promise<T> {
    const op = opName(type);
    const start = performance.now();
    return pending.then(
      (value) => {
        this.latency.observe({ op }, (performance.now() - start) / 1e3);
        this.operations.inc({ op, result: type === KvOp.GET && value === undefined ? 'not_found' : value === false ? 'mismatch' : 'ok' });
        if (type === KvOp.GET) this.gets.inc({ result: value === undefined ? 'miss' : 'hit' });
        return value;
      },
      (error: KvError) => this.failed(op, start, error),
    );
  }

  /** A getMany (`out`: its values) or putMany of `count` keys: one latency sample, its keys' results counted at once. */
  observeMany<T>(type: KvOp, count: number, pending: Promise<T>, out?: Array<Buffer | undefined>): Promise<T> {
    const op = opName(type);
    const batch: OpLabel = type === KvOp.GET ? 'get_many' : 'put_many';
    const start = performance.now();
    return pending.then(
      (result) => {
        this.latency.observe({ op: batch }, (performance.now() - start) / 1e3);
        let missing = 0;
        if (out) for (let i = 0; i < out.length; i++) if (out[i] === undefined) missing++;
        if (count > missing) this.operations.inc({ op, result: 'ok' }, count - missing);
        if (missing > 0) this.operations.inc({ op, result: 'not_found' }, missing);
        if (out) {
          if (count > missing) this.gets.inc({ result: 'hit' }, count - missing);
          if (missing > 0) this.gets.inc({ result: 'miss' }, missing);
        }
        return result;
      },
      (error: KvError) => {
        if (count > 1) this.operations.inc({ op, result: error.code ?? 'error' }, count - 1);
        return this.failed(batch, start, error, op);
      },
    );
  }

  /** Counts a call that rejected (its latency under `label`, its result under `op`), and rethrows. */
  private failed(label: OpLabel, start: number, error: KvError, op: OpLabel = label): never {
    this.latency.observe({ op: label }, (performance.now() - start) / 1e3);
    this.operations.inc({ op, result: error.code ?? 'error' });
    throw error;
  }

  observe(type: KvOp, pending: Promise<OpResult>): Promise<OpResult> {
    const op = opName(type);
    const start = performance.now();
    return pending.then(
      (r) => {
        this.latency.observe({ op }, (performance.now() - start) / 1e3);
        this.operations.inc({ op, result: r.status === KvStatus.OK ? 'ok' : r.status === KvStatus.NOT_FOUND ? 'not_found' : 'mismatch' });
        if (type === KvOp.GET && (r.status === KvStatus.OK || r.status === KvStatus.NOT_FOUND)) this.gets.inc({ result: r.status === KvStatus.OK ? 'hit' : 'miss' });
        if (r.retries > 0 && type === KvOp.LOCK) this.lockContended.inc(); // the retries themselves: the queue's counts
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
