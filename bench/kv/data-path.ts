/**
 * The data path, in one run on one machine: the transport floor (batch-1 READ of 64 B,
 * batch-64 READ of a value's size), and against it and against ioredis on a redis-server
 * started here: sequential get, 64-in-flight get, getMany(64), sequential and 64-in-flight
 * put, putMany(64), the servers' and the client's CPU per operation, the 1-RTT GET hit rate,
 * `npm start`'s ops/s and GC share, and the Soft-RoCE guest's ratios to perftest (from the
 * last rxe tier run). One table, each row with issue 14's goal for it and whether this run
 * met it; JSON in bench/results/data-path.json. docs/benchmarks.md explains the rows.
 *
 *   node dist/bench/kv/data-path.js [--seconds 3] [--keys 100000] [--value-bytes 1024] [--quick]
 *        [--pollmode busy|event] [--listen URL] [--phases get,get64,…] [--skip redis,main-job,floor] [--json FILE]
 *
 * The rdma-kv server runs in a child process (bench/kv/server-child.js; --listen picks its
 * URL, by default a private shm socket), redis-server is found and started as `kv-bench
 * compare` does; without it the ioredis column says why and the rest runs.
 * The Soft-RoCE tier runs this in its guest for the GET / ib_read_lat row
 * (deploy/softroce-vm/guest/bench-ratio.sh: --listen rdma://… --phases get --skip redis,main-job,floor).
 */
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';

import { UsageError } from '../../protocol/operator-input.js';
import { writeFileEnsuringDir } from '../ycsb/report/results.js';
import { measureFloor, type Floor } from './data-path/floor.js';
import { verdict } from './data-path/goals.js';
import { readGuestRatios } from './data-path/guest.js';
import { runNpmStart, type NpmStart } from './data-path/npm-start.js';
import { USAGE, parseOptions, type DataPathOptions } from './data-path/options.js';
import { PHASES, runPhase, type PhaseName, type PhaseResult } from './data-path/phases.js';
import { hitRatePercent } from './data-path/round-trips.js';
import { COLUMNS, buildRows, cells, type Failure } from './data-path/rows.js';
import { load, openRdmaKv, openRedis, serverMemoryMiB, type Store } from './data-path/stores.js';
import { Workload } from './data-path/workload.js';
import { markdownTable } from './markdown-table.js';

const progress = (text: string): void => void process.stderr.write(`data-path: ${text}\n`);

interface Measured {
  rdmaKv: Map<PhaseName, PhaseResult>;
  failed: Failure[];
  ioredis: Map<PhaseName, PhaseResult> | string;
  redisVersion: string | undefined;
  /** why the ioredis column is empty, when it is */
  redisWhy: string | undefined;
  serverUrl: string;
  oneRoundTripPercent: number | string;
}

