// kv-server's metrics: prom-client in its own Registry (never the global one),
// computed on scrape from KvServer.stats(), and the HTTP server that serves
// them (/metrics) together with the raw stats as JSON (/stats, read by kvctl).
//
// METRICS below is the one list of rdma-kv's metrics; docs/operations.md
// documents each entry, and test/server/metrics.test.ts checks that the two agree.
// A server with several namespaces gives each series a `namespace` label; one
// with the default namespace alone keeps them unlabelled, as before namespaces.
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';

import type { KvServerStats } from './stats.js';

export interface MetricDef {
  name: string;
  type: 'gauge' | 'counter';
  help: string;
  /** Set for metrics with one series per label value. */
  label?: string;
  /** The KvServer.stats() fields it is computed from (a test checks every field is exposed). */
  stats: ReadonlyArray<keyof KvServerStats>;
  /** The value(s), from one stats snapshot. Counters read the server's monotone totals. */
  value: (stats: KvServerStats) => number | Record<string, number>;
}

/** Every rdma-kv metric (prom-client's process and Node.js metrics come on top). */
export const METRICS: readonly MetricDef[] = [
  { name: 'rdmakv_region_bytes', type: 'gauge', help: 'Size of the registered region (superblock, rings, index and heap), in bytes.', stats: ['regionBytes'], value: (s) => s.regionBytes },
  { name: 'rdmakv_index_bytes', type: 'gauge', help: 'Size of the hash index (buckets), in bytes.', stats: ['indexBytes'], value: (s) => s.indexBytes },
  { name: 'rdmakv_heap_bytes', type: 'gauge', help: 'Size of the item heap, in bytes.', stats: ['heapBytes'], value: (s) => s.heapBytes },
  { name: 'rdmakv_heap_used_bytes', type: 'gauge', help: 'Heap bytes granted to clients and not freed yet (live items, blocks clients hold, blocks in their grace period).', stats: ['heapUsedBytes'], value: (s) => s.heapUsedBytes },
  {
    name: 'rdmakv_heap_class_used_bytes',
    type: 'gauge',
    help: 'rdmakv_heap_used_bytes by size class; class_bytes is the block size of the class.',
    label: 'class_bytes',
    stats: ['heapUsedBytesByClass'],
    value: (s) => s.heapUsedBytesByClass,
  },
  { name: 'rdmakv_items', type: 'gauge', help: 'Keys stored.', stats: ['items'], value: (s) => s.items },
  { name: 'rdmakv_slots', type: 'gauge', help: 'Slots in the index (buckets times slots per bucket).', stats: ['slots'], value: (s) => s.slots },
  { name: 'rdmakv_slot_load_factor', type: 'gauge', help: 'Items divided by slots (0 to 1); PUTs may fail with KV_TABLE_FULL above about 0.9.', stats: ['slots', 'items'], value: (s) => (s.slots > 0 ? s.items / s.slots : 0) },
  { name: 'rdmakv_connected_clients', type: 'gauge', help: 'Clients connected now.', stats: ['clients'], value: (s) => s.clients },
  { name: 'rdmakv_grants_total', type: 'counter', help: 'Heap grant requests answered.', stats: ['grants'], value: (s) => s.grants },
  { name: 'rdmakv_blocks_granted_total', type: 'counter', help: 'Heap blocks granted to clients.', stats: ['blocksGranted'], value: (s) => s.blocksGranted },
  { name: 'rdmakv_notifications_total', type: 'counter', help: 'PUT and DELETE notifications drained (one per completed write).', stats: ['notifications'], value: (s) => s.notifications },
  { name: 'rdmakv_blocks_freed_total', type: 'counter', help: 'Blocks returned to the heap after the grace period: superseded, deleted, or taken back from departed clients.', stats: ['blocksFreed'], value: (s) => s.blocksFreed },
  { name: 'rdmakv_blocks_reclaimed_total', type: 'counter', help: 'Blocks departed clients were granted and never published, taken back (freed after the grace period).', stats: ['blocksReclaimed'], value: (s) => s.blocksReclaimed },
  { name: 'rdmakv_rejected_connections_total', type: 'counter', help: 'Connection requests rejected (wrong token, protocol version, no free client ring, shutting down).', stats: ['rejectedConnections'], value: (s) => s.rejectedConnections },
  { name: 'rdmakv_control_messages_total', type: 'counter', help: 'Control messages received from clients (grant requests, block returns, pings), malformed ones included.', stats: ['controlMessages'], value: (s) => s.controlMessages },
  { name: 'rdmakv_keepalive_failures_total', type: 'counter', help: 'Clients taken for dead after three silent keepalive intervals.', stats: ['keepaliveFailures'], value: (s) => s.keepaliveFailures },
  { name: 'rdmakv_fenced_clients_total', type: 'counter', help: 'Departed clients whose queue pair was moved to the error state.', stats: ['fencedClients'], value: (s) => s.fencedClients },
  { name: 'rdmakv_lock_recoveries_total', type: 'counter', help: 'Locks released on behalf of departed clients (bucket lock words and lock items).', stats: ['lockRecoveries'], value: (s) => s.lockRecoveries },
  { name: 'rdmakv_orphan_locks_released_total', type: 'counter', help: 'Locks whose owner was no live client (a leak or a corrupted word), released by the periodic orphan-lock scan (bucket lock words and lock items).', stats: ['orphanLocksReleased'], value: (s) => s.orphanLocksReleased },
  { name: 'rdmakv_recovery_skipped_slots_total', type: 'counter', help: 'Index slots a restart on a region file could not trust (block outside the heap, bad units, an item that does not match), skipped and cleared.', stats: ['recoveredSlotsSkipped'], value: (s) => s.recoveredSlotsSkipped },
  { name: 'rdmakv_expired_items_total', type: 'counter', help: 'Expired items the background expiry sweep removed (their blocks reused after the grace period).', stats: ['expirations'], value: (s) => s.expirations },
  {
    name: 'rdmakv_evicted_items_total',
    type: 'counter',
    help: 'Items evicted (--eviction lru or lfu), by reason: watermark (heap use past the high watermark) or grant (a grant found no block that fits).',
    label: 'reason',
    stats: ['evictions'],
    value: (s) => s.evictions,
  },
  {
    name: 'rdmakv_removed_bytes_total',
    type: 'counter',
    help: 'Heap bytes (block sizes) the server freed by removing items, by reason: expired, watermark, grant.',
    label: 'reason',
    stats: ['removedBytes'],
    value: (s) => s.removedBytes,
  },
  { name: 'rdmakv_heap_high_watermark_bytes', type: 'gauge', help: 'Heap use above which eviction starts (--eviction-high of the heap; 0 with --eviction none).', stats: ['heapHighWatermarkBytes'], value: (s) => s.heapHighWatermarkBytes },
  { name: 'rdmakv_heap_low_watermark_bytes', type: 'gauge', help: 'Heap use down to which eviction frees (--eviction-low of the heap; 0 with --eviction none).', stats: ['heapLowWatermarkBytes'], value: (s) => s.heapLowWatermarkBytes },
  {
    name: 'rdmakv_rdma_error_completions_total',
    type: 'counter',
    help: 'Error completions on the server\'s queue pairs by ibv_wc_status name (flushes after a first error are not counted).',
    label: 'status',
    stats: ['rdmaErrors'],
    value: (s) => s.rdmaErrors,
  },
  {
    name: 'rdmakv_memory_windows',
    type: 'gauge',
    help: 'By provider: 1 when each client gets a memory window of its own (an rkey only its connection can use, invalidated when it is fenced), 0 when clients get the region\'s rkey (the device has no windows).',
    label: 'provider',
    stats: ['memoryWindows'],
    value: (s) => s.memoryWindows,
  },
  {
    name: 'rdmakv_hash_slots',
    type: 'gauge',
    help: 'Hash slots by the state of this member\'s epoch word: open takes writes (a replica of the hash slot, or --replicas 1), fenced does not (not a replica, or starting up), closed while an epoch barrier runs. None for a region without an epoch table (format 4).',
    label: 'state',
    stats: ['hashSlots'],
    value: (s) => s.hashSlots,
  },
  { name: 'rdmakv_under_replicated_hash_slots', type: 'gauge', help: 'Hash slots with fewer replicas than --replicas in the config this member last applied (after a failover, until repair copies them back); 0 with --replicas 1.', stats: ['replication'], value: (s) => s.replication.shortHashSlots },
  { name: 'rdmakv_syncing_hash_slots', type: 'gauge', help: 'Hash slots with a member syncing into them (repair: their primary is copying to it), in the config this member last applied.', stats: ['replication'], value: (s) => s.replication.syncingHashSlots },
  { name: 'rdmakv_failovers_total', type: 'counter', help: 'Failovers this member performed as the controller (each a config that removed dead members from the hash slots they replicated).', stats: ['replication'], value: (s) => s.replication.failovers },
  { name: 'rdmakv_copy_keys_left', type: 'gauge', help: 'Keys the copy this member is making as a primary (repair, a rebalance, a drain) has still to copy, of those its walk found so far; 0 when none runs.', stats: ['replication'], value: (s) => s.replication.copyKeysLeft },
  { name: 'rdmakv_rebalance_hash_slots_left', type: 'gauge', help: 'On the controller: hash slots a rebalance (kvctl rebalance) has still to move; 0 on other members and when none runs.', stats: ['replication'], value: (s) => s.replication.rebalanceHashSlotsLeft },
  { name: 'rdmakv_repair_copied_items_total', type: 'counter', help: 'Items this member copied, as a primary, to members syncing into its hash slots (repair).', stats: ['repairCopiedItems'], value: (s) => s.repairCopiedItems },
  { name: 'rdmakv_repair_copied_bytes_total', type: 'counter', help: 'Bytes (item headers, keys and values) this member copied, as a primary, to members syncing into its hash slots (repair).', stats: ['repairCopiedBytes'], value: (s) => s.repairCopiedBytes },
];

