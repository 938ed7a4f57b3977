// What the epoch barrier costs (docs/replication-design.md §4.3): the time from
// closing hash slots' epoch words to opening them at the next epoch, on regions
// of 256 MiB to 4 GiB, idle and while writers PUT. The barrier reads every
// bucket's lock word once (a 32-bit load each), so an idle barrier's time is its
// scan of the index (one bucket per ~1 KiB of region); under writes it also
// waits for the PUTs holding locks at that moment to commit (a few µs each).
// It is part of the failover bound (T + 1.5 s for regions up to 8 GiB).
//
//   node dist/bench/kv/epoch-barrier.js [--sizes 256,1024,4096] [--rounds 7]
//
// Each cell is the median of the rounds (all 16,384 hash slots, epoch + 1 each round).
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { EpochWord } from '../../protocol/constants.js';
import { KvServer } from '../../server/kv-server.js';
import { writeFileEnsuringDir } from '../ycsb/report/results.js';
import { markdownTable } from './markdown-table.js';

const { values } = parseArgs({ options: { sizes: { type: 'string', default: '256,1024,4096' }, rounds: { type: 'string', default: '7' } } });
const sizesMiB = values.sizes.split(',').map(Number);
const rounds = Number(values.rounds);
const allSlots = Array.from({ length: EpochWord.HASH_SLOTS }, (_, i) => i);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const dir = mkdtempSync(join(tmpdir(), 'rkv-barrier-'));

const results = [];
let epoch = 0;
for (const mib of sizesMiB) {
  const server = await KvServer.start({ listen: [`shm://${join(dir, `${mib}.sock`)}`], memoryBytes: mib * 2 ** 20 });
  const { bucketCount } = server.namespace('default').layout;
  const idle: number[] = [];
  const idleScan: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const report = await server.epochBarrier(allSlots, ++epoch);
    idle.push(report.totalMs);
    idleScan.push(report.scanMs);
  }
  // Under writes: a client in another process keeps 64 PUTs in flight while the barrier runs.
  const writer = spawn(process.execPath, [fileURLToPath(new URL('writer-child.js', import.meta.url)), server.urls[0]!], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve) => writer.stdout.once('data', resolve));
  const busy: number[] = [];
  const waited: number[] = [];
  const heldAtScan: number[] = [];
  for (let r = 0; r < rounds; r++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    const report = await server.epochBarrier(allSlots, ++epoch);
    busy.push(report.totalMs);
    waited.push(report.waitedFor);
    heldAtScan.push(report.heldAtStart);
  }
  writer.kill('SIGKILL');
  await new Promise((resolve) => writer.once('close', resolve));
  await server.close();
  results.push({ regionMiB: mib, buckets: bucketCount, idleMs: median(idle), idleScanMs: median(idleScan), busyMs: median(busy), busyHeldAtScan: median(heldAtScan), busyWaitedFor: median(waited), roundsIdleMs: idle, roundsBusyMs: busy });
}

const f = (ms: number) => ms.toFixed(2);
console.log(`rdma-kv epoch barrier — provider shm, ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, all ${EpochWord.HASH_SLOTS} hash slots, median of ${rounds} rounds`);
console.log(
  markdownTable(
    ['region', 'buckets', 'idle: barrier ms', 'idle: index scan ms', 'ms per GiB (idle)', 'under 64 PUTs in flight: barrier ms', 'locks seen held by the scan', 'still held after it (waited for)'],
    results.map((r) => [`${r.regionMiB} MiB`, r.buckets.toLocaleString('en'), f(r.idleMs), f(r.idleScanMs), f((r.idleMs * 1024) / r.regionMiB), f(r.busyMs), String(r.busyHeldAtScan), String(r.busyWaitedFor)]),
    'l',
  ),
);
const output = join('bench', 'results', 'epoch-barrier-shm.json');
writeFileEnsuringDir(output, JSON.stringify({ benchmark: 'epoch-barrier', provider: 'shm', node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model, date: new Date().toISOString(), rounds, results }, null, 2) + '\n');
console.log(`results written to ${output}`);
