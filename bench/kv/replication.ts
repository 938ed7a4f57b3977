// What replication costs (issue 17; docs/replication-design.md, step 5's gate):
// three kv-server processes on shm registered in a throwaway etcd, and one
// KvClient routing by the controller's config, at --replicas 1 and 2. A PUT
// at N = 2 locks and writes both replicas and commits the backup one round
// before the primary (4 rounds instead of 3); a GET reads the primary only,
// and getMany reads 64 keys as one batch per primary.
// Rounds alternate N = 1 and N = 2 (this machine is shared: compare within a
// run only), each on a fresh cluster.
//
//   node dist/bench/kv/replication.js [--rounds 3] [--seconds 2] [--keys 10000] [--bytes 256] [--listen rdma://ADDRESS]
//
// Cells are medians over the rounds. Goal (issue 17): PUT latency at N = 2 at
// most 1.5x N = 1; GET unchanged. Needs etcd (Debian's etcd-server).
import { parseArgs } from 'node:util';

import { writeFileEnsuringDir } from '../ycsb/report/results.js';
import { startCluster } from './etcd-cluster.js';
import { startEtcd } from './etcd-process.js';
import { markdownTable } from './markdown-table.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '2' },
    keys: { type: 'string', default: '10000' },
    bytes: { type: 'string', default: '256' },
    json: { type: 'string', default: 'bench/results/replication.json' },
    listen: { type: 'string' },
  },
});
// --listen rdma://ADDRESS: the members listen there (ports from 19000 up) instead of on shm: the Soft-RoCE guest's verbs.
let port = 19000;
const listen = values.listen === undefined ? undefined : () => `${values.listen}:${port++}`;
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const keys = Number(values.keys);
const value = Buffer.alloc(Number(values.bytes), 7);
const MEMBERS = 3;

/** Sorted latencies (µs) of one-at-a-time ops for `seconds`, and their rate. */
async function sequential(op: (i: number) => Promise<unknown>): Promise<{ rate: number; p50: number; p99: number }> {
  const samples: number[] = [];
  const end = performance.now() + seconds * 1000;
  let i = 0;
  for (let now = performance.now(); now < end; i++) {
    await op(i);
    const after = performance.now();
    samples.push((after - now) * 1000);
    now = after;
  }
  samples.sort((a, b) => a - b);
  return { rate: i / seconds, p50: samples[Math.floor(samples.length / 2)]!, p99: samples[Math.floor(samples.length * 0.99)]! };
}

/** Ops per second with `inflight` ops outstanding at all times. */
async function concurrent(inflight: number, op: (i: number) => Promise<unknown>): Promise<number> {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  let next = 0;
  await Promise.all(Array.from({ length: inflight }, async () => {
    while (performance.now() < end) {
      await op(next++);
      done++;
    }
  }));
  return done / seconds;
}

type Row = { putRate: number; putP50: number; putP99: number; put64: number; getRate: number; getP50: number; getMany64: number };
const measured: Record<1 | 2, Row[]> = { 1: [], 2: [] };
const etcd = await startEtcd();
try {
  for (let r = 0; r < rounds; r++) {
    for (const n of (r % 2 === 0 ? [1, 2] : [2, 1]) as Array<1 | 2>) {
      const { kv, servers } = await startCluster(etcd, `/bench-replication-${r}-${n}`, MEMBERS, n, [], '256M', listen);
      try {
        for (let i = 0; i < keys; i += 64) await kv.putMany(Array.from({ length: Math.min(64, keys - i) }, (_, k): [string, Buffer] => [`key:${i + k}`, value]));
        const put = await sequential((i) => kv.put(`key:${i % keys}`, value));
        const put64 = await concurrent(64, (i) => kv.put(`key:${i % keys}`, value));
        const get = await sequential((i) => kv.get(`key:${i % keys}`));
        // getMany of 64 keys at a time, one call awaited at a time: keys per second.
        const batch = (i: number) => Array.from({ length: 64 }, (_, k) => `key:${(i * 64 + k) % keys}`);
        const getMany64 = (await sequential((i) => kv.getMany(batch(i)))).rate * 64;
        measured[n].push({ putRate: put.rate, putP50: put.p50, putP99: put.p99, put64, getRate: get.rate, getP50: get.p50, getMany64 });
        process.stderr.write(`round ${r + 1}/${rounds}, --replicas ${n}: put ${Math.round(put.rate)}/s p50 ${put.p50.toFixed(1)} µs, 64 in flight ${Math.round(put64)}/s, get ${Math.round(get.rate)}/s, getMany(64) ${Math.round(getMany64)} keys/s\n`);
      } finally {
        await kv.close();
        await Promise.all(servers.map((s) => s.stop()));
      }
    }
  }
} finally {
  await etcd.stop();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const cell = (n: 1 | 2, field: keyof Row) => median(measured[n].map((row) => row[field]));
const fields: Array<[keyof Row, string, (x: number) => string]> = [
  ['putP50', 'sequential put, p50 latency (µs)', (x) => x.toFixed(1)],
  ['putP99', 'sequential put, p99 latency (µs)', (x) => x.toFixed(1)],
  ['putRate', 'sequential put (ops/s)', (x) => String(Math.round(x))],
  ['put64', 'put, 64 in flight (ops/s)', (x) => String(Math.round(x))],
  ['getRate', 'sequential get (ops/s)', (x) => String(Math.round(x))],
  ['getP50', 'sequential get, p50 latency (µs)', (x) => x.toFixed(1)],
  ['getMany64', 'getMany(64), one awaited at a time (keys/s)', (x) => String(Math.round(x))],
];
const rows = fields.map(([field, label, show]) => [label, show(cell(1, field)), show(cell(2, field)), `${(cell(2, field) / cell(1, field)).toFixed(2)}x`]);
const latencyRatio = cell(2, 'putP50') / cell(1, 'putP50');
console.log(markdownTable(['', '--replicas 1', '--replicas 2', '2 / 1'], rows, 'lrrr'));
console.log(`\nGoal: PUT latency at --replicas 2 at most 1.5x --replicas 1: ${latencyRatio.toFixed(2)}x, ${latencyRatio <= 1.5 ? 'met' : 'NOT met'} (median of ${rounds} rounds, ${seconds} s each, ${keys} keys of ${value.length} B).`);
writeFileEnsuringDir(values.json, JSON.stringify({ provider: values.listen === undefined ? 'shm' : values.listen.split(':')[0], rounds, seconds, keys, valueBytes: value.length, measured, medians: Object.fromEntries(fields.map(([f]) => [f, { 1: cell(1, f), 2: cell(2, f) }])), putLatencyRatio: latencyRatio, goalMet: latencyRatio <= 1.5 }, null, 2));
console.log(`JSON: ${values.json}`);
