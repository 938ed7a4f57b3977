/**
 * What a TTL costs the data path (issue 16): sequential get of keys written with a TTL against
 * keys written without one, through the location cache's one READ and through GET's two round
 * trips (a client with the cache off), and sequential put with and without a TTL. The only
 * per-op difference is the reader's clock read (CLOCK_REALTIME) for an item that expires, and
 * on put the expiry's two op words. Rounds of each pair alternate, so both sides of a ratio
 * share the machine's load; the table gives the median of the rounds and the ratio.
 *
 *   node dist/bench/kv/ttl-cost.js [--rounds 7] [--ms 400] [--keys 2000]
 *
 * The server runs in a child process (bench/kv/server-child.js) over a private shm socket.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { KvClient } from '../../client/index.js';
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

/** Sequential ops for `roundMs`: ops/s. */
async function run(op: (i: number) => Promise<unknown>): Promise<number> {
  let n = 0;
  const start = performance.now();
  const end = start + roundMs;
  while (performance.now() < end) {
    for (let k = 0; k < 64; k++) await op(n++ % keys);
  }
  return (n * 1000) / (performance.now() - start);
}

const pairs: Array<[string, (i: number) => Promise<unknown>, (i: number) => Promise<unknown>]> = [
  ['get, cached (1 READ)', (i) => cached.get(`plain${i}`), (i) => cached.get(`ttl${i}`)],
  ['get, uncached (2 round trips)', (i) => uncached.get(`plain${i}`), (i) => uncached.get(`ttl${i}`)],
  ['put', (i) => cached.put(`plain${i}`, value), (i) => cached.put(`ttl${i}`, value, { ttlMs: HOUR })],
];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: string[][] = [];
for (const [name, plain, withTtl] of pairs) {
  await run(plain); // warm-up
  await run(withTtl);
  const a: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < rounds; r++) {
    a.push(await run(plain));
    b.push(await run(withTtl));
  }
  const [ma, mb] = [median(a), median(b)];
  rows.push([name, `${Math.round(ma).toLocaleString('en')}/s`, `${Math.round(mb).toLocaleString('en')}/s`, `${(ma / mb).toFixed(3)}×`]);
}
process.stdout.write(markdownTable(['sequential, 1 KiB values', 'no TTL', 'TTL (1 h)', 'time with TTL / without'], rows, 'lrrr') + '\n');
await cached.close();
await uncached.close();
child.kill('SIGTERM');