/** One server's stats: one namespace's, or each namespace's by name. */
export type StatsSource = () => KvServerStats | ReadonlyMap<string, KvServerStats> | undefined;

/** The snapshot as [namespace label, stats] pairs: no label with a single namespace. */
function perNamespace(stats: KvServerStats | ReadonlyMap<string, KvServerStats>): Array<[Record<string, string>, KvServerStats]> {
  if (!(stats instanceof Map)) return [[{}, stats as KvServerStats]];
  const all = [...(stats as ReadonlyMap<string, KvServerStats>)];
  return all.length === 1 ? [[{}, all[0]![1]]] : all.map(([namespace, s]) => [{ namespace }, s]);
}

/**
 * One stats snapshot per scrape: the first collect() of a scrape calls
 * stats(), the others reuse it; it expires at the next turn of the event loop.
 */
function snapshotter(stats: StatsSource): () => Array<[Record<string, string>, KvServerStats]> | undefined {
  let cached: Array<[Record<string, string>, KvServerStats]> | undefined;
  let valid = false;
  return () => {
    if (!valid) {
      const current = stats();
      cached = current && perNamespace(current);
      valid = true;
      setImmediate(() => {
        valid = false;
        cached = undefined;
      }).unref();
    }
    return cached;
  };
}

/** A Registry holding METRICS (read from `stats` at each scrape) and prom-client's default metrics. */
export function createRegistry(stats: StatsSource, options: { defaultMetrics?: boolean } = {}): Registry {
  const registry = new Registry();
  const snapshot = snapshotter(stats);
  for (const def of METRICS) {
    const labelNames = def.label ? [def.label, 'namespace'] : ['namespace'];
    if (def.type === 'gauge') {
      new Gauge({
        name: def.name,
        help: def.help,
        labelNames,
        registers: [registry],
        collect() {
          const all = snapshot();
          if (!all) return;
          this.reset();
          for (const [namespace, s] of all) {
            const value = def.value(s);
            if (typeof value === 'number') this.set(namespace, value);
            else for (const [label, v] of Object.entries(value)) this.set({ [def.label!]: label, ...namespace }, v);
          }
        },
      });
    } else {
      new Counter({
        name: def.name,
        help: def.help,
        labelNames,
        registers: [registry],
        // Counters mirror the server's own monotone totals: set, never incremented here.
        collect() {
          const all = snapshot();
          if (!all) return;
          this.reset();
          for (const [namespace, s] of all) {
            const value = def.value(s);
            if (typeof value === 'number') this.inc(namespace, value);
            else for (const [label, v] of Object.entries(value)) this.inc({ [def.label!]: label, ...namespace }, v);
          }
        },
      });
    }
  }
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry });
  return registry;
}

