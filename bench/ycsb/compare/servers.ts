/**
 * Throwaway peer servers for `kv-bench compare`: redis-server and memcached on free loopback
 * ports, with persistence off. kv-bench never installs them; a missing binary produces the
 * apt-get line to run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { userInfo } from 'node:os';
import { UsageError } from '../errors.js';

export interface PeerServer {
  name: string;
  port: number;
  /** properties that point the binding at this server */
  properties: [string, string][];
  stop(): Promise<void>;
  /** synchronous best effort for process exit handlers */
  kill(): void;
}

const APT_PACKAGE: { [binary: string]: string } = { 'redis-server': 'redis-server', memcached: 'memcached' };

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

function waitForPort(port: number, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    let exited = false;
    child.once('exit', (code) => {
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

async function startServer(name: string, binary: string, args: (port: number) => string[], properties: (port: number) => [string, string][]): Promise<PeerServer> {
  const path = findBinary(binary);
  if (!path) throw new UsageError(missingBinaryMessage(binary));
  const port = await freePort();
  const child = spawn(path, args(port), { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await waitForPort(port, child, 10000);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`${binary} did not start: ${(err as Error).message}${stderr ? `: ${stderr.trim().split('\n').pop()}` : ''}`);
  }
  return {
    name,
    port,
    properties: properties(port),
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    },
  };
}

export function startRedis(): Promise<PeerServer> {
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

export function startMemcached(): Promise<PeerServer> {
  // memcached refuses to run as root unless told which user to be
  const asRoot = process.getuid?.() === 0 ? ['-u', userInfo().username] : [];
  return startServer(
    'memcached',
    'memcached',
    (port) => ['-l', '127.0.0.1', '-p', String(port), '-U', '0', ...asRoot],
    (port) => [['memcached.hosts', `127.0.0.1:${port}`]],
  );
}

/** The peer a binding needs, if any. */
export function peerFor(db: string): (() => Promise<PeerServer>) | undefined {
  if (db === 'redis') return startRedis;
  if (db === 'memcached') return startMemcached;
  return undefined;
}
