// The metrics registry: values come from one stats snapshot per scrape,
// counters mirror the server's totals (never accumulate across scrapes),
// every stats field is exposed, and docs/operations.md lists every metric.
import { readFileSync } from 'node:fs';

import test from 'ava';

import { Registry } from 'prom-client';

import { ClientMetrics } from '../../client/metrics.js';
import { type KvServerStats, KvServer } from '../../server/kv-server.js';
import { METRICS, createRegistry, startMetricsServer } from '../../server/metrics.js';
import { sample, socketUrl } from './helpers.js';

function fakeStats(overrides: Partial<KvServerStats> = {}): KvServerStats {
  return {
    regionBytes: 1 << 30,
    indexBytes: 64 << 20,
    heapBytes: 900 << 20,
    heapUsedBytes: 4096,
    heapUsedBytesByClass: { '64': 1024, '128': 3072 },
    items: 70,
    slots: 700,
    clients: 3,
    grants: 5,
    blocksGranted: 320,
    notifications: 90,
    blocksFreed: 12,
    blocksReclaimed: 3,
    rejectedConnections: 1,
    keepaliveFailures: 0,
    fencedClients: 2,
    lockRecoveries: 0,
    recoveredSlotsSkipped: 0,
    orphanLocksReleased: 0,
    controlMessages: 40,
    expirations: 4,
    evictions: { watermark: 6, grant: 1 },
    removedBytes: { expired: 4096, watermark: 6144, grant: 1024 },
    heapHighWatermarkBytes: 810 << 20,
    heapLowWatermarkBytes: 720 << 20,
    rdmaErrors: { REM_ACCESS_ERR: 2 },
    memoryWindows: { shm: 1 },
    hashSlots: { open: 16000, closed: 0, fenced: 384, damaged: 0 },
    repairCopiedItems: 12,
    repairCopiedBytes: 6400,
    replication: { shortHashSlots: 300, syncingHashSlots: 120, failovers: 2, copyKeysLeft: 4500, rebalanceHashSlotsLeft: 640 },
    ...overrides,
  } as KvServerStats;
}

test('gauges and counters read the stats; counters are set, not summed, across scrapes', async (t) => {
  let stats = fakeStats();
  let calls = 0;
  const registry = createRegistry(() => (calls++, stats), { defaultMetrics: false });
  const first = await registry.metrics();
  t.is(calls, 1, 'one stats() call per scrape');
  t.is(sample(first, 'rdmakv_items'), 70);
  t.is(sample(first, 'rdmakv_slot_load_factor'), 0.1);
  t.is(sample(first, 'rdmakv_connected_clients'), 3);
  t.is(sample(first, 'rdmakv_notifications_total'), 90);
  t.is(sample(first, 'rdmakv_heap_class_used_bytes', 'class_bytes="128"'), 3072);
  t.is(sample(first, 'rdmakv_rdma_error_completions_total', 'status="REM_ACCESS_ERR"'), 2);
  t.is(sample(first, 'rdmakv_evicted_items_total', 'reason="watermark"'), 6);
  t.is(sample(first, 'rdmakv_hash_slots', 'state="fenced"'), 384);
  t.is(sample(first, 'rdmakv_removed_bytes_total', 'reason="expired"'), 4096);
  t.is(sample(first, 'rdmakv_copy_keys_left'), 4500);
  t.is(sample(first, 'rdmakv_rebalance_hash_slots_left'), 640);
  await new Promise((resolve) => setImmediate(resolve));
  const second = await registry.metrics();
  t.is(sample(second, 'rdmakv_notifications_total'), 90, 'a counter must not add the total twice');
  stats = fakeStats({ notifications: 95, items: 0, heapUsedBytesByClass: { '64': 64 }, rdmaErrors: {} });
  await new Promise((resolve) => setImmediate(resolve));
  const third = await registry.metrics();
  t.is(sample(third, 'rdmakv_notifications_total'), 95);
  t.is(sample(third, 'rdmakv_items'), 0);
  t.is(sample(third, 'rdmakv_heap_class_used_bytes', 'class_bytes="128"'), undefined, 'a class no longer used disappears');
  t.is(sample(third, 'rdmakv_heap_class_used_bytes', 'class_bytes="64"'), 64);
  t.is(sample(third, 'rdmakv_slot_load_factor'), 0);
});

