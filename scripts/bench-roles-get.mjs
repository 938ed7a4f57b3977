#!/usr/bin/env node
// Sequential GET on shm with roles: this tree's write client and read client
// (the READ-only registration's rkey) against another tree's write client,
// all in one process with their rounds interleaved, so a shared machine's
// load falls on all three alike; only the ratios within one run mean much.
//   node scripts/bench-roles-get.mjs /path/to/other/checkout   (both built)
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const other = process.argv[2];
if (!other) {
  console.error('usage: node scripts/bench-roles-get.mjs <other checkout, built>');
  process.exit(2);
}
const trees = { other: join(other, 'dist'), this: join(dirname(fileURLToPath(import.meta.url)), '..', 'dist') };
const dir = mkdtempSync(join(tmpdir(), 'rkv-roles-bench-'));
const keys = Array.from({ length: 1000 }, (_, i) => `key-${i}`);
const ROUNDS = 31;
const WARMUP = 3;
const PER_ROUND = 5000;
const clients = {};
const servers = [];
for (const [name, dist] of Object.entries(trees)) {
  const { KvServer } = await import(join(dist, 'server/kv-server.js'));
  const { KvClient } = await import(join(dist, 'client/index.js'));
  const url = `shm://${dir}/${name}.sock`;
  // The other tree may predate roles: it gets the one token it understands.
  const auth = name === 'this' ? { tokens: [{ token: 'w', role: 'write' }, { token: 'r', role: 'read' }] } : { token: 'w' };
  const server = await KvServer.start({ listen: [url], memoryBytes: 64 << 20, ...auth });
  servers.push(server);
  const writer = await KvClient.connect({ url, token: 'w' });
  for (const k of keys) await writer.put(k, 'v'.repeat(100));
  clients[`${name} write`] = writer;
  if (name === 'this') clients['this read'] = await KvClient.connect({ url, token: 'r' });
}
const samples = {};
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, kv] of Object.entries(clients)) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < PER_ROUND; i++) await kv.get(keys[i % keys.length]);
    if (round >= WARMUP) (samples[name] ??= []).push(Number(process.hrtime.bigint() - t0) / PER_ROUND);
  }
}
const q = (a, p) => [...a].sort((x, y) => x - y)[Math.floor((a.length - 1) * p)];
const base = q(samples['other write'], 0.5);
for (const [name, v] of Object.entries(samples)) {
  console.log(`${name}: median ${Math.round(q(v, 0.5))} ns/GET (p25 ${Math.round(q(v, 0.25))}, min ${Math.round(q(v, 0))}), median / other write ${(q(v, 0.5) / base).toFixed(3)}`);
}
for (const kv of Object.values(clients)) await kv.close();
for (const s of servers) await s.close();
