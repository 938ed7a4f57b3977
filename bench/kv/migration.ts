// Migration while serving (issue 18; docs/cluster.md, "Rebalancing"): two
// kv-server processes on shm with --replicas 2, loaded with --keys values of
// --value bytes; placement frozen, a third joins and is rebalanced in (as
// kvctl rebalance does), copied its share. One client runs a closed loop of GETs and PUTs (--put-percent)
// on the loaded keys throughout: --steady seconds before the join, during the
// rebalance, --steady seconds after. Reported: the rebalance's time (the
// target's write to its removal), what the copiers copied (MB, keys, per
// second), and the foreground latency per phase.
//
//   node dist/bench/kv/migration.js [--keys 100000] [--value 1024] [--steady 5] [--put-percent 10]
import { parseArgs } from 'node:util';

import * as hdr from 'hdr-histogram-js';

import type { KvClient } from '../../client/index.js';
import { encodeClusterConfig } from '../../protocol/config-codec.js';
import { etcdKeys, frozenRecord, parseClusterConfig, readCopyProgress } from '../../protocol/registry.js';
import { rebalanceTarget } from '../../protocol/slot-table.js';
import { startKvServer } from '../ycsb/compare/servers.js';
import { Properties } from '../ycsb/properties.js';
import { writeFileEnsuringDir } from '../ycsb/report/results.js';
import { startCluster } from './etcd-cluster.js';
import { startEtcd } from './etcd-process.js';
import { markdownTable } from './markdown-table.js';

const { values } = parseArgs({
  options: {
    keys: { type: 'string', default: '100000' },
    value: { type: 'string', default: '1024' },
    steady: { type: 'string', default: '5' },
    'put-percent': { type: 'string', default: '10' },
    json: { type: 'string', default: 'bench/results/migration.json' },
  },
});
const keys = Number(values.keys);
const valueBytes = Number(values.value);
const steadyMs = Number(values.steady) * 1000;
const putPercent = Number(values['put-percent']);
if (!Number.isInteger(keys) || keys < 1 || !Number.isInteger(valueBytes) || valueBytes < 1) throw new Error('--keys and --value: whole numbers from 1');
if (!(steadyMs > 0) || !(putPercent >= 0 && putPercent <= 100)) throw new Error('--steady: seconds above 0; --put-percent: 0 to 100');

const prefix = '/bench-migration';
const etcd = await startEtcd();
// A 6 s lease: loading and copying keep this host's cores busy, and a lapsed lease would fail a member over.
const extra = ['--etcd-ttl', '6s'];
const memory = Math.max(256, Math.ceil((keys * (valueBytes + 128) * 2) / 2 ** 20 / 2) + 64);
const keys$ = etcdKeys(prefix);

interface Phase {
  name: string;
  get: hdr.Histogram;
  put: hdr.Histogram;
  errors: number;
  ms: number;
}
const phase = (name: string): Phase => ({ name, get: histogram(), put: histogram(), errors: 0, ms: 0 });
function histogram(): hdr.Histogram {
  return hdr.build({ bitBucketSize: 64, numberOfSignificantValueDigits: 3, autoResize: true });
}

/** The foreground loop: one op at a time, latency in µs into the current phase, until `stop()`. */
function foreground(kv: KvClient, value: Buffer): { current: Phase; stop: () => Promise<void> } {
  const state = { current: phase('before'), running: true };
  const done = (async () => {
    while (state.running) {
      const key = `mig:${Math.floor(Math.random() * keys)}`;
      const put = Math.random() * 100 < putPercent;
      const started = performance.now();
      try {
        if (put) await kv.put(key, value);
        else await kv.get(key);
        (put ? state.current.put : state.current.get).recordValue(Math.max(1, Math.round((performance.now() - started) * 1000)));
      } catch {
        state.current.errors++;
      }
    }
  })();
  return {
    get current() {
      return state.current;
    },
    set current(p: Phase) {
      state.current = p;
    },
    stop: async () => {
      state.running = false;
      await done;
    },
  };
}

