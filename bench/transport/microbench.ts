// Transport microbenchmark: READ and WRITE (64 B, or --bytes) and CAS through the JS
// binding with batch sizes 1, 16 and 64, one Node process (server and client
// providers in it, like perftest's loopback). Each batch is one postSendRaw()
// with the last request signaled, then busy polling for that one completion.
// bench/kv/data-path.ts runs it for the data path's floor.
//
//   node dist/bench/transport/microbench.js [--url shm:///tmp/x.sock | rdma://ADDR:0]
//        [--batch 1,16,64] [--ops READ,CAS] [--bytes 64] [--spread MiB] [--seconds 2] [--quick] [--json FILE]
// (--ops takes WRITE too; --bytes up to 128 MiB: bench/kv/large-values.ts measures raw bandwidth so.)
// --spread N: each batch goes to pseudo-random places in a remote region of N MiB (written
// through once first, so no page is faulted in while measuring), as a GET's READ of an item
// does, instead of to the same bytes every time, which stay in the CPU's caches on shm.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createHistogram } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { schemeOf, urlExamples } from '../../protocol/providers.js';
import {
  Access,
  type Connection,
  type CompletionQueue,
  Opcode,
  Provider,
  SendFlag,
  type WorkRequest,
  access,
  writeWorkRequest,
} from '../../native/index.js';
import { WrLayout } from '../../native/constants.generated.js';

interface Result {
  op: string;
  /** bytes per request: --bytes for READ and WRITE, 8 for CAS */
  bytes: number;
  /** MiB of remote region the requests were spread over (0: the same bytes every time) */
  spreadMiB: number;
  batch: number;
  ops: number;
  seconds: number;
  opsPerSec: number;
  nsPerOp: number;
  medianLatencyUs: number;
  p99LatencyUs: number;
  crossingsPerOp: number;
}

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    batch: { type: 'string', default: '1,16,64' },
    ops: { type: 'string', default: 'READ,CAS' },
    bytes: { type: 'string', default: '64' },
    spread: { type: 'string', default: '0' },
    seconds: { type: 'string', default: '2' },
    quick: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});

const batches = values.batch.split(',').map(Number);
const ops = values.ops.split(',').map((s) => s.trim().toUpperCase());
const seconds = values.quick ? 0.5 : Number(values.seconds);
const readBytes = Number(values.bytes);
/** Request i of a batch uses bytes [i * stride, (i + 1) * stride) on both sides. */
const stride = Math.max(64, readBytes);
const batchBytes = Math.max(...batches) * stride;
const spreadMiB = Number(values.spread);
const spreadBytes = spreadMiB * 2 ** 20;
if (!(Number.isInteger(spreadMiB) && spreadMiB >= 0 && spreadBytes <= 2 ** 36)) throw new Error(`--spread: ${values.spread} is not a whole number of MiB up to 65536`);
if (spreadBytes > 0 && spreadBytes < 4 * batchBytes) throw new Error(`--spread: ${values.spread} MiB is less than four batches of --bytes`);
/** Where a spread batch's requests may go: stride-aligned places in the region, this many. */
const spreadPlaces = Math.floor(spreadBytes / stride);
for (const b of batches) if (!(b >= 1 && b <= 256)) throw new Error(`--batch: ${b} is not between 1 and 256`);
for (const op of ops) if (op !== 'READ' && op !== 'WRITE' && op !== 'CAS') throw new Error(`--ops: unknown op ${op} (READ, WRITE or CAS)`);
if (!(seconds > 0)) throw new Error('--seconds must be positive');
if (!(Number.isInteger(readBytes) && readBytes >= 1 && readBytes <= 128 << 20)) throw new Error(`--bytes: ${values.bytes} is not between 1 and 134217728`);

const socketDir = values.url === undefined ? mkdtempSync(join(tmpdir(), 'rkv-bench-')) : undefined;
const url = values.url ?? `shm://${join(socketDir!, 'bench.sock')}`;
const scheme: string = schemeOf(url) ?? badUrl(url);

function badUrl(url: string): never {
  throw new Error(`--url ${url}: expected ${urlExamples()}`);
}

