// Re-replication speed (issue 17; docs/cluster.md, "Repair"): three kv-server
// processes on shm with --replicas 2, loaded with --keys values of --value
// bytes; one member is SIGKILLed, failed over, and started again on a new,
// empty region under its name. The time is from the first config that has it
// syncing into hash slots to the config that makes it their replica again:
// its drop, the barriers, the copies by its two partners (in parallel), and
// the controller's promotion. Bytes are what the copiers report
// (repair/<target>/<primary>: item headers, keys and values).
//
//   node dist/bench/kv/repair.js [--keys 100000] [--value 1024] [--repair-rate MB/s, 0: none]
import { parseArgs } from 'node:util';

import { type ClusterConfig, type RepairRecord, etcdKeys, parseClusterConfig } from '../../protocol/registry.js';
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
    'repair-rate': { type: 'string', default: '0' },
    json: { type: 'string', default: 'bench/results/repair.json' },
  },
});
const keys = Number(values.keys);
const valueBytes = Number(values.value);
if (!Number.isInteger(keys) || keys < 1 || !Number.isInteger(valueBytes) || valueBytes < 1) throw new Error('--keys and --value: whole numbers from 1');

const prefix = '/bench-repair';
const etcd = await startEtcd();
const rate = ['--repair-rate', values['repair-rate']];
const memberArgs = (name: string) => ['--etcd', etcd.url, '--etcd-prefix', prefix, '--name', name, '--replicas', '2', '--etcd-ttl', '2s', ...rate];
const memory = Math.max(256, Math.ceil((keys * (valueBytes + 128) * 2) / 2 ** 20 / 3) + 64);
const props = new Properties([['rdmakv.memory', `${memory}M`]]);
const readConfig = async (): Promise<ClusterConfig> => parseClusterConfig((await etcd.client.get(etcdKeys(prefix).config).string())!);
const until = async (what: string, ok: (c: ClusterConfig) => boolean, poll = 10): Promise<ClusterConfig> => {
  const deadline = performance.now() + 600_000;
  for (;;) {
    const c = await readConfig();
    if (ok(c)) return c;
    if (performance.now() > deadline) throw new Error(`${what}: not within 600 s`);
    await new Promise((resolve) => setTimeout(resolve, poll));
  }
};

let result: { bytes: number; items: number; ms: number };
const { kv, servers } = await startCluster(etcd, prefix, 3, 2, ['--etcd-ttl', '2s', ...rate], `${memory}M`);
let restarted: Awaited<ReturnType<typeof startKvServer>> | undefined;
try {
  const value = Buffer.alloc(valueBytes, 'r');
  const loadStart = performance.now();
  for (let k = 0; k < keys; k += 256) {
    await kv.putMany(Array.from({ length: Math.min(256, keys - k) }, (_, i): [string, Buffer] => [`repair:${k + i}`, value]));
    if (k % 20_480 === 0) process.stderr.write(`\rloading ${k}/${keys}`);
  }
  process.stderr.write(`\rloaded ${keys} keys of ${valueBytes} bytes in ${Math.round(performance.now() - loadStart)} ms\n`);
  const victim = 'm0';
  servers[0]!.kill();
  const index = (await readConfig()).members.indexOf(victim);
  await until('the failover', (c) => !c.slots.some((r) => r.replicas.includes(index)), 50);
  process.stderr.write(`${victim} killed and failed over; starting it again on an empty region\n`);
  restarted = await startKvServer(props, memberArgs(victim));
  const syncing = await until('syncing', (c) => c.slots.some((r) => r.syncing.includes(index)), 5);
  const startedAt = performance.now();
  await until('the copy', (c) => c.epoch > syncing.epoch && c.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0), 5);
  const ms = performance.now() - startedAt;
  const records = Object.values(await etcd.client.getAll().prefix(`${etcdKeys(prefix).repair}${victim}/`).strings()).map((text) => JSON.parse(text) as RepairRecord);
  result = { bytes: records.reduce((n, r) => n + r.bytes, 0), items: records.reduce((n, r) => n + r.items, 0), ms };
} finally {
  await kv.close();
  await Promise.all([...servers, ...(restarted ? [restarted] : [])].map((s) => s.stop().catch(() => undefined)));
  await etcd.stop();
}

const mbps = result.bytes / 1e6 / (result.ms / 1000);
const keysPerSecond = result.items / (result.ms / 1000);
console.log(markdownTable(
  ['keys loaded', 'value bytes', 'items copied', 'MB copied', 'seconds', 'MB/s', 'keys/s'],
  [[String(keys), String(valueBytes), String(result.items), (result.bytes / 1e6).toFixed(1), (result.ms / 1000).toFixed(2), mbps.toFixed(1), String(Math.round(keysPerSecond))]],
  'rrrrrrr',
));
console.log(`\nRe-replication of a member restarted empty (two partners copying to it at once, 64 keys in flight each, --repair-rate ${values['repair-rate']}${values['repair-rate'] === '0' ? ': no limit' : ' MB/s each'}).`);
writeFileEnsuringDir(values.json, JSON.stringify({ keys, valueBytes, repairRateMBps: Number(values['repair-rate']), ...result, mbps, keysPerSecond }, null, 2));
console.log(`JSON: ${values.json}`);
