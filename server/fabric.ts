// What the server keeps per namespace and provider (scheme): the provider
// (one per scheme, shared by every namespace: it holds the listeners), the
// namespace's event-mode completion queue, its region registered with the
// provider (a registration, and rkey, of its own: no other namespace's key
// covers it), the receive buffers and send buffers of its client rings, and
// its queue pair to the server itself through which locks are released
// (recovery/).
//
// Where the provider has memory windows (deviceInfo.memoryWindows: shm, and
// verbs devices with type 2B windows), the region is registered for binding
// windows and nothing else: its own rkey opens no remote access, and every
// connection, the loopback's included, is given a window of its own
// (bindClientWindow), which fencing invalidates. Without them, the region is
// registered for remote access and its rkey (or the READ-only registration's)
// is what clients get, as before windows.
import {
  Access,
  type CompletionQueue,
  type Connection,
  type Listener,
  type MemoryRegion,
  type MemoryWindow,
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
 * Completions one client can have outstanding on the namespace's CQ: a RECV for each posted
 * receive buffer (its notices and control messages arrive while the server is not polling: a GC
 * pause, a long eviction run) and the signaled SEND of each send buffer.
 */
export const CQ_ENTRIES_PER_CLIENT = RECVS_PER_CLIENT + SEND_BUFFERS;
/** Room beyond the clients' for what is not theirs (the loopback's accepted end, flushes of a departing queue pair's last requests). */
export const CQ_MARGIN = 64;

/** The CQ depth `clients` clients can never overrun. */
export function cqEntriesFor(clients: number): number {
  return clients * CQ_ENTRIES_PER_CLIENT + CQ_MARGIN;
}

/**
 * How many of `maxClients` one CQ of at most `maxCqe` entries can serve. A real HCA puts an
 * overrun CQ into error (every client of the namespace lost), rxe drops completions silently:
 * so a client beyond this is refused (FULL), never admitted onto a CQ it could overrun.
 */
export function clientsFitting(maxClients: number, maxCqe: number): number {
  return Math.max(0, Math.min(maxClients, Math.floor((maxCqe - CQ_MARGIN) / CQ_ENTRIES_PER_CLIENT)));
}
/**
 * The CQ's interrupt moderation (CompletionQueue.watch): under a steady stream of notices the
 * server wakes once per this many µs, on a timer with the CQ unarmed, and drains them all in one
 * batch (one wake-up per PUT cost more CPU than the PUT's notice itself); a completion after a
 * quiet spell is handled at once. 500, not 200: each wake-up costs a context switch (two threads'
 * before the watch moved onto the event loop), which was most of the server's CPU per PUT
 * (docs/benchmarks.md). Bounded by the client ring and by grants: a client's 256 records last 500 µs at 512k PUT/s, and a grant
 * (answered after at most one interval) is asked for a batch ahead (client/block-pools.ts).
 */
export const CQ_MODERATION_US = 500;
/** Atomics per doorbell on the loopback queue pair (one 8-byte result each in its scratch buffer). */
export const LOOPBACK_BATCH = 256;

export interface Fabric {
  provider: Provider;
  cq: CompletionQueue;
  /**
   * The region, registered with this provider: for binding windows alone (windows true), or for
   * READ, WRITE and atomics (its rkey is what write clients get).
   */
  region: MemoryRegion;
  /** Each client gets a memory window of its own (bindClientWindow), not the region's rkey. */
  windows: boolean;
  /** How the provider found that out, or why it has none (logged at start). */
  windowsNote: string;
  /** The window of the loopback's accepted end (sessions/accept.ts binds it; openLoopback reads it). */
  loopbackWindow?: MemoryWindow;
  /**
   * The same memory registered a second time with REMOTE_READ alone: the rkey read clients get.
   * The NIC (or the shm provider, checking as a NIC does) refuses a WRITE or an atomic with it:
   * REM_ACCESS_ERR, nothing changed. Registered only once a read token exists (registerReadOnly):
   * a NIC's second registration counts against `ulimit -l` again.
   */
  readOnly?: MemoryRegion;
  recv: MemoryRegion;
  send: MemoryRegion;
  /** Clients this fabric's CQ can serve (clientsFitting: --max-clients, or fewer on a device with shallow CQs). */
  admits: number;
  /** Clients holding a ring on this fabric (accepted, until their ring is returned). */
  holding: number;
  /** The server's connection to itself: lock recovery goes through it, as RDMA atomics with `rkey` (its window's, or the region's). */
  loopback?: { connection: Connection; cq: CompletionQueue; scratch: MemoryRegion; rkey: number };
}

/** The scheme of a URL the server can listen on; KvConfigError for any other. */
export function listenScheme(url: string): string {
  const scheme = schemeOf(url);
  if (scheme === undefined) throw new KvConfigError(`no provider for '${url}': use ${urlExamples()}`);
  return scheme;
}

/** Opens `scheme`'s provider (for `url`, named in errors). */
export function openProvider(scheme: string, url: string): Provider {
  try {
    return new Provider(scheme);
  } catch (error) {
    throw new KvConfigError(`cannot serve ${url}: ${(error as Error).message}`);
  }
}

/** Registers a namespace's region and its client rings' buffers with `provider`, and makes its completion queue. */
export function openFabric(provider: Provider, store: RegionStore): Fabric {
  const { maxClients } = store.layout;
  const { memoryWindows: windows, memoryWindowsNote: windowsNote, maxCqe } = provider.deviceInfo;
  const admits = clientsFitting(maxClients, maxCqe);
  if (admits === 0) throw new KvConfigError(`${provider.deviceInfo.name} allows completion queues of ${maxCqe} entries: not enough for one client (${cqEntriesFor(1)})`);
  const region = provider.register(store.memory, 0, store.memory.length, windows ? Access.LOCAL_WRITE | Access.MW_BIND : access.REMOTE_ALL);
  const cq = provider.createCq(cqEntriesFor(admits));
  const recv = provider.allocate(maxClients * RECVS_PER_CLIENT * KvLayout.SERVER_RECV_BYTES, Access.LOCAL_WRITE);
  const send = provider.allocate(maxClients * SEND_BUFFERS * KvLayout.CONTROL_RECV_BYTES, Access.LOCAL_WRITE);
  return { provider, cq, region, windows, windowsNote, recv, send, admits, holding: 0 };
}

/** What a role may do with the region: READ alone, or READ, WRITE and atomics. */
const WINDOW_ACCESS = { read: Access.REMOTE_READ, write: Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC } as const;

/**
 * Binds `connection`'s window over the whole region (its end of the queue pair: only that peer can
 * use the rkey), READ-only for a read client; undefined where the fabric has no windows. Throws
 * what bindWindow throws. The connection's end (fence, failure) invalidates it.
 */
export function bindClientWindow(fabric: Fabric, connection: Connection, role: keyof typeof WINDOW_ACCESS): MemoryWindow | undefined {
  return fabric.windows ? connection.bindWindow(fabric.region, WINDOW_ACCESS[role]) : undefined;
}

/** Registers the region READ-only for read clients, once (not with windows); throws KvConfigError when the device refuses. */
export function registerReadOnly(fabric: Fabric, store: RegionStore): void {
  if (fabric.readOnly || fabric.windows) return; // with windows, a read client's window is READ-only
  try {
    fabric.readOnly = fabric.provider.register(store.memory, 0, store.memory.length, Access.REMOTE_READ);
  } catch (error) {
    throw new KvConfigError(`cannot register the region READ-only for read tokens on ${fabric.provider.scheme}://: ${(error as Error).message}`);
  }
}

/** Listens on `url` (making an shm socket's directory first). */
export function listenOn(provider: Provider, url: string): Listener {
  if (url.startsWith('shm://')) makeSocketDirectory(url);
  try {
    return provider.listen(url);
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
  // The acceptor bound the accepted end's window before this connect could complete.
  const rkey = fabric.windows ? fabric.loopbackWindow?.rkey : fabric.region.rkey;
  if (rkey === undefined) {
    connection.disconnect();
    throw new Error('the loopback connection has no window');
  }
  fabric.loopback = { connection, cq, scratch, rkey };
}
