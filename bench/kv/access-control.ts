// What access control (issue 15) costs a GET: roles, per-client memory
// windows and namespaces. GETs never reach the server's CPU; what changed on
// their path is the rkey: a write client's own window (on shm the poster
// loads the window's slot per request: native/transport/shm), a read
// client's READ-only window, a second namespace's region. This runs the same
// GETs, in one process on shm and interleaved round by round (this machine is
// shared: only ratios within a run mean something), through
//   1. a write client of a server with memory windows (the default),
//   2. a write client of a server without them (started while
//      RKV_NO_MEMORY_WINDOWS=1 is set): the region's rkey, as before access control,
//   3. a read-only client (a read token) of server 1,
//   4. a write client of the second namespace of a server hosting two.
//
//   node dist/bench/kv/access-control.js [--rounds 7] [--seconds 1] [--keys 10000] [--quick] [--json FILE]
//
// Each cell is the median of the rounds' ops/s (min and max beside it, and
// the spread of its ratio to the same round's (2): the noise); "one at a time" awaits every GET (latency-bound), "batches of
// 32" issues 32 per tick. Location-cache hits (the default path: one READ).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';

import { KvClient } from '../../client/index.js';
import { KvServer } from '../../server/kv-server.js';
import { getRate } from './get-rate.js';
import { markdownTable } from './markdown-table.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '7' },
    seconds: { type: 'string', default: '1' },
    keys: { type: 'string', default: '10000' },
    quick: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});
const rounds = values.quick ? 3 : Number(values.rounds);
const seconds = values.quick ? 0.3 : Number(values.seconds);
const keys = values.quick ? 2000 : Number(values.keys);

const dir = mkdtempSync(join(tmpdir(), 'rkv-acl-bench-'));
const url = (name: string) => `shm://${join(dir, `${name}.sock`)}`;
const memoryBytes = 64 << 20;
const windowed = await KvServer.start({
  listen: [url('windows')],
  memoryBytes,
  tokens: [
    { token: 'writer', role: 'write' },
    { token: 'reader', role: 'read' },
  ],
});
// The provider reads RKV_NO_MEMORY_WINDOWS when it opens (at start): unset it after.
process.env.RKV_NO_MEMORY_WINDOWS = '1';
let bare: KvServer;
try {
  bare = await KvServer.start({ listen: [url('bare')], memoryBytes });
} finally {
  delete process.env.RKV_NO_MEMORY_WINDOWS;
}
const twoNamespaces = await KvServer.start({
  listen: [url('namespaces')],
  memoryBytes,
  namespaces: [{ name: 'second', memoryBytes }],
  tokens: [
    { token: 'default-writer', role: 'write' },
    { token: 'second-writer', role: 'write', namespace: 'second' },
  ],
});
const windowsOf = (server: KvServer) => server.stats().memoryWindows.shm;
if (windowsOf(windowed) !== 1 || windowsOf(bare) !== 0 || windowsOf(twoNamespaces) !== 1) {
  throw new Error(`memory windows are not as this benchmark needs: windowed ${windowsOf(windowed)}, bare ${windowsOf(bare)}, two namespaces ${windowsOf(twoNamespaces)} (want 1, 0, 1)`);
}

type Cell = 'windows' | 'bare' | 'read' | 'namespace';
const CELLS: Cell[] = ['windows', 'bare', 'read', 'namespace'];
const LABELS: Record<Cell, string> = {
  windows: '(1) write client, memory windows (default)',
  bare: '(2) write client, no windows (as before access control)',
  read: '(3) read-only client (read token, READ-only window)',
  namespace: '(4) write client of a second namespace (server hosts two)',
};
const timeoutMs = 30_000;
const clients: Record<Cell, KvClient> = {
  windows: await KvClient.connect({ url: windowed.urls[0]!, token: 'writer', timeoutMs }),
  bare: await KvClient.connect({ url: bare.urls[0]!, timeoutMs }),
  read: await KvClient.connect({ url: windowed.urls[0]!, token: 'reader', timeoutMs }),
  namespace: await KvClient.connect({ url: twoNamespaces.urls[0]!, token: 'second-writer', namespace: 'second', timeoutMs }),
};
// The read client's data is the write client's of the same server.
for (const cell of ['windows', 'bare', 'namespace'] as Cell[]) {
  const kv = clients[cell];
  for (let i = 0; i < keys; i += 256) await kv.putMany(Array.from({ length: Math.min(256, keys - i) }, (_, k) => [`key${i + k}`, Buffer.alloc(100, k)]));
}
// A read client that could write would not measure a read client.
if (await clients.read.put('key0', 'x').then(() => true, () => false)) throw new Error('the read client could PUT: not a read-only client');

/** GETs per second of random keys for `seconds`: `batch` at a time. */
const rate = (kv: KvClient, batch: number) => getRate(kv, keys, seconds, batch);

const samples = new Map<string, number[]>();
for (let r = 0; r < rounds; r++) {
  for (const batch of [1, 32]) {
    // Each round starts the order one cell further on, so no cell always follows the same one.
    for (let i = 0; i < CELLS.length; i++) {
      const cell = CELLS[(r + i) % CELLS.length]!;
      const key = `${batch}/${cell}`;
      samples.set(key, [...(samples.get(key) ?? []), await rate(clients[cell], batch)]);
    }
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ops = (x: number) => Math.round(x).toLocaleString('en');
const rows: string[][] = [];
const results = [];
for (const batch of [1, 32]) {
  const before = median(samples.get(`${batch}/bare`)!);
  for (const cell of CELLS) {
    const xs = samples.get(`${batch}/${cell}`)!;
    const m = median(xs);
    // The same round's (2) ran seconds before or after: their ratio shows how much the load moved.
    const paired = xs.map((x, r) => x / samples.get(`${batch}/bare`)![r]!);
    rows.push([LABELS[cell], batch === 1 ? 'one at a time' : 'batches of 32', ops(m), `${ops(Math.min(...xs))} – ${ops(Math.max(...xs))}`, (m / before).toFixed(3), `${Math.min(...paired).toFixed(2)} – ${Math.max(...paired).toFixed(2)}`]);
    results.push({ cell, batch, medianOps: m, rounds: xs, ratioToNoWindows: m / before, roundRatiosToNoWindows: paired });
  }
}
console.log(`rdma-kv GET under access control — provider shm, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, ${rounds} rounds × ${seconds} s per cell, ${keys} keys of 100 bytes, location-cache hits`);
console.log(markdownTable(['client', 'issued', 'GET/s (median)', 'rounds min – max', 'ratio to (2)', 'same round / (2): min – max'], rows, 'll'));
const output = values.json ?? join('bench', 'results', 'access-control-shm.json');
mkdirSync(dirname(output), { recursive: true });
writeFileSync(output, JSON.stringify({ benchmark: 'access-control', provider: 'shm', node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model, date: new Date().toISOString(), rounds, seconds, keys, results }, null, 2) + '\n');
console.log(`results written to ${output}`);
for (const kv of Object.values(clients)) await kv.close();
for (const server of [windowed, bare, twoNamespaces]) await server.close();
rmSync(dir, { recursive: true, force: true });