async function connect(): Promise<{ client: Provider; server: Provider; conn: Connection; cq: CompletionQueue; close: () => void; wrFor: (op: string, i: number, last: boolean) => WorkRequest }> {
  const server = new Provider(scheme);
  const client = new Provider(scheme);
  const region = server.allocate(Math.max(1 << 20, batchBytes, spreadBytes), access.REMOTE_ALL);
  if (spreadBytes > 0) region.bytes.fill(1);
  const serverCq = server.createCq(64);
  const listener = server.listen(url);
  server.on('connectRequest', (request) => request.accept({ cq: serverCq }));
  const scratch = client.allocate(Math.max(1 << 16, batchBytes), Access.LOCAL_WRITE);
  const cq = client.createCq(1024);
  const conn = await client.connect(listener.url, { cq });
  const wrFor = (op: string, i: number, last: boolean): WorkRequest => ({
    wrId: i,
    opcode: op === 'READ' ? Opcode.READ : op === 'WRITE' ? Opcode.WRITE : Opcode.CMP_AND_SWP,
    flags: last ? SendFlag.SIGNALED : 0,
    local: scratch,
    localOffset: i * stride,
    length: op === 'CAS' ? 8 : readBytes,
    remoteAddr: region.addr + BigInt(i * stride),
    rkey: region.rkey,
    compareAdd: 0n,
    swap: 0n,
  });
  return {
    client, server, conn, cq, wrFor,
    close: () => { conn.disconnect(); listener.close(); client.close(); server.close(); },
  };
}

function run(ctx: Awaited<ReturnType<typeof connect>>, op: string, batch: number): Result {
  const { client, conn, cq } = ctx;
  // The batch is written once; every iteration posts the same requests (--spread: to other places).
  for (let i = 0; i < batch; i++) writeWorkRequest(client.sendBuffer, i, ctx.wrFor(op, i, i === batch - 1));
  const base = ctx.wrFor(op, 0, false).remoteAddr!;
  const baseLo = Number(base & 0xffffffffn);
  const baseHi = Number(base >> 32n);
  let x = 2463534242;
  /** Points each request of the batch at a pseudo-random place of the spread region (xorshift32). */
  const scatter = (): void => {
    const words = client.sendBuffer;
    for (let i = 0, o = 0; i < batch; i++, o += WrLayout.WORDS) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      const lo = baseLo + ((x >>> 0) % spreadPlaces) * stride;
      words[o + WrLayout.REMOTE_ADDR_LO] = lo >>> 0;
      words[o + WrLayout.REMOTE_ADDR_HI] = baseHi + Math.floor(lo / 2 ** 32);
    }
  };
  const histogram = createHistogram();
  let crossings = 0;
  let batchesDone = 0;
  const warmupEnd = performance.now() + Math.min(200, seconds * 200);
  while (performance.now() < warmupEnd) {
    if (spreadPlaces > 0) scatter();
    conn.postSendRaw(batch);
    while (cq.pollRaw(16) === 0);
  }
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(seconds * 1e9));
  let now = start;
  while (now < end) {
    const t0 = now;
    if (spreadPlaces > 0) scatter();
    conn.postSendRaw(batch);
    crossings++;
    let got = 0;
    while (got === 0) {
      got = cq.pollRaw(16);
      crossings++;
    }
    // A failed batch would be measured as fast: stop instead.
    if (cq.completions[2] !== 0) throw new Error(`${op} completed with status ${cq.completions[2]}: ${conn.firstError}`);
    now = process.hrtime.bigint();
    histogram.record(Number(now - t0) || 1);
    batchesDone++;
  }
  const elapsed = Number(now - start) / 1e9;
  const total = batchesDone * batch;
  return {
    op,
    bytes: op === 'CAS' ? 8 : readBytes,
    spreadMiB,
    batch,
    ops: total,
    seconds: elapsed,
    opsPerSec: total / elapsed,
    nsPerOp: (elapsed * 1e9) / total,
    medianLatencyUs: histogram.percentile(50) / 1000,
    p99LatencyUs: histogram.percentile(99) / 1000,
    crossingsPerOp: crossings / total,
  };
}

function table(results: Result[]): string {
  const header = ['op', 'bytes', 'batch', 'ops/s', 'ns/op', 'batch p50 µs', 'batch p99 µs', 'crossings/op'];
  const rows = results.map((r) => [
    r.op, String(r.bytes), String(r.batch), Math.round(r.opsPerSec).toLocaleString('en-US'), r.nsPerOp.toFixed(0),
    r.medianLatencyUs.toFixed(2), r.p99LatencyUs.toFixed(2), r.crossingsPerOp.toFixed(3),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i < 1 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

const ctx = await connect();
const results: Result[] = [];
for (const op of ops) for (const batch of batches) results.push(run(ctx, op, batch));
ctx.close();
if (socketDir !== undefined) rmSync(socketDir, { recursive: true, force: true });

console.log(`rdma-kv transport microbenchmark — provider ${scheme}, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}`);
console.log(table(results));
const output = values.json ?? join('bench', 'results', `transport-${scheme}.json`);
mkdirSync(dirname(output), { recursive: true });
writeFileSync(
  output,
  JSON.stringify({ benchmark: 'transport-microbench', provider: scheme, url, node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model, date: new Date().toISOString(), results }, null, 2) + '\n',
);
console.log(`results written to ${output}`);
