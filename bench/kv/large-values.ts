// Large values: getInto into a registered buffer and put from one (no copy),
// and plain get / put (one copy each, through a registered bounce buffer), for
// values of 1, 4, 16 and 64 MiB, against the transport's raw READ and WRITE
// bandwidth of the same sizes measured in the same run (the transport
// microbenchmark, batch 1: one request, its completion awaited, in a child
// process of its own, as bench/kv/data-path/floor.ts does for the data path).
// One op at a time, awaited: bandwidth = value bytes / wall time per op; each
// cell the better of two rounds (the four client cells interleaved).
//
//   node dist/bench/kv/large-values.js [--sizes 1,4,16,64] [--seconds 2] [--quick] [--json FILE]
//
// The kv-server runs in this process (on shm a READ or WRITE is the client's
// own memcpy; the server only drains notices and retires blocks), with a 50 ms
// grace period so the retired 64 MiB blocks of a PUT loop come back quickly.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';

import { KvClient } from '../../client/index.js';
import { KvServer } from '../../server/kv-server.js';
import { measure } from './data-path/floor.js';
import { markdownTable } from './markdown-table.js';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1,4,16,64' },
    seconds: { type: 'string', default: '2' },
    quick: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});
const MiB = 1 << 20;
const sizes = values.sizes.split(',').map((s) => Number(s) * MiB);
const seconds = values.quick ? 0.5 : Number(values.seconds);

interface Row {
  bytes: number;
  rawReadGBs: number;
  rawWriteGBs: number;
  getIntoGBs: number;
  getGBs: number;
  putRegisteredGBs: number;
  putGBs: number;
}

/** GB/s (10^9 bytes) of `op` on `bytes`-byte values, run back to back for `seconds` after a warm-up. */
async function bandwidth(bytes: number, op: (i: number) => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 2; i++) await op(i);
  let n = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  while (performance.now() < end || n < 3) await op(n++);
  return (n * bytes) / ((performance.now() - start) / 1000) / 1e9;
}

const dir = mkdtempSync(join(tmpdir(), 'rkv-large-bench-'));
const server = await KvServer.start({ listen: [`shm://${join(dir, 'kv.sock')}`], memoryBytes: 1024 * MiB, maxValueBytes: 64 * MiB, graceMs: 50 });
const kv = await KvClient.connect({ url: server.urls[0]!, timeoutMs: 30_000 });
const rows: Row[] = [];
try {
  for (const bytes of sizes) {
    const raw = { read: await measure(server.urls[0]!, bytes, 1, seconds, 'READ'), write: await measure(server.urls[0]!, bytes, 1, seconds, 'WRITE') };
    const registered = kv.allocBuffer(bytes);
    registered.fill(7);
    const plain = Buffer.alloc(bytes, 9);
    const key = `v${bytes}`;
    await kv.put(key, registered);
    // Two rounds of the four, the better of each kept: the first PUTs of a size touch heap pages
    // for the first time (page faults), which would count against whichever ran first.
    let getIntoGBs = 0, getGBs = 0, putRegisteredGBs = 0, putGBs = 0;
    for (let round = 0; round < 2; round++) {
      getIntoGBs = Math.max(getIntoGBs, await bandwidth(bytes, () => kv.getInto(key, registered)));
      getGBs = Math.max(getGBs, await bandwidth(bytes, () => kv.get(key)));
      // PUTs of one key: each takes a new block, and the one it replaces is retired (after the grace period).
      putRegisteredGBs = Math.max(putRegisteredGBs, await bandwidth(bytes, () => kv.put(key, registered)));
      putGBs = Math.max(putGBs, await bandwidth(bytes, () => kv.put(key, plain)));
    }
    kv.freeBuffer(registered);
    const gbs = (usPerOp: number) => bytes / (usPerOp * 1000);
    rows.push({ bytes, rawReadGBs: gbs(raw.read.usPerRead), rawWriteGBs: gbs(raw.write.usPerRead), getIntoGBs, getGBs, putRegisteredGBs, putGBs });
  }
} finally {
  await kv.close();
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}

const f = (x: number) => x.toFixed(2);
const ratio = (x: number, of: number) => `${f(x)} (${((100 * x) / of).toFixed(0)} %)`;
console.log(`rdma-kv large values — provider shm, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, ${seconds} s per cell, one op at a time`);
console.log(
  markdownTable(
    ['value', 'raw READ GB/s', 'getInto (registered) GB/s, % of READ', 'get (one copy) GB/s', 'raw WRITE GB/s', 'put (registered) GB/s, % of WRITE', 'put (plain Buffer, one copy) GB/s'],
    rows.map((r) => [`${r.bytes / MiB} MiB`, f(r.rawReadGBs), ratio(r.getIntoGBs, r.rawReadGBs), f(r.getGBs), f(r.rawWriteGBs), ratio(r.putRegisteredGBs, r.rawWriteGBs), f(r.putGBs)]),
    'l',
  ),
);
const output = values.json ?? join('bench', 'results', 'large-values-shm.json');
mkdirSync(dirname(output), { recursive: true });
writeFileSync(output, JSON.stringify({ benchmark: 'large-values', provider: 'shm', node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model, date: new Date().toISOString(), seconds, rows }, null, 2) + '\n');
console.log(`results written to ${output}`);
