// A KvServer on a fresh URL of the provider under test, and clients for it.
import { type ChildProcess, fork, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import test, { type ExecutionContext } from 'ava';
import { destination, pino } from 'pino';

import { type HistoryEvent, KvClient, type KvClientOptions } from '../../client/index.js';
import { KvServer, type KvServerOptions } from '../../server/kv-server.js';
import { type Scheme, eventually, listenUrl, slow, testTimeoutMs } from './providers.js';

export { CHURN_LOCK, selfValidating, validate } from './values.js';

/**
 * RKV_TEST_LOG=<level> (e.g. debug): the suites' servers log to stderr at that level, to
 * see what a server did in a failing run (the guest's tier cannot be stepped through).
 */
const testLog = process.env.RKV_TEST_LOG ? pino({ level: process.env.RKV_TEST_LOG }, destination(2)) : undefined;

/**
 * Without RKV_TEST_LOG, each server's last log lines (info and up: connects, departures and
 * why, warnings) are kept (serverLog): a failing flood prints them (FailureLog), and so does
 * any failing test (the afterEach hook below).
 */
const LOG_KEPT = 20;
const logs = new WeakMap<KvServer, string[]>();
/** Servers started since the last test ended, with the NIC's counters at their start. */
let started: Array<{ server: KvServer; nicBefore: Map<string, number> }> = [];

export async function startServer(scheme: Scheme, options: Partial<KvServerOptions> = {}): Promise<KvServer> {
  const kept: string[] = [];
  const nicBefore = nicCounters();
  const logger =
    testLog ??
    pino(
      { level: 'info' },
      {
        write(line: string) {
          if (kept.push(line.trimEnd()) > LOG_KEPT) kept.shift();
        },
      },
    );
  const server = await KvServer.start({ listen: [listenUrl(scheme)], memoryBytes: 64 << 20, graceMs: 200, keepaliveMs: slow(1000), logger, ...options });
  logs.set(server, kept);
  started.push({ server, nicBefore });
  return server;
}

/** The last log lines a startServer server wrote (none kept under RKV_TEST_LOG: they went to stderr). */
export function serverLog(server: KvServer): string[] {
  return logs.get(server) ?? [];
}

/**
 * Every test file that starts servers here: when a test fails, what its servers logged last and
 * the NIC counters that changed meanwhile go to stderr, which ava prints. The guest's tier
 * cannot be stepped through, and why a connection was lost is in the server's log, not in the
 * client's error.
 */
test.afterEach.always((t) => {
  const lines = started.flatMap(({ server, nicBefore }) => [`server ${server.urls[0]}:`, ...evidence(server, nicBefore)]);
  started = [];
  if (t.passed || lines.length === 0) return;
  lines.push(...busiestProcesses());
  process.stderr.write(`${t.title.replace(/^afterEach.always hook for /, '')} failed; its servers' last log lines:\n${lines.map((line) => `  ${line}`).join('\n')}\n`);
});

/** The machine's uptime and its busiest processes (a stray busy-polling child starves the guest's two vCPUs). */
function busiestProcesses(): string[] {
  const ps = spawnSync('ps', ['-eo', 'pid,stat,pcpu,etimes,args', '--sort=-pcpu'], { encoding: 'utf8' });
  const uptime = existsSync('/proc/uptime') ? readFileSync('/proc/uptime', 'utf8').split(' ')[0] : '?';
  return [`uptime ${uptime} s; busiest processes:`, ...(ps.stdout ?? '').split('\n').slice(0, 8).map((line) => line.slice(0, 160))];
}

/**
 * The errors of a flood of operations, for one assertion whose diff says why in a few lines
 * (CI shows only the tail of a failure): the first error whole, then a count per code, then
 * the server's last log lines. `summary` is [] when nothing failed.
 */
export class FailureLog {
  private first: string | undefined;
  private readonly counts = new Map<string, number>();
  private readonly nicBefore = nicCounters();

  constructor(private readonly server?: KvServer) {}

  record(error: unknown, label = ''): void {
    const prefix = label ? `${label}: ` : '';
    if (this.first === undefined) this.first = `first: ${prefix}${String(error)}`;
    const code = (error as { code?: string }).code ?? (error as Error).name ?? 'unknown';
    this.counts.set(code, (this.counts.get(code) ?? 0) + 1);
  }

  get summary(): string[] {
    if (this.first === undefined) return [];
    const counts = [...this.counts].map(([code, n]) => `${code} x${n}`).join(', ');
    return [this.first, `in all: ${counts}`, ...evidence(this.server, this.nicBefore)];
  }
}

/**
 * Connections lost during a flood whose test is about something else (eviction): the lost
 * connection's ops fail with the retryable KV_DISCONNECTED, the client reconnects, and
 * `put` and `get` retry them there. Each loss is noted with what the server logged and what the
 * NIC counted (the Soft-RoCE guest has fenced a client whose queue pair went silent for
 * 20 s in the middle of a long tier: docs/softroce-vm.md, Pitfalls), so a passing run still shows it.
 */
export class ReconnectingClient {
  private readonly losses: string[] = [];
  private retried = 0;
  private readonly nicBefore = nicCounters();

  constructor(
    private readonly kv: KvClient,
    private readonly server: KvServer,
    private readonly attempts = 5,
  ) {}

  put(key: string, value: Buffer): Promise<void> {
    return this.retrying(`put ${key}`, () => this.kv.put(key, value));
  }

  get(key: string): Promise<Buffer | undefined> {
    return this.retrying(`get ${key}`, () => this.kv.get(key));
  }

  private async retrying<T>(what: string, op: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await op();
      } catch (error) {
        if ((error as { code?: string }).code !== 'KV_DISCONNECTED' || attempt >= this.attempts) throw error;
        this.retried++;
        if (this.losses.length < 2) this.losses.push(`${what}: ${String(error)}`);
        // The loss may not show in the status yet: a pause, then until it is ready again.
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
        await eventually(() => this.kv.status === 'ready', `the client reconnects (status ${this.kv.status})`);
      }
    }
  }

  /** What was lost and why, for t.log; [] when nothing was. */
  get notes(): string[] {
    if (this.losses.length === 0) return [];
    const lost = `the connection was lost: ${this.retried} operations retried after a reconnect (${this.losses.join('; ')}, ...)`;
    return [lost, ...evidence(this.server, this.nicBefore)];
  }
}