test('namespaces: with several, every series is labelled by namespace; with the default one alone, none is', async (t) => {
  const alone = await createRegistry(() => new Map([['default', fakeStats()]]), { defaultMetrics: false }).metrics();
  t.is(sample(alone, 'rdmakv_items'), 70);
  t.is(sample(alone, 'rdmakv_heap_class_used_bytes', 'class_bytes="128"'), 3072);
  t.notRegex(alone, /namespace=/);
  const several = await createRegistry(() => new Map([['default', fakeStats()], ['billing', fakeStats({ items: 3, rdmaErrors: {} })]]), { defaultMetrics: false }).metrics();
  t.is(sample(several, 'rdmakv_items'), undefined);
  t.is(sample(several, 'rdmakv_items', 'namespace="default"'), 70);
  t.is(sample(several, 'rdmakv_items', 'namespace="billing"'), 3);
  t.is(sample(several, 'rdmakv_heap_class_used_bytes', 'class_bytes="128",namespace="billing"'), 3072);
  t.is(sample(several, 'rdmakv_rdma_error_completions_total', 'status="REM_ACCESS_ERR",namespace="default"'), 2);
  t.is(sample(several, 'rdmakv_rdma_error_completions_total', 'status="REM_ACCESS_ERR",namespace="billing"'), undefined);
});

test('metric names are prefixed rdmakv_, counters end in _total, names are unique', (t) => {
  const names = new Set<string>();
  for (const def of METRICS) {
    t.regex(def.name, /^rdmakv_[a-z0-9_]+$/);
    t.is(def.name.endsWith('_total'), def.type === 'counter', def.name);
    t.false(names.has(def.name), def.name);
    names.add(def.name);
  }
});

test('every field of KvServer.stats() is exposed by some metric', async (t) => {
  const server = await KvServer.start({ listen: [socketUrl()], memoryBytes: 64 << 20 });
  t.teardown(() => server.close());
  const covered = new Set(METRICS.flatMap((def) => def.stats));
  const missing = Object.keys(server.stats()).filter((field) => !covered.has(field as keyof KvServerStats));
  t.deepEqual(missing, [], `add these stats fields to METRICS in server/metrics.ts and to docs/operations.md: ${missing.join(', ')}`);
});

test('docs/operations.md documents every metric, and no other rdmakv_ metric', (t) => {
  const docs = readFileSync(new URL('../../../docs/operations.md', import.meta.url), 'utf8');
  const documented = new Set([...docs.matchAll(/^\| `(rdmakv_(?!client_)[a-z0-9_]+)` \| (gauge|counter) \|/gm)].map((m) => `${m[1]} ${m[2]}`));
  t.deepEqual([...documented].sort(), METRICS.map((def) => `${def.name} ${def.type}`).sort());
});

test('docs/operations.md documents every client metric, and no other rdmakv_client_ metric', async (t) => {
  const docs = readFileSync(new URL('../../../docs/operations.md', import.meta.url), 'utf8');
  const documented = [...docs.matchAll(/^\| `(rdmakv_client_[a-z0-9_]+)` \| (gauge|counter|histogram) \|/gm)].map((m) => `${m[1]} ${m[2]}`);
  const registry = new Registry();
  new ClientMetrics(registry);
  const registered = (await registry.getMetricsAsJSON()).map((m) => `${m.name} ${m.type}`);
  t.deepEqual(documented.sort(), registered.sort());
});

test('the HTTP server: /metrics, /stats, 404, 405, and 503 while the store is starting', async (t) => {
  let stats: KvServerStats | undefined;
  const registry = createRegistry(() => stats);
  const server = await startMetricsServer({ host: '127.0.0.1', port: 0, registry, stats: () => stats });
  t.teardown(() => server.close());
  t.regex(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.is((await fetch(`${server.url}/metrics`)).status, 503);
  t.is((await fetch(`${server.url}/stats`)).status, 503);
  stats = fakeStats();
  const metrics = await fetch(`${server.url}/metrics`);
  t.is(metrics.status, 200);
  t.regex(metrics.headers.get('content-type') ?? '', /^text\/plain/);
  const text = await metrics.text();
  t.is(sample(text, 'rdmakv_items'), 70);
  t.regex(text, /^nodejs_heap_size_used_bytes \d/m);
  t.deepEqual(await (await fetch(`${server.url}/stats`)).json(), fakeStats());
  t.is((await fetch(`${server.url}/`)).status, 404);
  t.is((await fetch(`${server.url}/metrics`, { method: 'POST' })).status, 405);
});
