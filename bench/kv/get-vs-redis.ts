/**
 * GET against ioredis, in one run on one machine: 1 KiB values, 100,000 keys, one client
 * process (this one), two ways of issuing GETs —
 *
 *   sequential    one GET at a time, each awaited before the next
 *   64-in-flight  64 loops in one event loop, each awaiting its own GETs (64 outstanding)
 *
 * — against rdma-kv (KvServer in a child process, bench/kv/server-child.js, over shm) and
 * against redis-server (started here on a free loopback port, --save '' --appendonly no)
 * through ioredis. Each server's CPU time during each GET phase is read from
 * /proc/<pid>/stat (utime + stime, all threads) before and after the phase; the client's
 * from process.cpuUsage().
 *
 * Prints a table and the ratios rdma-kv / ioredis (ops/s), writes
 * bench/results/get-vs-redis.json. The goal the project set itself: ≥ 20× ioredis sequential,
 * ≥ 10× at 64 in flight, with the rdma-kv server's CPU near zero.
 *
 *   node dist/bench/kv/get-vs-redis.js [--seconds 3] [--keys 100000] [--value-bytes 1024]
 *                                      [--pollmode busy,event] [--out bench/results/get-vs-redis.json]
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { Redis } from 'ioredis';

import { KvClient } from '../../client/index.js';
import { findBinary, freePort, missingBinaryMessage } from '../ycsb/compare/servers.js';
import { writeFileEnsuringDir } from '../ycsb/report/results.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const INFLIGHT = 64;

// ---- options --------------------------------------------------------------------------------

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '3' },
    keys: { type: 'string', default: '100000' },
    'value-bytes': { type: 'string', default: '1024' },
    pollmode: { type: 'string', default: 'busy,event' },
    out: { type: 'string', default: join(ROOT, 'bench/results/get-vs-redis.json') },
  },
  strict: true,
});
const SECONDS = Number(args.seconds);
const KEYS = Number(args.keys);
const VALUE_BYTES = Number(args['value-bytes']);
const POLL_MODES = args.pollmode!.split(',').map((m) => m.trim()) as ('busy' | 'event')[];
if (!(SECONDS > 0) || !Number.isInteger(KEYS) || KEYS < 1 || !Number.isInteger(VALUE_BYTES) || VALUE_BYTES < 1 ||
    POLL_MODES.length === 0 || POLL_MODES.some((m) => m !== 'busy' && m !== 'event')) {
  process.stderr.write('usage: get-vs-redis [--seconds 3] [--keys 100000] [--value-bytes 1024] [--pollmode busy,event] [--out FILE]\n');
  process.exit(2);
}

const progress = (text: string): void => void process.stderr.write(`get-vs-redis: ${text}\n`);

// ---- processes and CPU time ----------------------------------------------------------------------

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** utime + stime of a process (all its threads), in ms. */
function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields[0] is field 3 (state)
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
}

function clientCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

interface Child {
  pid: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    progress(`${signal}: stopping the servers`);
    process.exit(signal === 'SIGINT' ? 130 : 143);
  });
}

function track(child: ChildProcess, name: string): Child {
  children.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    pid: child.pid!,
    process: child,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => {
          progress(`${name} did not stop within 3 s: SIGKILL`);
          child.kill('SIGKILL');
        }, 3000);
        await exited;
        clearTimeout(timer);
      }
      children.delete(child);
    },
  };
}

/** server-child.js; resolves with its URL once it serves. */
async function startRdmaKv(): Promise<Child & { url: string }> {
  const script = join(ROOT, 'dist/bench/kv/server-child.js');
  const memoryMiB = Math.max(256, Math.ceil((KEYS * (VALUE_BYTES + 256) * 1.6) / 2 ** 20));
  const child = spawn(process.execPath, [script, '--memory-mib', String(memoryMiB)], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, RKV_QUIET: '1' },
  });
  const handle = track(child, 'server-child');
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(out.slice(0, nl).trim());
    });
    child.once('exit', (code) => reject(new Error(`server-child exited with code ${code} before serving`)));
  });
  return { ...handle, url };
}

