// Which providers the conformance suites run against, and where they listen.
//
//   RKV_TEST_PROVIDERS  comma list of "shm", "rdma" (default: shm)
//   RKV_RDMA_ADDRS      addresses on the RDMA device, the first used to listen
//                       (the Soft-RoCE guest sets 10.77.0.1,10.77.0.2)
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { builtProviders } from '../../native/index.js';

export type Scheme = 'shm' | 'rdma';

export function providersUnderTest(): Scheme[] {
  const wanted = (process.env.RKV_TEST_PROVIDERS ?? 'shm').split(',').map((s) => s.trim()).filter(Boolean);
  for (const name of wanted) {
    if (name !== 'shm' && name !== 'rdma') throw new Error(`RKV_TEST_PROVIDERS: unknown provider '${name}'`);
    if (!builtProviders.includes(name)) {
      throw new Error(`RKV_TEST_PROVIDERS asks for '${name}' but this build has only ${builtProviders.join(', ')}`);
    }
  }
  return wanted as Scheme[];
}

export function rdmaAddresses(): string[] {
  return (process.env.RKV_RDMA_ADDRS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
}

let socketDir: string | undefined;
let counter = 0;

/** A fresh URL to listen on for this provider. */
export function listenUrl(scheme: Scheme): string {
  if (scheme === 'shm') {
    socketDir ??= mkdtempSync(join(tmpdir(), 'rkv-test-'));
    return `shm://${join(socketDir, `s${process.pid}-${counter++}.sock`)}`;
  }
  const [address] = rdmaAddresses();
  if (!address) throw new Error('RKV_RDMA_ADDRS must name an address on the RDMA device for the rdma provider');
  return `rdma://${address}:0`;
}

/**
 * RKV_TEST_SCALE (default 1) shrinks the long cases — operation counts and
 * durations — for slow environments such as the TCG-emulated Soft-RoCE guest,
 * where Node runs ~25x slower. Every case still runs and asserts the same.
 */
export function testScale(): number {
  const scale = Number(process.env.RKV_TEST_SCALE ?? '1');
  if (!(scale > 0 && scale <= 1)) throw new Error(`RKV_TEST_SCALE must be in (0, 1], got ${process.env.RKV_TEST_SCALE}`);
  return scale;
}

/**
 * How the clients of many-process cases poll (cluster loads): busy (the default) on a normal
 * machine; event in the shrunk runs (RKV_TEST_SCALE below 1), where two emulated vCPUs run
 * every process and clients spinning on their completions starve the servers and etcd (their
 * lease keepalives came seconds late in the guest).
 */
export function loadPollMode(): 'busy' | 'event' {
  return testScale() < 1 ? 'event' : 'busy';
}

/**
 * RKV_TEST_TIMEOUT_MS (default 5000): connection and operation timeouts of the
 * suites' clients. The emulated guest needs more: rdma_cm address resolution
 * alone can take seconds under TCG.
 */
export function testTimeoutMs(): number {
  const ms = Number(process.env.RKV_TEST_TIMEOUT_MS ?? '5000');
  if (!(ms > 0)) throw new Error(`RKV_TEST_TIMEOUT_MS must be positive, got ${process.env.RKV_TEST_TIMEOUT_MS}`);
  return ms;
}

/** A duration the suites chose for a normal machine, stretched as RKV_TEST_TIMEOUT_MS is (keepalive intervals). */
export function slow(ms: number): number {
  return Math.round(ms * Math.max(1, testTimeoutMs() / 5000));
}

/** Polls until check() holds (servers apply notices and free blocks asynchronously). A guard, not a timing assertion. */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, guardMs = slow(30_000)): Promise<void> {
  const end = Date.now() + guardMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`still not true after ${guardMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
