// Running the real binaries (node bin/kv-server.js, node bin/kvctl.js) from
// the server suites: one-shot runs, a server process that is up once it has
// printed "ready", temp socket URLs and free TCP ports.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { ExecutionContext } from 'ava';

import { slow } from '../helpers/providers.js';

/** Where the repository's bin/ is, seen from dist/test/server. */
export const KV_SERVER = fileURLToPath(new URL('../../../bin/kv-server.js', import.meta.url));
export const KVCTL = fileURLToPath(new URL('../../../bin/kvctl.js', import.meta.url));

/** Only a guard against a hung child; no test asserts how fast anything is. Stretched in the emulated guest. */
const GUARD_MS = slow(60_000);

const childEnv = { ...process.env, RKV_QUIET: '1' };

export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
}

/** A child's end, and its guard: `arm()` (re)starts the GUARD_MS countdown to a SIGKILL, `disarm()` stops it. */
type Collected = Promise<Finished> & { arm(): void; disarm(): void };

/**
 * Collects a child's output until it exits. The guard against a hung child is armed at once for a
 * script run to its end; a long-running one (a server, kvctl watch) disarms it once started and arms
 * it again when asked to stop, so a slow run of the tests using it is not cut short at GUARD_MS.
 */
function collect(child: ChildProcess, what: string, guardMs = GUARD_MS): Collected {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout?.on('data', (chunk: Buffer) => out.push(chunk));
  child.stderr?.on('data', (chunk: Buffer) => err.push(chunk));
  let guard: NodeJS.Timeout | undefined;
  let fail: (error: Error) => void = () => undefined;
  const done = new Promise<Finished>((resolve, reject) => {
    fail = reject;
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(guard);
      const stdoutBytes = Buffer.concat(out);
      resolve({ code, signal, stdout: stdoutBytes.toString(), stderr: Buffer.concat(err).toString(), stdoutBytes });
    });
  });
  const disarm = () => clearTimeout(guard);
  const arm = () => {
    disarm();
    guard = setTimeout(() => {
      child.kill('SIGKILL');
      fail(new Error(`${what} did not finish within ${guardMs} ms`));
    }, guardMs);
  };
  arm();
  return Object.assign(done, { arm, disarm });
}