async function startRedisServer(): Promise<Child & { port: number; version: string }> {
  const binary = findBinary('redis-server');
  if (!binary) throw new Error(missingBinaryMessage('redis-server'));
  const version = /v=([\d.]+)/.exec(execFileSync(binary, ['--version'], { encoding: 'utf8' }))?.[1] ?? 'unknown';
  const port = await freePort();
  const child = spawn(binary, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const handle = track(child, 'redis-server');
  const deadline = Date.now() + 10_000;
  for (;;) {
    const probe = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => {}); // refused until it listens
    try {
      await probe.connect();
      await probe.ping();
      probe.disconnect();
      break;
    } catch (error) {
      probe.disconnect();
      if (child.exitCode !== null || Date.now() > deadline) {
        await handle.stop();
        throw new Error(`redis-server did not start on 127.0.0.1:${port}: ${(error as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { ...handle, port, version };
}

// ---- the workload --------------------------------------------------------------------------------

const keyNames = Array.from({ length: KEYS }, (_, i) => `key:${String(i).padStart(8, '0')}`);

/** The value of key i: its index, then a pattern derived from it (checked on a sample of GETs). */
function valueOf(i: number): Buffer {
  const v = Buffer.alloc(VALUE_BYTES);
  v.writeUInt32LE(i, 0);
  for (let j = 4; j < VALUE_BYTES; j++) v[j] = 33 + ((i * 31 + j) % 90);
  return v;
}

/** A fixed pseudo-random order of keys, the same for every store (xorshift32). */
const order = (() => {
  const n = 1 << 20;
  const out = new Uint32Array(n);
  let x = 2463534242;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = (x >>> 0) % KEYS;
  }
  return out;
})();
const ORDER_MASK = order.length - 1;

interface Store {
  name: string;
  get(key: string): Promise<Buffer | null | undefined>;
  put(key: string, value: Buffer): Promise<unknown>;
  close(): Promise<void>;
}

interface PhaseResult {
  store: string;
  mode: 'sequential' | '64-in-flight';
  ops: number;
  seconds: number;
  opsPerSec: number;
  latencyUs: { avg: number; p50: number; p90: number; p99: number; p999: number; max: number };
  misses: number;
  wrongValues: number;
  clientCpuMs: number;
  clientCpuPct: number;
  serverCpuMs: number;
  serverCpuPct: number;
  serverCpuUsPerOp: number;
}

async function loadKeys(store: Store): Promise<void> {
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: INFLIGHT }, async () => {
      while (next < KEYS) {
        const i = next++;
        await store.put(keyNames[i]!, valueOf(i));
      }
    }),
  );
  progress(`${store.name}: loaded ${KEYS.toLocaleString('en-US')} keys of ${VALUE_BYTES} B in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}

/**
 * Runs GETs for `seconds` (after a short warm-up) with `lanes` loops in flight; per-op
 * latency from performance.now() around each await.
 */
const LATENCY_CAPACITY = 1 << 21; // per phase; beyond it ops are counted, not timed
const latencies = new Float64Array(LATENCY_CAPACITY);

async function getPhase(store: Store, serverPid: number, mode: PhaseResult['mode'], seconds: number): Promise<PhaseResult> {
  const lanes = mode === 'sequential' ? 1 : INFLIGHT;
  const capacity = LATENCY_CAPACITY;
  let recorded = 0;
  let misses = 0;
  let wrong = 0;
  let cursor = 0;
  let stopAt = 0;
  let measuring = false;
  const lane = async (): Promise<void> => {
    while (performance.now() < stopAt) {
      const k = order[cursor++ & ORDER_MASK]!;
      const t = performance.now();
      const v = await store.get(keyNames[k]!);
      const dt = performance.now() - t;
      if (!measuring) continue;
      if (recorded < capacity) latencies[recorded] = dt;
      recorded++;
      if (!v) misses++;
      else if ((recorded & 1023) === 0 && !v.equals(valueOf(k))) wrong++;
      else if (v.length !== VALUE_BYTES || v.readUInt32LE(0) !== k) wrong++;
    }
  };
  // warm-up: JIT, connection state
  stopAt = performance.now() + Math.min(1000, seconds * 250);
  await Promise.all(Array.from({ length: lanes }, lane));

  measuring = true;
  const server0 = processCpuMs(serverPid);
  const client0 = clientCpuMs();
  const t0 = performance.now();
  stopAt = t0 + seconds * 1000;
  await Promise.all(Array.from({ length: lanes }, lane));
  const elapsed = (performance.now() - t0) / 1000;
  const clientMs = clientCpuMs() - client0;
  const serverMs = processCpuMs(serverPid) - server0;

  const n = Math.min(recorded, capacity);
  const sorted = latencies.subarray(0, n).sort(); // in place: the array is reused by the next phase
  const pct = (p: number): number => (n === 0 ? 0 : sorted[Math.min(n - 1, Math.floor((p / 100) * n))]! * 1000);
  let sum = 0;
  for (let i = 0; i < n; i++) sum += sorted[i]!;
  return {
    store: store.name,
    mode,
    ops: recorded,
    seconds: elapsed,
    opsPerSec: recorded / elapsed,
    latencyUs: { avg: n ? (sum / n) * 1000 : 0, p50: pct(50), p90: pct(90), p99: pct(99), p999: pct(99.9), max: n ? sorted[n - 1]! * 1000 : 0 },
    misses,
    wrongValues: wrong,
    clientCpuMs: clientMs,
    clientCpuPct: (100 * clientMs) / (elapsed * 1000),
    serverCpuMs: serverMs,
    serverCpuPct: (100 * serverMs) / (elapsed * 1000),
    serverCpuUsPerOp: recorded ? (serverMs * 1000) / recorded : 0,
  };
}

// ---- report ------------------------------------------------------------------------------------

function table(results: PhaseResult[]): string {
  const header = ['store', 'mode', 'GET/s', 'avg µs', 'p50 µs', 'p99 µs', 'p99.9 µs', 'client CPU %', 'server CPU ms', 'server CPU %', 'server µs/GET'];
  const rows = results.map((r) => [
    r.store,
    r.mode,
    Math.round(r.opsPerSec).toLocaleString('en-US'),
    r.latencyUs.avg.toFixed(1),
    r.latencyUs.p50.toFixed(1),
    r.latencyUs.p99.toFixed(1),
    r.latencyUs.p999.toFixed(1),
    r.clientCpuPct.toFixed(0),
    r.serverCpuMs.toFixed(0),
    r.serverCpuPct.toFixed(1),
    r.serverCpuUsPerOp.toFixed(2),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]): string => `| ${cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i < 2 ? '-'.repeat(w + 2) : '-'.repeat(w + 1) + ':')).join('|')}|`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

interface Machine {
  cpu: string;
  vcpus: number;
  memoryGiB: number;
  os: string;
  node: string;
  /** 1, 5, 15 min at the start: other work on the machine skews every number */
  loadavg: number[];
}

function machine(): Machine {
  let osName = process.platform as string;
  try {
    osName = /^PRETTY_NAME="?([^"\n]+)"?/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? osName;
  } catch {
    // not Linux
  }
  return { cpu: cpus()[0]?.model ?? 'unknown', vcpus: cpus().length, memoryGiB: Math.round(totalmem() / 2 ** 30), os: osName, node: process.version, loadavg: loadavg() };
}

// ---- main ----------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const startLoad = loadavg();
  progress(`${KEYS.toLocaleString('en-US')} keys × ${VALUE_BYTES} B, ${SECONDS} s per phase; starting redis-server and the rdma-kv server child`);
  const redisServer = await startRedisServer();
  const rkvServer = await startRdmaKv();
  const results: PhaseResult[] = [];
  const redisVersion = redisServer.version;
  try {
    progress(`redis-server ${redisServer.version} pid ${redisServer.pid} on 127.0.0.1:${redisServer.port}; rdma-kv pid ${rkvServer.pid} on ${rkvServer.url}`);

    // ioredis, default options, one connection
    const redis = new Redis({ host: '127.0.0.1', port: redisServer.port, lazyConnect: true });
    await redis.connect();
    const redisStore: Store = {
      name: 'ioredis',
      get: (k) => redis.getBuffer(k),
      put: (k, v) => redis.set(k, v),
      close: async () => void (await redis.quit()),
    };

    // rdma-kv: one KvClient per poll mode, same server
    const clients = new Map<string, KvClient>();
    for (const mode of POLL_MODES) clients.set(mode, await KvClient.connect({ url: rkvServer.url, pollMode: mode }));
    const kvStores: Store[] = POLL_MODES.map((mode) => {
      const c = clients.get(mode)!;
      return { name: `rdma-kv (${mode})`, get: (k) => c.get(k), put: (k, v) => c.put(k, v), close: () => c.close() };
    });

    await loadKeys(redisStore);
    await loadKeys(kvStores[0]!);

    for (const mode of ['sequential', '64-in-flight'] as const) {
      for (const [store, pid] of [[redisStore, redisServer.pid], ...kvStores.map((s) => [s, rkvServer.pid] as const)] as const) {
        progress(`${store.name}: ${mode} GET for ${SECONDS} s`);
        const r = await getPhase(store, pid, mode, SECONDS);
        results.push(r);
        progress(`  ${Math.round(r.opsPerSec).toLocaleString('en-US')} GET/s, p50 ${r.latencyUs.p50.toFixed(1)} µs, server CPU ${r.serverCpuMs.toFixed(0)} ms` +
          (r.misses || r.wrongValues ? `, ${r.misses} misses, ${r.wrongValues} wrong values` : ''));
      }
    }
    for (const s of [redisStore, ...kvStores]) await s.close();
  } finally {
    await rkvServer.stop();
    await redisServer.stop();
  }

  const find = (store: string, mode: string) => results.find((r) => r.store === store && r.mode === mode)!;
  const primary = `rdma-kv (${POLL_MODES[0]})`;
  const ratio = (mode: string): number => find(primary, mode).opsPerSec / find('ioredis', mode).opsPerSec;
  const goals = {
    sequential: { ratio: ratio('sequential'), goal: 20 },
    inflight64: { ratio: ratio('64-in-flight'), goal: 10 },
  };
  const env = { ...machine(), loadavg: startLoad, loadavgAtEnd: loadavg(), redisServer: redisVersion };
  process.stdout.write(`\nGET, ${VALUE_BYTES} B values, ${KEYS.toLocaleString('en-US')} keys, one client process, ${SECONDS} s per phase\n`);
  process.stdout.write(`${env.cpu} × ${env.vcpus} vCPU, ${env.os}, Node ${env.node}, redis-server ${redisVersion}, load average ${startLoad.map((l) => l.toFixed(2)).join(' ')}\n\n`);
  process.stdout.write(table(results) + '\n\n');
  for (const [name, g] of Object.entries(goals)) {
    process.stdout.write(`${primary} / ioredis, ${name === 'sequential' ? 'sequential' : '64 in flight'}: ${g.ratio.toFixed(2)}× (goal ≥ ${g.goal}×: ${g.ratio >= g.goal ? 'reached' : 'NOT reached'})\n`);
  }
  const bad = results.filter((r) => r.misses > 0 || r.wrongValues > 0);
  for (const r of bad) process.stdout.write(`WARNING: ${r.store} ${r.mode}: ${r.misses} misses, ${r.wrongValues} wrong values\n`);

  const out = resolve(args.out!);
  writeFileEnsuringDir(
    out,
    JSON.stringify(
      {
        benchmark: 'get-vs-redis',
        date: new Date().toISOString(),
        machine: env,
        config: { keys: KEYS, valueBytes: VALUE_BYTES, secondsPerPhase: SECONDS, inflight: INFLIGHT, pollModes: POLL_MODES, transport: 'shm' },
        results,
        ratios: { store: primary, sequential: goals.sequential.ratio, inflight64: goals.inflight64.ratio },
        goals: { sequential: 20, inflight64: 10, reached: goals.sequential.ratio >= 20 && goals.inflight64.ratio >= 10 },
      },
      null,
      2,
    ) + '\n',
  );
  progress(`results ${out}`);
  if (bad.length > 0) process.exitCode = 1;
}

main().catch((error: unknown) => {
  progress(`error: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
});
