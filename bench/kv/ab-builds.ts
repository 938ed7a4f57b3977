/**
 * Builds side by side, in one process, for a machine whose load swings more than the change
 * being measured: one rdma-kv server child, one KvClient per build (each checkout's own
 * `dist/` and native addon, imported side by side), and alternating short rounds of one GET
 * phase, so every build sees the same minutes. Prints per build the median and best of the
 * rounds (wall and this process's CPU µs per key) and each build's median per-round time
 * ratio to the first build's.
 *
 *   node dist/bench/kv/ab-builds.js get|get64|getmany|cgetmany|cgetmany192 ROUNDS ROUND_MS CHECKOUT [CHECKOUT ...]
 *
 * cgetmany and cgetmany192: getMany of 64 or 192 keys on a cluster of three server children
 * (a static list), the keys spread over the members.
 *
 * e.g. `node dist/bench/kv/ab-builds.js getmany 40 200 /path/to/main .` (each CHECKOUT built).
 * 100,000 keys of 1 KiB (workload.ts), every answer checked by its index.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

import type { KvClient } from '../../client/index.js';
import { startServerChild } from './data-path/processes.js';
import { Workload } from './data-path/workload.js';

const [phase, roundsArg, roundMsArg, ...checkouts] = process.argv.slice(2);
if (!['get', 'get64', 'getmany', 'cgetmany', 'cgetmany192'].includes(phase ?? '') || checkouts.length === 0) {
  console.error('usage: node dist/bench/kv/ab-builds.js get|get64|getmany|cgetmany|cgetmany192 ROUNDS ROUND_MS CHECKOUT [CHECKOUT ...]');
  process.exit(2);
}
const rounds = Number(roundsArg);
const roundMs = Number(roundMsArg);
const w = new Workload(100_000, 1024);
const cluster = phase!.startsWith('c');
const batch = phase === 'cgetmany192' ? 192 : 64;
const servers = await Promise.all(Array.from({ length: cluster ? 3 : 1 }, () => startServerChild(cluster ? 256 : 512, undefined)));
const clients: KvClient[] = [];
for (const dir of checkouts) {
  const build = (await import(pathToFileURL(resolve(dir, 'dist/client/index.js')).href)) as typeof import('../../client/index.js');
  const where = cluster ? { servers: servers.map((s) => s.url) } : { url: servers[0]!.url };
  clients.push(await build.KvClient.connect({ ...where, pollMode: 'busy' }));
}
let next = 0;
await Promise.all(Array.from({ length: 64 }, async () => {
  while (next < w.keys) {
    const i = next++;
    await clients[0]!.put(w.names[i]!, w.values[i]!);
  }
}));

let at = 0;
function check(k: number, value: Buffer | undefined): void {
  if (!w.isValueOf(k, value, false)) throw new Error(`a wrong answer for key ${k}`);
}
async function round(kv: KvClient, ms: number): Promise<{ us: number; cpu: number }> {
  const end = performance.now() + ms;
  const start = performance.now();
  const cpu0 = process.cpuUsage();
  let keys = 0;
  if (phase === 'get64') {
    await Promise.all(Array.from({ length: 64 }, async () => {
      for (; performance.now() < end; keys += 16) for (let i = 0; i < 16; i++) { const k = w.keyAt(at++); check(k, await kv.get(w.names[k]!)); }
    }));
  } else {
    for (; performance.now() < end; keys += batch) {
      const ks = Array.from({ length: batch }, () => w.keyAt(at++));
      if (phase === 'get') for (const k of ks) check(k, await kv.get(w.names[k]!));
      else (await kv.getMany(ks.map((k) => w.names[k]!))).forEach((v, i) => check(ks[i]!, v));
    }
  }
  const cpu = process.cpuUsage(cpu0);
  return { us: ((performance.now() - start) * 1000) / keys, cpu: (cpu.user + cpu.system) / keys };
}

// Every client reads every key once (its location cache learns them all, as the loader's did
// from its PUTs), then a warm-up round for the JIT.
for (const kv of clients) for (let i = 0; i < w.keys; i += 64) await kv.getMany(w.names.slice(i, i + 64));
for (const kv of clients) await round(kv, 1500);
const results = clients.map(() => [] as Array<{ us: number; cpu: number }>);
for (let r = 0; r < rounds; r++) for (let i = 0; i < clients.length; i++) results[i]!.push(await round(clients[i]!, roundMs));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
results.forEach((rs, i) => {
  const s = clients[i]!.stats();
  const show = (xs: number[]) => `median ${median(xs).toFixed(3)}, best ${Math.min(...xs).toFixed(3)}`;
  console.log(`${checkouts[i]}: ${phase} wall µs/key ${show(rs.map((x) => x.us))}; CPU µs/key ${show(rs.map((x) => x.cpu))}; 1-RTT hits ${((100 * s.oneRoundTripGets) / Math.max(1, s.gets)).toFixed(1)} %`);
  if (i > 0) console.log(`  ${checkouts[i]} / ${checkouts[0]}: median per-round wall ratio ${median(rs.map((x, k) => x.us / results[0]![k]!.us)).toFixed(3)}`);
});
for (const kv of clients) await kv.close();
for (const server of servers) await server.stop();
