// A cluster of real kv-server processes on shm for the sharding suites: each
// with its own socket, region file and metrics port.
import { appendFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';

import type { ExecutionContext } from 'ava';

import type { KvClient, KvStatusName } from '../../client/index.js';

import { type Scheme, rdmaAddresses, slow } from '../helpers/providers.js';
import { type ServerProcess, freePort, startServerProcess } from '../server/helpers.js';

export interface Member {
  url: string;
  regionFile: string;
  metricsPort: number;
  process: ServerProcess;
  /** The arguments it was started with (a restart reuses them). */
  args: string[];
}

/** A private directory for a test's sockets and region files, removed when the test ends. */
export function clusterDir(t: ExecutionContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-cluster-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A member's URL: a socket in `dir` on shm, a fixed port on the RDMA device's address (a restart must find it again). */
export async function memberUrl(scheme: Scheme, dir: string, index: number): Promise<string> {
  if (scheme === 'shm') return `shm://${join(dir, `kv${index}.sock`)}`;
  const [address] = rdmaAddresses();
  if (!address) throw new Error('RKV_RDMA_ADDRS must name an address on the RDMA device for the rdma provider');
  return `rdma://${address}:${await freePort()}`;
}

/** `env` adds variables to the server's environment (RKV_EXPERIMENTAL_REPLICAS for --replicas above 1). */
export async function startMember(dir: string, index: number, extra: string[] = [], url?: string, env: NodeJS.ProcessEnv = {}): Promise<Member> {
  const socket = url ?? (await memberUrl('shm', dir, index));
  const regionFile = join(dir, `kv${index}.region`);
  // freePort's port may be taken before the server binds it (an outgoing connection's ephemeral port, CI at
  // d19df9e): another is tried.
  for (let attempt = 1; ; attempt++) {
    const metricsPort = await freePort();
    const args = ['--listen', socket, '--memory', '64M', '--region-file', regionFile, '--metrics-port', String(metricsPort), '--log-level', process.env.RKV_TEST_LOG ?? (process.env.RKV_TEST_LOG_DIR ? 'info' : 'warn'), ...(extra.includes('--keepalive-ms') ? [] : ['--keepalive-ms', String(slow(1000))]), ...extra];
    try {
      return { url: socket, regionFile, metricsPort, args, process: await startServerProcess(args, env) };
    } catch (error) {
      if (attempt >= 5 || !/cannot serve metrics on .*: the port is in use/.test((error as Error).message)) throw error;
    }
  }
}

/** Starts a stopped member again: same socket, same region file (a new metrics port: the old one may be taken by now). */
export async function restartMember(member: Member, env: NodeJS.ProcessEnv = {}): Promise<void> {
  const at = member.args.indexOf('--metrics-port');
  // A port the killed process listened on may not be free yet (rdma_cm in the Soft-RoCE guest: "rdma_bind_addr ...:
  // Address already in use", CI at 9236e15), and a fresh metrics port may be taken before the server binds it
  // (startMember): tried again a few times.
  for (let attempt = 1; ; attempt++) {
    member.metricsPort = await freePort();
    member.args[at + 1] = String(member.metricsPort);
    try {
      member.process = await startServerProcess(member.args, env);
      return;
    } catch (error) {
      const message = (error as Error).message;
      if (attempt >= 5 || !/Address already in use|cannot serve metrics on .*: the port is in use/.test(message)) throw error;
      if (/Address already in use/.test(message)) await new Promise((resolve) => setTimeout(resolve, slow(1000)));
    }
  }
}

export async function stats(member: Member): Promise<{ items: number; clients: number; hashSlots: Record<string, number> }> {
  const response = await fetch(`http://127.0.0.1:${member.metricsPort}/stats`);
  return (await response.json()) as { items: number; clients: number; hashSlots: Record<string, number> };
}

export { eventually } from '../helpers/providers.js';

/** Stops every member; with RKV_TEST_LOG_DIR set, appends each one's log there first (the guest's runs are read after the fact). */
export async function stopAll(members: Member[]): Promise<void> {
  await Promise.all(members.map((m) => m.process.stop('SIGKILL')));
  const logs = process.env.RKV_TEST_LOG_DIR;
  if (!logs) return;
  mkdirSync(logs, { recursive: true });
  for (const m of members) appendFileSync(join(logs, `${basename(dirname(m.regionFile))}-${basename(m.regionFile, '.region')}.log`), m.process.stderr());
}

/** Resolves when the client's status is (or becomes) `wanted`. */
export function nextStatus(kv: KvClient, wanted: KvStatusName): Promise<void> {
  if (kv.status === wanted) return Promise.resolve();
  return new Promise((resolve) => {
    const on = (status: KvStatusName) => {
      if (status !== wanted) return;
      kv.off('status', on);
      resolve();
    };
    kv.on('status', on);
  });
}