/** Runs a bin/ (or bench/) script to its end; `guardMs` for scripts that run longer by design. */
export function run(script: string, args: string[], options: { stdin?: Buffer | string; guardMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<Finished> {
  const child = spawn(process.execPath, [script, ...args], { env: { ...childEnv, ...options.env }, stdio: ['pipe', 'pipe', 'pipe'] });
  const done = collect(child, `${script} ${args.join(' ')}`, options.guardMs);
  child.stdin!.end(options.stdin ?? '');
  return done;
}

/** kv-server to its end; `env` adds variables to the child's environment. */
export const kvServer = (args: string[], env: NodeJS.ProcessEnv = {}) => run(KV_SERVER, args, { env });
export const kvctl = (args: string[], options: { stdin?: Buffer | string } = {}) => run(KVCTL, args, options);

let dir: string | undefined;
let counter = 0;

/** A fresh shm URL in a private temp directory. */
export function socketUrl(): string {
  dir ??= mkdtempSync(join(tmpdir(), 'rkv-srv-'));
  return `shm://${join(dir, `kv${counter++}.sock`)}`;
}

export function socketPath(url: string): string {
  return url.slice('shm://'.length);
}

/** A fresh shm URL and a token file beside its socket holding `tokens` (file mode `mode`). */
export function urlWithTokenFile(tokens: string, mode = 0o600): { url: string; file: string } {
  const url = socketUrl();
  const file = `${socketPath(url)}.tokens`;
  writeFileSync(file, tokens, { mode });
  return { url, file };
}

/** kv-server (64 MiB) on a fresh socket with a token file of `tokens`, once ready; killed when the test ends. */
export async function serveWithTokenFile(t: ExecutionContext, tokens: string, mode = 0o600): Promise<{ url: string; file: string; server: ServerProcess }> {
  const { url, file } = urlWithTokenFile(tokens, mode);
  const server = await startServerProcess(['--listen', url, '--memory', '64M', '--token-file', file]);
  t.teardown(() => server.stop('SIGKILL'));
  return { url, file, server };
}

/** A TCP port nobody listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface ServerProcess {
  child: ChildProcess;
  /** The stdout lines printed up to "ready". */
  banner: string[];
  /** URLs from the "listening on" lines. */
  urls: string[];
  /** Everything written to stderr so far (JSON log lines). */
  stderr(): string;
  /** Sends the signal and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<Finished>;
  /** Resolves when the process has exited, however. */
  exited: Promise<Finished>;
}

/** Starts kv-server and resolves once it printed "ready" (rejects if it exits first); `env` adds variables to its environment. */
export async function startServerProcess(args: string[], env: NodeJS.ProcessEnv = {}): Promise<ServerProcess> {
  const child = spawn(process.execPath, [KV_SERVER, ...args], { env: { ...childEnv, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  // RKV_TEST_LOG (test/helpers/kv.ts): what the process logs goes to the suite's stderr as it comes.
  if (process.env.RKV_TEST_LOG) child.stderr!.on('data', (chunk: Buffer) => process.stderr.write(chunk));
  const exited = collect(child, `kv-server ${args.join(' ')}`);
  const banner: string[] = [];
  await new Promise<void>((resolve, reject) => {
    let buffered = '';
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString();
      let newline: number;
      while ((newline = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        banner.push(line);
        if (line.startsWith('kv-server: ready')) {
          child.stdout!.off('data', onData);
          resolve();
        }
      }
    };
    child.stdout!.on('data', onData);
    exited.then(
      (f) => reject(new Error(`kv-server exited (code ${f.code}) before it was ready: ${f.stderr.trim()}`)),
      reject,
    );
  });
  exited.disarm(); // started: the guard runs again from stop()
  const urls = banner.map((line) => /^kv-server: listening on (\S+)$/.exec(line)?.[1]).filter((u): u is string => u !== undefined);
  return {
    child,
    banner,
    urls,
    stderr: () => stderr,
    exited,
    stop: (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) {
        exited.arm();
        child.kill(signal);
      }
      return exited;
    },
  };
}

/** The JSON log lines a server wrote to stderr. */
export function logLines(stderr: string): Array<Record<string, unknown>> {
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** The value of a sample in Prometheus text format: `name`, with `labels` as printed (op="get",result="ok"). */
export function sample(metricsText: string, name: string, labels = ''): number | undefined {
  return seriesValue(metricsText, labels ? `${name}{${labels}}` : name);
}

/** The value of one series written as Prometheus prints it, name{labels}; undefined when absent. */
function seriesValue(metricsText: string, series: string): number | undefined {
  const prefix = `${series} `;
  const line = metricsText.split('\n').find((l) => l.startsWith(prefix));
  return line === undefined ? undefined : Number(line.slice(prefix.length));
}

/** A reader of one scrape (a registry's metrics() text): a series as Prometheus prints it → its value, NaN when absent. */
export function seriesReader(metricsText: string): (series: string) => number {
  return (series) => seriesValue(metricsText, series) ?? NaN;
}

export interface LiveProcess {
  child: ChildProcess;
  /** The stdout lines printed so far. */
  lines: string[];
  /** The first stdout line at index `from` or later that matches (waiting for it); rejects if the process exits first. */
  waitForLine(pattern: RegExp, from?: number): Promise<string>;
  /** Sends the signal (if still running) and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<Finished>;
  exited: Promise<Finished>;
}

/** Starts a long-running kvctl (watch) and follows its stdout line by line. */
export function startKvctl(args: string[]): LiveProcess {
  const child = spawn(process.execPath, [KVCTL, ...args], { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = collect(child, `kvctl ${args.join(' ')}`);
  const lines: string[] = [];
  const waiters = new Set<() => void>();
  let buffered = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    const parts = buffered.split('\n');
    buffered = parts.pop()!;
    lines.push(...parts);
    for (const wake of waiters) wake();
  });
  let ended = false;
  void exited.finally(() => {
    ended = true;
    for (const wake of waiters) wake();
  }).catch(() => undefined);
  return {
    child,
    lines,
    exited,
    waitForLine: (pattern, from = 0) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const line = lines.slice(from).find((l) => pattern.test(l));
          if (line === undefined && !ended) return;
          waiters.delete(check);
          if (line !== undefined) resolve(line);
          else reject(new Error(`kvctl ${args.join(' ')} exited without printing a line matching ${pattern}; it printed:\n${lines.join('\n')}`));
        };
        waiters.add(check);
        check();
      }),
    stop: (signal = 'SIGINT') => {
      if (child.exitCode === null && child.signalCode === null) {
        exited.arm(); // from the stop on (its countdown from the start guards waitForLine)
        child.kill(signal);
      }
      return exited;
    },
  };
}
