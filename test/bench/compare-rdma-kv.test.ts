/**
 * `kv-bench compare --db rdma-kv` end to end, as a user runs it (bin/kv-bench.js in a child
 * process): it starts its own kv-server on shm, reports the run, and leaves no server process
 * and no socket directory behind, whether it finishes, fails after the server started, cannot
 * start the server, or is interrupted with Ctrl-C; SIGKILLed, it still leaves no server. Each case points TMPDIR at a private
 * directory, so "nothing left behind" is an empty directory.
 */
import test from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const KV_BENCH = join(ROOT, 'bin/kv-bench.js');
const WORKLOADA = join(ROOT, 'bench/workloads/workloada');

interface Cli {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
  tmp: string;
}

function kvBench(args: string[]): Cli {
  const tmp = mkdtempSync(join(tmpdir(), 'kv-bench-compare-test-'));
  const child = spawn(process.execPath, [KV_BENCH, 'compare', '-P', WORKLOADA, '--db', 'rdma-kv', '-p', 'kvbench.report=false', ...args], {
    env: { ...process.env, TMPDIR: tmp, RKV_QUIET: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return { child, stdout: () => stdout, stderr: () => stderr, exited, tmp };
}

/** The kv-server pid and socket directory from "kv-bench: started rdma-kv (pid N) on shm://DIR/kv.sock". */
function startedServer(stderr: string): { pid: number; socketDir: string } | undefined {
  const m = /^kv-bench: started rdma-kv \(pid (\d+)\) on shm:\/\/(\S+)\/kv\.sock$/m.exec(stderr);
  return m ? { pid: Number(m[1]), socketDir: m[2]! } : undefined;
}

/** True while the process exists and has not exited (a zombie has exited: only its parent has not reaped it yet). */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw err;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false; // gone between the two looks
  }
}

/** Waits (up to 10 s: a SIGKILLed process needs a moment to die) for the process to be gone. */
async function gone(pid: number): Promise<boolean> {
  for (let i = 0; i < 200 && isRunning(pid); i++) await new Promise((resolve) => setTimeout(resolve, 50));
  return !isRunning(pid);
}

function waitForStderr(cli: Cli, pattern: RegExp): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = (): void => {
      if (pattern.test(cli.stderr())) {
        cli.child.stderr!.off('data', check);
        resolve();
      }
    };
    cli.child.stderr!.on('data', check);
    void cli.exited.then(() => reject(new Error(`kv-bench exited before ${pattern}: ${cli.stderr()}`)));
    check();
  });
}

test('compare --db rdma-kv starts a kv-server on shm, reports its throughput, then stops it', async (t) => {
  const cli = kvBench(['-p', 'recordcount=100', '-p', 'operationcount=400']);
  try {
    t.is(await cli.exited, 0, cli.stderr());
    const lines = cli.stdout().trim().split('\n');
    t.regex(lines[0]!, /^\| db +\| throughput \(ops\/s\) \| READ avg \(µs\)/);
    const row = lines.find((l) => l.startsWith('| rdma-kv '));
    t.truthy(row, cli.stdout());
    const throughput = Number(row!.split('|')[2]);
    t.true(throughput > 0, row);
    t.notRegex(cli.stdout(), /FAILED/);
    const server = startedServer(cli.stderr());
    t.truthy(server, cli.stderr());
    t.true(server!.socketDir.startsWith(cli.tmp));
    t.regex(cli.stderr(), /^kv-bench: stopped rdma-kv$/m);
    t.true(await gone(server!.pid), `kv-server pid ${server!.pid} is still running`);
    t.deepEqual(readdirSync(cli.tmp), [], 'the socket directory is removed');
  } finally {
    rmSync(cli.tmp, { recursive: true, force: true });
  }
});

test('compare --db rdma-kv stops its kv-server on Ctrl-C in the middle of the run', async (t) => {
  const cli = kvBench(['-p', 'recordcount=100', '-p', 'operationcount=1000000000']);
  try {
    await waitForStderr(cli, /^kv-bench: rdma-kv: run$/m);
    const server = startedServer(cli.stderr());
    t.truthy(server, cli.stderr());
    t.true(isRunning(server!.pid));
    cli.child.kill('SIGINT');
    t.is(await cli.exited, 130);
    t.true(await gone(server!.pid), `kv-server pid ${server!.pid} is still running`);
    t.false(existsSync(server!.socketDir));
  } finally {
    cli.child.kill('SIGKILL');
    rmSync(cli.tmp, { recursive: true, force: true });
  }
});

test('compare --db rdma-kv: kv-bench killed with SIGKILL mid-run takes its kv-server with it', async (t) => {
  const cli = kvBench(['-p', 'recordcount=100', '-p', 'operationcount=1000000000']);
  let server: ReturnType<typeof startedServer>;
  try {
    await waitForStderr(cli, /^kv-bench: rdma-kv: run$/m);
    server = startedServer(cli.stderr());
    t.truthy(server, cli.stderr());
    t.true(isRunning(server!.pid));
    cli.child.kill('SIGKILL'); // no exit hook runs: only the parent-death signal can stop the server
    await cli.exited;
    t.true(await gone(server!.pid), `kv-server pid ${server!.pid} is still running`);
    // It got SIGTERM, not SIGKILL: it shut down and removed its socket (the directory
    // around it was kv-bench's to remove).
    t.false(existsSync(join(server!.socketDir, 'kv.sock')));
  } finally {
    cli.child.kill('SIGKILL');
    if (server && isRunning(server.pid)) process.kill(server.pid, 'SIGKILL'); // the test failed: leave nothing
    rmSync(cli.tmp, { recursive: true, force: true });
  }
});

test('compare --db rdma-kv stops its kv-server when the run fails after it started', async (t) => {
  const cli = kvBench(['-p', 'recordcount=100', '-p', 'operationcount=400', '-p', 'rdmakv.pollmode=sometimes']);
  try {
    t.is(await cli.exited, 2); // a usage error, found by the binding once the server runs
    t.regex(cli.stderr(), /^kv-bench: rdmakv\.pollmode must be busy or event \(got "sometimes"\)$/m);
    const server = startedServer(cli.stderr());
    t.truthy(server, cli.stderr());
    t.true(await gone(server!.pid), `kv-server pid ${server!.pid} is still running`);
    t.deepEqual(readdirSync(cli.tmp), []);
  } finally {
    rmSync(cli.tmp, { recursive: true, force: true });
  }
});

test('compare --db rdma-kv: a kv-server that cannot start is one clear error, and nothing is left', async (t) => {
  const cli = kvBench(['-p', 'recordcount=100', '-p', 'operationcount=400', '-p', 'rdmakv.memory=1KiB']);
  try {
    t.is(await cli.exited, 1);
    // kv-server's own reason comes along
    t.regex(cli.stderr(), /^kv-bench: error: kv-server did not start: it exited \(code \d+\) before it was ready: kv-server: .*memory/m);
    t.is(startedServer(cli.stderr()), undefined);
    t.is(cli.stdout(), '');
    t.deepEqual(readdirSync(cli.tmp), []);
  } finally {
    rmSync(cli.tmp, { recursive: true, force: true });
  }
});