const { kv, servers } = await startCluster(etcd, prefix, 2, 2, extra, `${memory}M`);
let joined: Awaited<ReturnType<typeof startKvServer>> | undefined;
const phases: Phase[] = [];
let migration: { ms: number; bytes: number; items: number };
let copied = { items: 0, bytes: 0 };
try {
  const value = Buffer.alloc(valueBytes, 'm');
  const loadStart = performance.now();
  for (let k = 0; k < keys; k += 256) {
    await kv.putMany(Array.from({ length: Math.min(256, keys - k) }, (_, i): [string, Buffer] => [`mig:${k + i}`, value]));
    if (k % 20_480 === 0) process.stderr.write(`\rloading ${k}/${keys}`);
  }
  process.stderr.write(`\rloaded ${keys} keys of ${valueBytes} bytes in ${Math.round(performance.now() - loadStart)} ms\n`);

  const loop = foreground(kv, value);
  const timed = async (p: Phase, run: () => Promise<void>) => {
    loop.current = p;
    const started = performance.now();
    await run();
    p.ms = performance.now() - started;
    phases.push(p);
  };
  await timed(phase('before'), () => new Promise((resolve) => setTimeout(resolve, steadyMs)));
  let ms = 0;
  // As kvctl rebalance does: placement frozen (the joining member gets nothing by itself), then the target.
  await etcd.client.put(keys$.frozen).value(frozenRecord('rebalance'));
  await timed(phase('during'), async () => {
    joined = await startKvServer(new Properties([['rdmakv.memory', `${memory}M`]]), ['--etcd', etcd.url, '--etcd-prefix', prefix, '--name', 'm2', '--replicas', '2', ...extra]);
    while ((await etcd.client.get(keys$.aliveKey('m2')).string()) === null) await new Promise((resolve) => setTimeout(resolve, 5));
    const goal = rebalanceTarget(parseClusterConfig((await etcd.client.get(keys$.config).string())!), [{ name: 'm0' }, { name: 'm1' }, { name: 'm2' }])!;
    await etcd.client.put(keys$.target).value(encodeClusterConfig(goal));
    const deadline = performance.now() + 600_000;
    let since: number | undefined;
    for (;;) {
      const pending = (await etcd.client.get(keys$.target).string()) !== null;
      if (pending) since ??= performance.now();
      if (!pending && since !== undefined) break;
      if (performance.now() > deadline) throw new Error('the rebalance did not end within 600 s');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    ms = performance.now() - since!;
    // Every copy of this cluster's life is the rebalance's (m0 and m1 were placed directly): the copiers' totals.
    for (const progress of (await readCopyProgress(etcd.client, prefix)).values()) {
      copied.items += progress.totalItems;
      copied.bytes += progress.totalBytes;
    }
    // Gone is not done: a rebalance given up (a member's lease lapsed) removes the target too.
    const config = parseClusterConfig((await etcd.client.get(keys$.config).string())!);
    const held = config.slots.reduce((n, r) => (r.replicas.includes(config.members.indexOf('m2')) ? n + r.to - r.from + 1 : n), 0);
    if (held === 0 || config.slots.some((r) => r.syncing.length > 0)) throw new Error('the rebalance was given up (the members\' logs say why)');
    process.stderr.write(`rebalanced in ${Math.round(ms)} ms\n`);
  });
  await timed(phase('after'), () => new Promise((resolve) => setTimeout(resolve, steadyMs)));
  await loop.stop();
  migration = { ms, ...copied };
} finally {
  await kv.close();
  await Promise.all([...servers, ...(joined ? [joined] : [])].map((s) => s.stop().catch(() => undefined)));
  await etcd.stop();
}

const seconds = migration.ms / 1000;
console.log(markdownTable(
  ['keys loaded', 'value bytes', 'rebalance s', 'keys copied', 'MB copied', 'MB/s', 'keys/s'],
  [[String(keys), String(valueBytes), seconds.toFixed(2), String(migration.items), (migration.bytes / 1e6).toFixed(1), (migration.bytes / 1e6 / seconds).toFixed(1), String(Math.round(migration.items / seconds))]],
  'rrrrrrr',
));
const us = (h: hdr.Histogram, p: number) => (h.totalCount === 0 ? '-' : String(h.getValueAtPercentile(p)));
console.log('');
console.log(markdownTable(
  ['phase', 'seconds', 'GETs/s', 'GET p50 µs', 'GET p99 µs', 'GET max µs', 'PUTs/s', 'PUT p50 µs', 'PUT p99 µs', 'PUT max µs', 'errors'],
  phases.map((p) => [p.name, (p.ms / 1000).toFixed(1), String(Math.round(p.get.totalCount / (p.ms / 1000))), us(p.get, 50), us(p.get, 99), us(p.get, 100), String(Math.round(p.put.totalCount / (p.ms / 1000))), us(p.put, 50), us(p.put, 99), us(p.put, 100), String(p.errors)]),
  'lrrrrrrrrrr',
));
console.log(`\nA third member joins two (--replicas 2) holding ${keys} keys; one client, one op at a time, ${putPercent} % PUTs, throughout. The rebalance: the target's write to its removal (sync, copies at --repair-rate 200 MB/s each, quiesces, hand-overs).`);
const summary = (h: hdr.Histogram) => ({ count: h.totalCount, p50: h.getValueAtPercentile(50), p99: h.getValueAtPercentile(99), max: h.maxValue });
writeFileEnsuringDir(values.json, JSON.stringify({ keys, valueBytes, putPercent, migration: { ...migration, mbps: migration.bytes / 1e6 / seconds, keysPerSecond: migration.items / seconds }, phases: phases.map((p) => ({ name: p.name, ms: p.ms, errors: p.errors, get: summary(p.get), put: summary(p.put) })) }, null, 2));
console.log(`JSON: ${values.json}`);
