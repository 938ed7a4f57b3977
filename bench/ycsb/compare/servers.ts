/**
 * Throwaway peer servers for `kv-bench compare`: redis-server and memcached on free loopback
 * ports, with persistence off, and this project's kv-server on the shm transport. kv-bench
 * never installs redis or memcached; a missing binary produces the apt-get line to run.
 *
 * Every peer is tracked from the moment it is spawned until it has been stopped, and a process
 * 'exit' hook kills whatever is still tracked: however kv-bench ends (an error, Ctrl-C, a
 * signal while a peer is still starting), no server outlives it. SIGKILL of kv-bench cannot be
 * caught: for that, on Linux each peer is started through util-linux's setpriv with a parent-
 * death signal, so the kernel sends it SIGTERM when kv-bench dies. (The signal follows the
 * thread that spawned the peer: spawn peers from the main thread, as compare does.)
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { accessSync, constants, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { tmpdir, userInfo } from 'node:os';
import { fileURLToPath } from 'node:url';
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';

export interface PeerServer {
  name: string;
  /** where it listens, for messages: 127.0.0.1:6379, shm:///tmp/kv-bench-…/kv.sock */
  address: string;
  /** the server's process id */
  pid: number | undefined;
  /** properties that point the binding at this server */
  properties: [string, string][];
  stop(): Promise<void>;
  /** synchronous best effort for process exit handlers */
  kill(): void;
}

/** A peer on a loopback TCP port (redis, memcached). */
export interface TcpPeerServer extends PeerServer {
  port: number;
}

const APT_PACKAGE: { [binary: string]: string } = { 'redis-server': 'redis-server', memcached: 'memcached', etcd: 'etcd-server' };

export function findBinary(name: string): string | undefined {
  const dirs = [...(process.env['PATH'] ?? '').split(delimiter), '/usr/sbin', '/usr/bin', '/usr/local/bin'];
  for (const dir of dirs) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // keep looking
    }
  }
  return undefined;
}

export function missingBinaryMessage(binary: string): string {
  return `${binary} is not installed; install it with: sudo apt-get install -y ${APT_PACKAGE[binary] ?? binary}`;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Kill functions of the peers spawned and not yet stopped. */
const tracked = new Set<() => void>();
let exitHookInstalled = false;

/** A spawned peer process: its last stderr, and a stop that cannot leave it running. */
interface PeerProcess {
  child: ChildProcess;
  /** the last 4 KiB it wrote to stderr */
  stderrTail(): string;
  /** resolves once it has exited and its pipes are read to the end */
  closed: Promise<void>;
  /** SIGKILL now (if still running), then `cleanup`; synchronous */
  kill(): void;
  /** SIGTERM, SIGKILL after `graceMs`, wait for the exit, then `cleanup` */
  stop(graceMs: number): Promise<void>;
}

/** setpriv, where it can give a peer a parent-death signal (Linux, util-linux 2.33 and later). */
let setpriv: string | null | undefined;
function parentDeathWrapper(): string | null {
  if (setpriv === undefined) {
    const path = process.platform === 'linux' ? findBinary('setpriv') : undefined;
    setpriv = path !== undefined && spawnSync(path, ['--pdeathsig', 'TERM', '--', 'true']).status === 0 ? path : null;
  }
  return setpriv;
}

let signalHandlersInstalled = false;

/** Ctrl-C and SIGTERM end kv-bench; the exit hook of spawnPeer then kills the servers still running. */
export function installSignalHandlers(): void {
  if (signalHandlersInstalled) return;
  signalHandlersInstalled = true;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      process.stderr.write(`\nkv-bench: ${signal}, stopping servers\n`);
      process.exit(signal === 'SIGINT' ? 130 : 143);
    });
  }
}

function spawnPeer(command: string, args: string[], options: { pipeStdout?: boolean; env?: NodeJS.ProcessEnv; cleanup?: () => void }): PeerProcess {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      for (const kill of tracked) kill();
    });
  }
  // setpriv execs the command: the pid, signals and pipes stay the peer's own.
  const wrapper = parentDeathWrapper();
  if (wrapper !== null) [command, args] = [wrapper, ['--pdeathsig', 'TERM', '--', command, ...args]];
  const child = spawn(command, args, { stdio: ['ignore', options.pipeStdout ? 'pipe' : 'ignore', 'pipe'], env: options.env ?? process.env });
  let stderrTail = '';
  child.stderr!.on('data', (d: Buffer) => (stderrTail = (stderrTail + d.toString()).slice(-4096)));
  const closed = new Promise<void>((resolve) => {
    child.once('close', () => resolve());
    child.on('error', (err) => {
      stderrTail += `\n${err.message}`;
      if (child.pid === undefined) resolve(); // it never ran
    });
  });
  const running = (): boolean => child.exitCode === null && child.signalCode === null;
  const kill = (): void => {
    if (running()) child.kill('SIGKILL');
    options.cleanup?.();
    tracked.delete(kill);
  };
  tracked.add(kill);
  return {
    child,
    stderrTail: () => stderrTail,
    closed,
    kill,
    stop: async (graceMs) => {
      if (running()) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await closed;
        clearTimeout(timer);
      }
      kill(); // nothing left to signal: cleans up and untracks
    },
  };
}

/** "<what> did not start: <why>: <its last stderr line>", after killing it. */
async function startFailure(peer: PeerProcess, what: string, err: unknown): Promise<Error> {
  peer.kill();
  await peer.closed;
  const last = peer.stderrTail().trim().split('\n').pop();
  return new Error(`${what} did not start: ${(err as Error).message}${last ? `: ${last}` : ''}`);
}

