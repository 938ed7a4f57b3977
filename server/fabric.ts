// What the server keeps per provider (scheme): the provider, its one
// event-mode completion queue, the region registered with it (its own rkey),
// the receive buffers and send buffers of every client ring, and the server's
// queue pair to itself through which locks are released (recovery/).
import {
  Access,
  type CompletionQueue,
  type Connection,
  type Listener,
  type MemoryRegion,
  Provider,
  type TransportError,
  access,
} from '../native/index.js';
import { KvLayout } from '../protocol/constants.js';
import { loopbackData } from '../protocol/connect.js';
import { schemeOf, urlExamples } from '../protocol/providers.js';
import { KvConfigError } from './options.js';
import { makeSocketDirectory } from './socket-directory.js';
import type { RegionStore } from './store/region.js';

/** Receive buffers per client ring: every notification and a few control messages. */
export const RECVS_PER_CLIENT = KvLayout.RING_RECORDS + 32;
/** Send buffers per client ring (control messages to the client; reused once their SEND completed, protocol/send-buffers.ts). */
export const SEND_BUFFERS = 16;
/**
 * The CQ's interrupt moderation (CompletionQueue.watch): under a steady stream of notices the
 * server wakes at most once per this many µs and drains them all in one batch (one wake-up per
 * PUT cost more CPU than the PUT's notice itself); a completion after a quiet spell is handled at
 * once. 500, not 200: each wake-up costs two threads' context switches (~10 µs of CPU on a VM),
 * and that was still most of the server's CPU per PUT (docs/benchmarks.md). Bounded by the
 * client ring and by grants: a client's 256 records last 500 µs at 512k PUT/s, and a grant
 * (answered after at most one interval) is asked for a batch ahead (client/block-pools.ts).
 */
export const CQ_MODERATION_US = 500;
/** Atomics per doorbell on the loopback queue pair (one 8-byte result each in its scratch buffer). */
export const LOOPBACK_BATCH = 256;

export interface Fabric {
  provider: Provider;
  cq: CompletionQueue;
  /** the region, registered with this provider (its own rkey) */
  region: MemoryRegion;
  /**
   * The same memory registered a second time with REMOTE_READ alone: the rkey read clients get.
   * The NIC (or the shm provider, checking as a NIC does) refuses a WRITE or an atomic with it:
   * REM_ACCESS_ERR, nothing changed. Registered only once a read token exists (registerReadOnly):
   * a NIC's second registration counts against `ulimit -l` again.
   */
  readOnly?: MemoryRegion;
  recv: MemoryRegion;
  send: MemoryRegion;
  /** The server's connection to itself: lock recovery goes through it, as RDMA atomics. */
  loopback?: { connection: Connection; cq: CompletionQueue; scratch: MemoryRegion };
}

/** The scheme of a URL the server can listen on; KvConfigError for any other. */
export function listenScheme(url: string): string {
  const scheme = schemeOf(url);
  if (scheme === undefined) throw new KvConfigError(`no provider for '${url}': use ${urlExamples()}`);
  return scheme;
}

/** Opens `scheme`'s provider (for `url`, named in errors) and registers the region and the client rings' buffers. */
export function openFabric(scheme: string, url: string, store: RegionStore): Fabric {
  let provider: Provider;
  try {
    provider = new Provider(scheme);
  } catch (error) {
    throw new KvConfigError(`cannot serve ${url}: ${(error as Error).message}`);
  }
  const { maxClients } = store.layout;
  const region = provider.register(store.memory, 0, store.memory.length, access.REMOTE_ALL);
  const cq = provider.createCq(8192);
  const recv = provider.allocate(maxClients * RECVS_PER_CLIENT * KvLayout.SERVER_RECV_BYTES, Access.LOCAL_WRITE);
  const send = provider.allocate(maxClients * SEND_BUFFERS * KvLayout.CONTROL_RECV_BYTES, Access.LOCAL_WRITE);
  return { provider, cq, region, recv, send };
}

/** Registers the region READ-only for read clients, once; throws KvConfigError when the device refuses. */
export function registerReadOnly(fabric: Fabric, store: RegionStore): void {
  if (fabric.readOnly) return;
  try {
    fabric.readOnly = fabric.provider.register(store.memory, 0, store.memory.length, Access.REMOTE_READ);
  } catch (error) {
    throw new KvConfigError(`cannot register the region READ-only for read tokens on ${fabric.provider.scheme}://: ${(error as Error).message}`);
  }
}

/** Listens on `url` (making an shm socket's directory first). */
export function listenOn(fabric: Fabric, url: string): Listener {
  if (url.startsWith('shm://')) makeSocketDirectory(url);
  try {
    return fabric.provider.listen(url);
  } catch (error) {
    throw new KvConfigError(`cannot listen on ${url}: ${(error as TransportError).message}`);
  }
}

/**
 * Connects the fabric to this server itself (`url`: a URL it listens on), proving who it is with
 * `secret`; the acceptor (sessions/accept.ts) recognises it. Throws what connect throws.
 */
export async function openLoopback(fabric: Fabric, url: string, secret: Buffer): Promise<void> {
  const cq = fabric.provider.createCq(512);
  const scratch = fabric.provider.allocate(LOOPBACK_BATCH * 8, Access.LOCAL_WRITE);
  const connection = await fabric.provider.connect(url.replace('://0.0.0.0:', '://127.0.0.1:'), {
    cq,
    privateData: loopbackData(secret),
    timeoutMs: 5000,
  });
  fabric.loopback = { connection, cq, scratch };
}
