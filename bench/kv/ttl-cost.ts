/**
 * What a TTL costs the data path (issue 16): sequential get of keys written with a TTL against
 * keys written without one, through the location cache's one READ and through GET's two round
 * trips (a client with the cache off), and sequential put with and without a TTL. The only
 * per-op difference is the reader's clock read (CLOCK_REALTIME) for an item that expires, and
 * on put the expiry's two op words. Within each round the two kinds alternate batch by batch
 * (64 ops), so both sides of a ratio share the machine's load; the table gives the medians of
 * the rounds, and the median ratio with its range.
 *
 *   node dist/bench/kv/ttl-cost.js [--rounds 7] [--ms 400] [--keys 2000]
 *
 * The server runs in a child process (bench/kv/server-child.js) over a private shm socket.
 */
import { spawn } from 'node:child_process';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { KvClient } from '../../client/index.js';
import { writeFileEnsuringDir } from '../ycsb/report/results.js';
import { markdownTable } from './markdown-table.js';

const { values } = parseArgs({ options: { rounds: { type: 'string', default: '7' }, ms: { type: 'string', default: '400' }, keys: { type: 'string', default: '2000' } } });
const rounds = Number(values.rounds);
const roundMs = Number(values.ms);
const keys = Number(values.keys);
const HOUR = 3_600_000;
const value = Buffer.alloc(1024, 7);

const child = spawn(process.execPath, [fileURLToPath(new URL('server-child.js', import.meta.url))], { stdio: ['pipe', 'pipe', 'inherit'] });
const url = await new Promise<string>((resolve) => child.stdout.once('data', (d: Buffer) => resolve(d.toString().trim())));
const cached = await KvClient.connect({ url });
const uncached = await KvClient.connect({ url, locationCacheEntries: 0 });
for (let i = 0; i < keys; i++) {
  await cached.put(`plain${i}`, value);
  await cached.put(`ttl${i}`, value, { ttlMs: HOUR });
}

/**
 * One round of `roundMs`: batches of 64 sequential ops, the two kinds alternating batch by batch
 * (so both see the same load, to within a batch), each batch timed: ops/s of each kind.
 */
async function round(plain: (i: number) => Promise<unknown>, withTtl: (i: number) => Promise<unknown>): Promise<[number, number]> {
  const spent = [0, 0];
  const done = [0, 0];
  const end = performance.now() + roundMs;
  let i = 0;
  for (let turn = 0; performance.now() < end; turn ^= 1) {
    const op = turn === 0 ? plain : withTtl;
    const start = performance.now();
    for (let k = 0; k < 64; k++) await op(i++ % keys);
    spent[turn]! += performance.now() - start;
    done[turn]! += 64;
  }
  return [(done[0]! * 1000) / spent[0]!, (done[1]! * 1000) / spent[1]!];
}

const pairs: Array<[string, (i: number) => Promise<unknown>, (i: number) => Promise<unknown>]> = [
  ['get, cached (1 READ)', (i) => cached.get(`plain${i}`), (i) => cached.get(`ttl${i}`)],
  ['get, uncached (2 round trips)', (i) => uncached.get(`plain${i}`), (i) => uncached.get(`ttl${i}`)],
  ['put', (i) => cached.put(`plain${i}`, value), (i) => cached.put(`ttl${i}`, value, { ttlMs: HOUR })],
];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: string[][] = [];
const results = [];
for (const [name, plain, withTtl] of pairs) {
  await round(plain, withTtl); // warm-up
  const a: number[] = [];
  const b: number[] = [];
  const ratios: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const [x, y] = await round(plain, withTtl);
    a.push(x);
    b.push(y);
    ratios.push(x / y);
  }
  results.push({ op: name, noTtlOps: median(a), ttlOps: median(b), ratio: median(ratios), roundRatios: ratios });
  rows.push([name, `${Math.round(median(a)).toLocaleString('en')}/s`, `${Math.round(median(b)).toLocaleString('en')}/s`, `${median(ratios).toFixed(3)}× (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`]);
}
process.stdout.write(markdownTable(['sequential, 1 KiB values', 'no TTL', 'TTL (1 h)', 'time with TTL / without: median (range) of rounds'], rows, 'lrrr') + '\n');
const output = join('bench', 'results', 'ttl-cost-shm.json');
writeFileEnsuringDir(output, JSON.stringify({ benchmark: 'ttl-cost', provider: 'shm', node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model, date: new Date().toISOString(), rounds, roundMs, keys, results }, null, 2) + '\n');
process.stdout.write(`results written to ${output}\n`);
await cached.close();
await uncached.close();
child.kill('SIGTERM');
