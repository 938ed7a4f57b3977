// What eviction's access hints cost a GET (docs/architecture.md, "Eviction"):
// with --eviction lru|lfu every GET also WRITEs one byte into the region's
// access table, unsignaled, in the doorbell of its item READ
// (native/kv/access.cc). This runs the same GETs against a server with
// --eviction none (no hint) and one with --eviction lru (the hint), in one
// process and interleaved round by round (this machine is shared: only
// ratios within a run mean something), for both GET paths: the location
// cache's one READ (the default) and the two round trips without it.
//
//   node dist/bench/kv/access-hints.js [--rounds 7] [--seconds 1] [--keys 10000]
//
// Each cell is the median of the rounds' ops/s; "one at a time" awaits every
// GET (latency-bound), "batches of 32" issues 32 per tick (one doorbell each).
import { mkdtempSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { KvClient } from '../../client/index.js';
import { KvServer } from '../../server/kv-server.js';
import { writeFileEnsuringDir } from '../ycsb/report/results.js';
import { getRate } from './get-rate.js';
import { markdownTable } from './markdown-table.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '7' },
    seconds: { type: 'string', default: '1' },
    keys: { type: 'string', default: '10000' },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const keys = Number(values.keys);

const dir = mkdtempSync(join(tmpdir(), 'rkv-hints-bench-'));
const servers = {
  none: await KvServer.start({ listen: [`shm://${join(dir, 'none.sock')}`], memoryBytes: 64 << 20, eviction: 'none' }),
  lru: await KvServer.start({ listen: [`shm://${join(dir, 'lru.sock')}`], memoryBytes: 64 << 20, eviction: 'lru' }),
};
type Mode = 'cached' | 'uncached';
const clients = new Map<string, KvClient>();
for (const [name, server] of Object.entries(servers)) {
  for (const mode of ['cached', 'uncached'] as Mode[]) {
    const kv = await KvClient.connect({ url: server.urls[0]!, timeoutMs: 30_000, ...(mode === 'uncached' ? { locationCacheEntries: 0 } : {}) });
    clients.set(`${name}/${mode}`, kv);
  }
  const kv = clients.get(`${name}/cached`)!;
  for (let i = 0; i < keys; i += 256) await kv.putMany(Array.from({ length: Math.min(256, keys - i) }, (_, k) => [`key${i + k}`, Buffer.alloc(100, k)]));
}

/** GETs per second of random keys for `seconds`: `batch` at a time. */
const rate = (kv: KvClient, batch: number) => getRate(kv, keys, seconds, batch);

const cells = new Map<string, number[]>();
for (let r = 0; r < rounds; r++) {
  for (const mode of ['cached', 'uncached'] as Mode[]) {
    for (const batch of [1, 32]) {
      for (const name of r % 2 === 0 ? ['none', 'lru'] : ['lru', 'none']) {
        const key = `${mode}/${batch}/${name}`;
        const list = cells.get(key) ?? [];
        list.push(await rate(clients.get(`${name}/${mode}`)!, batch));
        cells.set(key, list);
      }
    }
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: string[][] = [];
const results = [];
for (const mode of ['cached', 'uncached'] as Mode[]) {
  for (const batch of [1, 32]) {
    const none = median(cells.get(`${mode}/${batch}/none`)!);
    const lru = median(cells.get(`${mode}/${batch}/lru`)!);
    results.push({ path: mode, batch, noneOps: none, lruOps: lru, ratio: lru / none, roundsNone: cells.get(`${mode}/${batch}/none`), roundsLru: cells.get(`${mode}/${batch}/lru`) });
    rows.push([mode === 'cached' ? 'location-cache hit (1 READ)' : 'no cache (2 round trips)', batch === 1 ? 'one at a time' : 'batches of 32', `${Math.round(none).toLocaleString('en')}`, `${Math.round(lru).toLocaleString('en')}`, (lru / none).toFixed(3)]);
  }
}
process.stdout.write(`${markdownTable(['GET path', 'issued', 'none: GET/s', 'lru (hint): GET/s', 'lru / none'], rows, 'll')}\n`);
const output = join('bench', 'results', 'access-hints-shm.json');
writeFileEnsuringDir(output, JSON.stringify({ benchmark: 'access-hints', provider: 'shm', node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model, date: new Date().toISOString(), rounds, seconds, keys, results }, null, 2) + '\n');
process.stdout.write(`results written to ${output}\n`);
for (const kv of clients.values()) await kv.close();
for (const server of Object.values(servers)) await server.close();