/** What the server logged last, and the NIC counters that changed since `nicBefore`. */
function evidence(server: KvServer | undefined, nicBefore: Map<string, number>): string[] {
  const logged = server ? serverLog(server).map((line) => `server: ${line}`) : [];
  return [...logged, `NIC counters meanwhile: ${nicChanges(nicBefore) || 'none'}`];
}

/** The counters that changed since `before`, as "device/name +delta, ..." ('' if none). */
function nicChanges(before: Map<string, number>): string {
  return [...nicCounters()]
    .filter(([name, value]) => value !== (before.get(name) ?? 0))
    .map(([name, value]) => `${name} +${value - (before.get(name) ?? 0)}`)
    .join(', ');
}

/** The RDMA devices' hardware counters (rxe's retransmits, RNR NAKs, errors...), by device/name; empty without RDMA devices. */
export function nicCounters(): Map<string, number> {
  const counters = new Map<string, number>();
  const root = '/sys/class/infiniband';
  if (!existsSync(root)) return counters;
  for (const device of readdirSync(root)) {
    const dir = join(root, device, 'ports', '1', 'hw_counters');
    if (!existsSync(dir)) continue;
    for (const name of readdirSync(dir)) {
      const value = Number(readFileSync(join(dir, name), 'utf8').trim());
      if (Number.isFinite(value)) counters.set(`${device}/${name}`, value);
    }
  }
  return counters;
}

export function connect(server: KvServer, options: Partial<KvClientOptions> = {}): Promise<KvClient> {
  return KvClient.connect({ url: server.urls[0]!, timeoutMs: testTimeoutMs(), ...options });
}

const kvChild = fileURLToPath(new URL('kv-child.js', import.meta.url));

/**
 * Forks kv-child.js (see its modes) with the suites' environment; `silent` drops its output
 * (many children). The test's teardown kills it if it still runs.
 */
export function forkKvChild(t: ExecutionContext, args: string[], options: { silent?: boolean; env?: NodeJS.ProcessEnv } = {}): ChildProcess {
  const proc = fork(kvChild, args, { env: { ...process.env, RKV_QUIET: '1', ...options.env }, stdio: options.silent ? ['ignore', 'ignore', 'ignore', 'ipc'] : undefined });
  t.teardown(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  });
  return proc;
}

/** Runs kv-child.js to the end: its last report, or the error it reported or died of. */
export function runKvChild(t: ExecutionContext, args: string[], onMessage?: (m: Record<string, unknown>) => void, onFork?: (proc: ChildProcess) => void): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const proc = forkKvChild(t, args);
    onFork?.(proc);
    let report: Record<string, unknown> | undefined;
    proc.on('message', (m: Record<string, unknown>) => {
      if (!('why' in m)) report = m; // an answer to 'why' (kv-child.ts) is no report
      onMessage?.(m);
    });
    // 'close', not 'exit': 'exit' can come before the child's last message has been read from
    // the channel (CI at ea5f4c9: "child model exited with 0" from a child that had reported).
    proc.on('close', (code, signal) => {
      if (report?.error) reject(new Error(String(report.error)));
      else if (code !== 0 || !report) reject(new Error(`child ${args[0]} exited with ${signal ?? code}`));
      else resolve(report);
    });
  });
}

/** Runs `processes` kv-child processes in `mode` (lin, linatomic) against `url`, each recording its history; all their events. */
export async function recordHistories(t: ExecutionContext, url: string, mode: string, processes: number, count: number): Promise<Array<HistoryEvent & { process: number }>> {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-history-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const files = Array.from({ length: processes }, (_, p) => join(dir, `p${p}.jsonl`));
  await Promise.all(files.map((file, p) => runKvChild(t, [mode, url, String(p), String(count), file])));
  return files.flatMap((file, p) => readFileSync(file, 'utf8').trim().split('\n').map((line) => ({ ...(JSON.parse(line) as HistoryEvent), process: p })));
}

/** Whether process `pid` is stopped (SIGSTOP; the shm provider's RKV_SHM_TEST_STOP_BEFORE hook stops itself so): /proc/PID/stat's state letter. */
export function processStopped(pid: number): boolean {
  try {
    // "pid (comm) S ...": the state letter follows the command's closing parenthesis
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'T';
  } catch {
    return false;
  }
}