/** Starts both stores, loads them, runs every phase against each (ioredis first), stops them. */
async function measureStores(options: DataPathOptions, workload: Workload): Promise<Measured> {
  const redis = options.skip.has('redis') ? { unavailable: 'skipped' as const, why: '--skip redis' } : await openRedis();
  const stores: Store[] = [];
  let ioredis: Map<PhaseName, PhaseResult> | string;
  if ('unavailable' in redis) {
    ioredis = redis.unavailable;
    if (ioredis !== 'skipped') progress(`ioredis: ${redis.why}`);
  } else {
    ioredis = new Map();
    stores.push(redis);
  }
  const rdmaKv = new Map<PhaseName, PhaseResult>();
  const failed: Failure[] = [];
  try {
    const kv = await openRdmaKv(workload, options.pollMode, options.listen);
    stores.push(kv);
    progress(`rdma-kv server pid ${kv.serverPid} on ${kv.url}${'version' in redis ? `; redis-server ${redis.version} pid ${redis.serverPid}` : ''}`);
    for (const store of stores) {
      const t0 = performance.now();
      await load(store, workload);
      progress(`${store.name}: loaded ${workload.keys.toLocaleString('en-US')} keys in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    const before = kv.roundTrips();
    for (const name of options.phases) {
      for (const store of stores) {
        let r: PhaseResult;
        try {
          r = await runPhase(PHASES[name], store, workload, options.seconds);
        } catch (error) {
          // the row says so; the other phases still run (the exit code is 1)
          failed.push({ store: store.name, phase: name, error: error instanceof Error ? error.message : String(error) });
          progress(`${store.name}: ${PHASES[name].label} FAILED: ${failed.at(-1)!.error}`);
          continue;
        }
        (store === kv ? rdmaKv : (ioredis as Map<PhaseName, PhaseResult>)).set(name, r);
        progress(`${store.name}: ${PHASES[name].label}: ${Math.round(r.keysPerSec).toLocaleString('en-US')} keys/s, p50 ${r.latencyUs.p50.toFixed(1)} µs per call` +
          `, server CPU ${r.serverCpuMs.toFixed(0)} ms${r.wrong ? `, ${r.wrong} WRONG answers` : ''}`);
      }
    }
    const after = kv.roundTrips();
    const rate = before && after ? hitRatePercent(before, after) : undefined;
    return {
      rdmaKv,
      ioredis,
      redisVersion: 'version' in redis ? redis.version : undefined,
      redisWhy: 'why' in redis ? redis.why : undefined,
      serverUrl: kv.url,
      failed,
      oneRoundTripPercent: rate ?? (after ? 'skipped' : 'not built'),
    };
  } finally {
    for (const store of stores) await store.close();
  }
}

function machine(): { cpu: string; vcpus: number; os: string; node: string; loadavg: number[] } {
  let os: string = process.platform;
  try {
    os = /^PRETTY_NAME="?([^"\n]+)"?/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? os;
  } catch {
    // not Linux
  }
  return { cpu: cpus()[0]?.model ?? 'unknown', vcpus: cpus().length, os, node: process.version, loadavg: loadavg() };
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  if (options === undefined) return;
  const env = machine();
  const size = `${options.valueBytes.toLocaleString('en-US')} B values, ${options.keys.toLocaleString('en-US')} keys, ${options.seconds} s per phase`;
  progress(options.skip.has('floor') ? size : `${size}; the transport floor first`);
  const workload = new Workload(options.keys, options.valueBytes);
  let floor: Floor | string = 'skipped';
  if (!options.skip.has('floor')) {
    floor = await measureFloor(options.listen ?? 'shm:', options.valueBytes, options.seconds, serverMemoryMiB(workload));
    progress(`floor (${floor.provider}): batch-1 READ 64 B ${floor.read1.usPerRead.toFixed(3)} µs, batch-64 READ ${floor.read64.bytes} B ${floor.read64.usPerRead.toFixed(3)} µs per READ`);
    progress(`floor at random in ${floor.spreadMiB} MiB: batch-1 READ ${floor.cold1.bytes} B ${floor.cold1.usPerRead.toFixed(3)} µs, batch-64 ${floor.cold64.usPerRead.toFixed(3)} µs per READ`);
  }
  const measured = await measureStores(options, workload);
  let npmStart: NpmStart | string = 'skipped';
  if (!options.skip.has('main-job')) {
    progress('`npm start` (the main job)');
    npmStart = await runNpmStart(options.quick, options.pollMode, join(dirname(resolve(options.json)), 'kv-main-job.json'));
  }
  const guest = readGuestRatios();
  const rows = buildRows({ ...measured, floor, valueBytes: options.valueBytes, npmStart, guest });

  const transport = measured.serverUrl.slice(0, measured.serverUrl.indexOf(':'));
  const redisText = typeof measured.ioredis === 'string' ? `ioredis ${measured.ioredis}` : `ioredis on redis-server ${measured.redisVersion} (one connection, auto-pipelining)`;
  process.stdout.write(`\ndata path: ${size}; rdma-kv over ${transport} (${options.pollMode} polling), ${redisText}\n`);
  process.stdout.write(`${env.cpu} × ${env.vcpus} vCPU, ${env.os}, Node ${env.node}, load average ${env.loadavg.map((l) => l.toFixed(2)).join(' ')}\n\n`);
  process.stdout.write(markdownTable(COLUMNS, rows.map(cells), 'llllll') + '\n\n');
  process.stdout.write('floor (×): rdma-kv\'s time per key over the floor\'s (lower is better); ioredis (×): rdma-kv\'s throughput over ioredis\' (CPU rows: ioredis\' CPU over rdma-kv\'s; higher is better).\n');
  if (measured.ioredis === 'missing' || measured.ioredis === 'failed') process.stdout.write(`ioredis: ${measured.redisWhy}; its column is empty.\n`);
  if (typeof npmStart !== 'string') process.stdout.write(`\`npm start\`: ${npmStart.operations.toLocaleString('en-US')} operations of workloada, summary in ${npmStart.json}${npmStart.notes.map((n) => `; ${n}`).join('')}\n`);
  if (guest === undefined) process.stdout.write('guest rows: no bench/results/rxe-ratio.json; the rxe tier writes it (npm run test:rxe)\n');
  else if (guest.error !== undefined) process.stdout.write(`guest rows: ${guest.file} is unreadable (${guest.error}); the rxe tier writes it again (npm run test:rxe)\n`);
  else process.stdout.write(`guest rows: ${guest.file} of ${guest.date} (deploy/softroce-vm/guest/bench-ratio.sh)\n`);

  const wrong = [...measured.rdmaKv.values(), ...(typeof measured.ioredis === 'string' ? [] : measured.ioredis.values())].filter((r) => r.wrong > 0);
  for (const r of wrong) process.stdout.write(`WARNING: ${r.store} ${PHASES[r.phase].label}: ${r.wrong} answers were not the key's value\n`);
  for (const f of measured.failed) process.stdout.write(`FAILED: ${f.store} ${PHASES[f.phase].label}: ${f.error}\n`);
  const file = resolve(options.json);
  writeFileEnsuringDir(file, JSON.stringify({
    benchmark: 'data-path',
    date: new Date().toISOString(),
    machine: { ...env, loadavgAtEnd: loadavg() },
    config: { keys: options.keys, valueBytes: options.valueBytes, secondsPerPhase: options.seconds, pollMode: options.pollMode, server: measured.serverUrl, phases: options.phases, redisServer: measured.redisVersion ?? measured.ioredis },
    floor,
    phases: { rdmaKv: Object.fromEntries(measured.rdmaKv), ioredis: typeof measured.ioredis === 'string' ? measured.ioredis : Object.fromEntries(measured.ioredis) },
    failed: measured.failed,
    oneRoundTripPercent: measured.oneRoundTripPercent,
    npmStart,
    rows: rows.map((r) => ({ ...r, goals: r.goals.map((g) => ({ ...g, met: verdict(g) })) })),
  }, null, 2) + '\n');
  progress(`results ${file}`);
  if (wrong.length > 0 || measured.failed.length > 0) process.exitCode = 1;
}

main().catch((error: unknown) => {
  if (error instanceof UsageError) {
    process.stderr.write(`data-path: ${error.message}\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  progress(`error: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
});