function waitForPort(port: number, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    let exited = false;
    child.once('close', (code) => {
      exited = true;
      reject(new Error(`server exited with code ${code} before accepting connections`));
    });
    const attempt = (): void => {
      if (exited) return;
      const socket = createConnection({ host: '127.0.0.1', port });
      socket.once('connect', () => {
        socket.destroy();
        resolve();
      });
      socket.once('error', () => {
        socket.destroy();
        if (Date.now() > deadline) reject(new Error(`nothing listens on 127.0.0.1:${port} after ${timeoutMs} ms`));
        else setTimeout(attempt, 50);
      });
    };
    attempt();
  });
}

async function startServer(name: string, binary: string, args: (port: number) => string[], properties: (port: number) => [string, string][]): Promise<TcpPeerServer> {
  const path = findBinary(binary);
  if (!path) throw new UsageError(missingBinaryMessage(binary));
  const port = await freePort();
  const peer = spawnPeer(path, args(port), {});
  try {
    await waitForPort(port, peer.child, 10000);
  } catch (err) {
    throw await startFailure(peer, binary, err);
  }
  return {
    name,
    port,
    address: `127.0.0.1:${port}`,
    pid: peer.child.pid,
    properties: properties(port),
    kill: peer.kill,
    stop: () => peer.stop(3000),
  };
}

export function startRedis(): Promise<TcpPeerServer> {
  return startServer(
    'redis',
    'redis-server',
    (port) => ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    (port) => [
      ['redis.host', '127.0.0.1'],
      ['redis.port', String(port)],
    ],
  );
}

export function startMemcached(): Promise<TcpPeerServer> {
  // memcached refuses to run as root unless told which user to be
  const asRoot = process.getuid?.() === 0 ? ['-u', userInfo().username] : [];
  return startServer(
    'memcached',
    'memcached',
    (port) => ['-l', '127.0.0.1', '-p', String(port), '-U', '0', ...asRoot],
    (port) => [['memcached.hosts', `127.0.0.1:${port}`]],
  );
}

const KV_SERVER = fileURLToPath(new URL('../../../../bin/kv-server.js', import.meta.url));
/** How long kv-server may take to print "ready" (Node start, addon load, region setup). */
const KV_SERVER_START_MS = 30_000;
/** How long a stopping kv-server may take to close its clients before it is killed. */
const KV_SERVER_STOP_MS = 5_000;

/** Resolves when the child prints a stdout line starting with `prefix`; rejects if it closes first. */
function waitForLine(child: ChildProcess, prefix: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`no "${prefix}" line within ${timeoutMs / 1000} s`)), timeoutMs);
    const onData = (d: Buffer): void => {
      seen += d.toString();
      if (seen.startsWith(prefix) || seen.includes(`\n${prefix}`)) {
        clearTimeout(timer);
        child.stdout!.off('data', onData);
        resolve();
      }
    };
    child.stdout!.on('data', onData);
    // 'close' rather than 'exit': by then stderr has been read to the end, so the reason is in it
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`it exited (${signal ?? `code ${code}`}) before it was ready`));
    });
  });
}

/**
 * This project's kv-server (bin/kv-server.js) on the shm transport: a unix socket in a fresh
 * private temporary directory (mode 0700, so no token is needed), removed once the server is
 * gone. It is ready when it prints "kv-server: ready" (docs/operations.md). The property
 * rdmakv.memory is passed as its --memory (the region size; kv-server's default otherwise);
 * rdmakv.listen, if set, is the URL it listens on instead (the replication benchmark on
 * Soft-RoCE); `extraArgs` go after it (kv-bench cache: --eviction, --metrics-port).
 */
export async function startKvServer(props: Properties, extraArgs: readonly string[] = []): Promise<PeerServer> {
  if (!existsSync(KV_SERVER)) throw new Error(`kv-server did not start: ${KV_SERVER} is missing`);
  const dir = mkdtempSync(join(tmpdir(), 'kv-bench-rdma-kv-'));
  const url = props.get('rdmakv.listen') ?? `shm://${join(dir, 'kv.sock')}`;
  const memory = props.get('rdmakv.memory');
  const args = [KV_SERVER, '--listen', url, '--log-level', 'warn', ...(memory !== undefined ? ['--memory', memory] : []), ...extraArgs];
  const peer = spawnPeer(process.execPath, args, {
    pipeStdout: true,
    env: { ...process.env, RKV_QUIET: '1' }, // the addon's warning about missing verbs libraries means nothing for shm
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  });
  try {
    await waitForLine(peer.child, 'kv-server: ready', KV_SERVER_START_MS);
  } catch (err) {
    throw await startFailure(peer, 'kv-server', err);
  }
  peer.child.stdout!.resume(); // keep draining: a full pipe would block the server
  return {
    name: 'rdma-kv',
    address: url,
    pid: peer.child.pid,
    properties: [['rdmakv.url', url]],
    kill: peer.kill,
    stop: () => peer.stop(KV_SERVER_STOP_MS),
  };
}

/** The peer a binding needs, if any, started with the run's properties. */
export function peerFor(db: string): ((props: Properties) => Promise<PeerServer>) | undefined {
  if (db === 'redis') return startRedis;
  if (db === 'memcached') return startMemcached;
  if (db === 'rdma-kv') return startKvServer;
  return undefined;
}