export interface MetricsServer {
  /** http://host:port */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves GET /metrics (Prometheus text format) and GET /stats (KvServer.stats()
 * as JSON: the default namespace's, or with ?namespace=NAME that one's; 404 for
 * a namespace the server does not host). Until `stats` returns something (the
 * store is still starting), both answer 503.
 */
export async function startMetricsServer(options: {
  host: string;
  port: number;
  registry: Registry;
  stats: (namespace?: string) => KvServerStats | undefined;
  /** the namespaces hosted (none given: the default one alone) */
  namespaces?: () => readonly string[];
}): Promise<MetricsServer> {
  const { registry, stats } = options;
  const handle = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const [path, query] = (request.url ?? '/').split('?') as [string, string | undefined];
    const namespace = new URLSearchParams(query ?? '').get('namespace') ?? undefined;
    if (path !== '/metrics' && path !== '/stats') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics or /stats\n');
      return;
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    const hosted = options.namespaces?.() ?? [];
    if (namespace !== undefined && hosted.length > 0 && !hosted.includes(namespace)) {
      response.writeHead(404, { 'content-type': 'text/plain' }).end(`no namespace '${namespace}' (this server hosts ${hosted.join(', ')})\n`);
      return;
    }
    const current = stats(namespace);
    if (!current) {
      response.writeHead(503, { 'content-type': 'text/plain', 'retry-after': '1' }).end('starting\n');
      return;
    }
    if (path === '/stats') {
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(current) + '\n');
      return;
    }
    const body = await registry.metrics();
    response.writeHead(200, { 'content-type': registry.contentType }).end(body);
  };
  const server: Server = createServer((request, response) => {
    handle(request, response).catch((error: Error) => {
      if (!response.headersSent) response.writeHead(500, { 'content-type': 'text/plain' });
      response.end(`${error.message}\n`);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
