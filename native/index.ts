// The typed face of the native transport. Layers above (client, server, tests,
// benchmarks) use this module, never the addon directly.
//
// Two ways to post and poll:
//  - batch-raw (hot paths): write requests into provider.sendBuffer with
//    writeWorkRequest(), call connection.postSendRaw(n); cq.pollRaw(max) leaves
//    completions in cq.completions. One crossing per batch, nothing allocated.
//  - objects (tests, control paths): connection.postSend([...]), cq.poll().
import { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

import {
  Access,
  ConnEvent,
  ConnState,
  Limit,
  Opcode,
  RecvLayout,
  SendFlag,
  WcLayout,
  WcStatus,
  WrLayout,
  constants,
} from './constants.generated.js';

export { Access, ConnEvent, ConnState, Limit, Opcode, SendFlag, WcStatus, WcFlag, constants } from './constants.generated.js';

// ---- the addon ---------------------------------------------------------------------

interface NativeMemory {
  readonly length: number;
  readonly fileBacked: boolean;
  readonly existed: boolean;
  buffer(): ArrayBuffer;
}
interface NativeMemoryRegion {
  readonly lkey: number;
  readonly rkey: number;
  readonly addr: bigint;
  readonly length: number;
  readonly access: number;
  deregister(): void;
}
interface NativeCq {
  poll(max: number): number;
  arm(): void;
  ackEvent(): void;
  watch(callback: () => void): void;
  unwatch(): void;
  readonly completions: Uint32Array;
  readonly eventFd: number;
  readonly depth: number;
}
interface NativeQpOptions {
  sendCq: NativeCq;
  recvCq: NativeCq;
  sendDepth?: number;
  recvDepth?: number;
  initialRecvs?: number;
}
interface NativeConnection {
  postSend(count: number): void;
  postRecv(count: number): void;
  accept(options: NativeQpOptions, privateData?: Buffer): void;
  reject(privateData?: Buffer): void;
  disconnect(): void;
  fenceComplete(): boolean;
  readonly state: ConnState;
  readonly qpNum: number;
  readonly maxInline: number;
  readonly peerPrivateData: Buffer;
  readonly peerAddress: string;
  readonly firstError: string;
}
interface NativeListener {
  readonly url: string;
  close(): void;
}
export interface DeviceInfo {
  name: string;
  maxQpRdAtom: number;
  maxQpInitRdAtom: number;
  atomicCap: 'NONE' | 'HCA' | 'GLOB';
  maxInline: number;
}
interface NativeProvider {
  register(memory: NativeMemory, offset: number, length: number, access: number): NativeMemoryRegion;
  createCq(depth: number): NativeCq;
  listen(url: string): NativeListener;
  connect(url: string, options: NativeQpOptions, privateData: Buffer | undefined, timeoutMs: number): NativeConnection;
  drainEvents(): Array<[ConnEvent, NativeConnection, Buffer, string]>;
  ref(): void;
  unref(): void;
  close(): void;
  readonly deviceInfo: DeviceInfo;
  readonly scheme: string;
  readonly sendBuffer: Uint32Array;
  readonly recvBuffer: Uint32Array;
}
interface Addon {
  constants: Record<string, Record<string, number>>;
  providers: ProviderInfo[];
  Provider: new (scheme: string, onEvents: () => void) => NativeProvider;
  Memory: new (length: number, path?: string) => NativeMemory;
  hashKey(key: Buffer, seed: bigint, bucketCount: number): [number, number, number];
  indexWords(fp: number, units: number, block: number, version: number, owner: number, counter: bigint): [bigint, bigint, bigint, bigint, number, number, number];
}

const packageRoot = fileURLToPath(new URL('../..', import.meta.url));
const require = createRequire(import.meta.url);
const addon = (require('node-gyp-build') as (dir: string) => Addon)(packageRoot);

/** The constants as the addon was compiled with them (a test proves they equal `constants`). */
export const nativeConstants = addon.constants;
/**
 * A key's two buckets and its fingerprint, as clients compute them (native/kv/layout.h's
 * hash_key): the server uses it to look up a departed client's items.
 */
export function hashKey(key: Buffer, seed: bigint, bucketCount: number): { b1: number; b2: number; fingerprint: number } {
  const [b1, b2, fingerprint] = addon.hashKey(key, seed, bucketCount);
  return { b1, b2, fingerprint };
}

/** A transport provider this code knows (native/transport/provider.cc's table, the one list of URL schemes). */
export interface ProviderInfo {
  /** The URL scheme: "shm", "rdma". */
  scheme: string;
  /** A URL of that scheme, for messages: "shm:///path/to.sock". */
  example: string;
  /** Whether this build contains it. */
  built: boolean;
  /** Why not, and what to install, when it is not built. */
  notBuilt?: string;
}

/** Every provider the code knows, built or not. */
export const knownProviders: readonly ProviderInfo[] = Object.freeze(addon.providers.map((p) => Object.freeze({ ...p })));

/**
 * The index words native/kv/layout.h builds, for the test that holds protocol/index-format.ts to
 * them: [slot, lock word, release addend, counter word, slot fingerprint, slot units, slot block].
 * @internal
 */
export function nativeIndexWords(fp: number, units: number, block: number, version: number, owner: number, counter: bigint) {
  return addon.indexWords(fp, units, block, version, owner, counter);
}

/** Providers this build contains: always "shm"; "rdma" when built against rdma-core. */
export const builtProviders: readonly string[] = Object.freeze(knownProviders.filter((p) => p.built).map((p) => p.scheme));

if (!builtProviders.includes('rdma') && process.env.RKV_QUIET !== '1') {
  process.emitWarning(
    'rdma-kv was built without the verbs provider (rdma:// URLs): rdma-core was not found at build time. ' +
      'Install libibverbs-dev and librdmacm-dev and rebuild (npm rebuild rdma-kv) to use RDMA NICs or Soft-RoCE.',
    { code: 'RKV_NO_VERBS' },
  );
}

// ---- errors ---------------------------------------------------------------------------

/** Any failure of the transport layer. `code` is a stable string (ERR_RKV_*, EINVAL, ENOMEM, REJECTED, ...). */
export class TransportError extends Error {
  readonly code: string;
  /** The private data of a rejection. */
  readonly privateData?: Buffer;
  constructor(code: string, message: string, privateData?: Buffer) {
    super(message);
    this.name = 'TransportError';
    this.code = code;
    if (privateData) this.privateData = privateData;
  }
}

function rethrow(error: unknown): never {
  if (error instanceof Error && typeof (error as { code?: unknown }).code === 'string') {
    const e = new TransportError((error as Error & { code: string }).code, error.message);
    const posted = (error as { posted?: number }).posted;
    if (posted !== undefined) Object.assign(e, { posted });
    throw e;
  }
  throw error;
}

const statusNames = new Map<number, string>(Object.entries(WcStatus).map(([name, value]) => [value, name]));
const opcodeNames = new Map<number, string>(Object.entries(Opcode).map(([name, value]) => [value, name]));
/** "REM_ACCESS_ERR" for 10, as ibv_wc_status names it. */
export function statusName(status: number): string {
  return statusNames.get(status) ?? `UNKNOWN_${status}`;
}
export function opcodeName(opcode: number): string {
  return opcodeNames.get(opcode) ?? `UNKNOWN_${opcode}`;
}

// ---- requests and completions --------------------------------------------------------

export interface WorkRequest {
  wrId?: number;
  opcode: Opcode;
  /** SendFlag bits; SIGNALED asks for a completion on success. */
  flags?: number;
  /** The local buffer: a registered region and an offset in it. */
  local?: MemoryRegion;
  localOffset?: number;
  length?: number;
  /** The peer's address (as it published it) and its rkey. */
  remoteAddr?: bigint;
  rkey?: number;
  /** CMP_AND_SWP: the expected value; FETCH_AND_ADD: the addend. */
  compareAdd?: bigint;
  swap?: bigint;
  imm?: number;
}

export interface RecvRequest {
  wrId?: number;
  local: MemoryRegion;
  localOffset?: number;
  length: number;
}

export interface Completion {
  wrId: number;
  status: WcStatus;
  statusName: string;
  opcode: Opcode;
  byteLen: number;
  imm: number;
  flags: number;
  qpNum: number;
}

const MASK32 = 0xffffffffn;

/** Writes one work request into a send buffer at slot `index` (WrLayout). */
export function writeWorkRequest(buffer: Uint32Array, index: number, wr: WorkRequest): void {
  const o = index * WrLayout.WORDS;
  const wrId = wr.wrId ?? 0;
  buffer[o + WrLayout.WR_ID_LO] = wrId >>> 0;
  buffer[o + WrLayout.WR_ID_HI] = Math.floor(wrId / 0x100000000);
  buffer[o + WrLayout.OPCODE] = wr.opcode;
  buffer[o + WrLayout.FLAGS] = wr.flags ?? 0;
  buffer[o + WrLayout.LKEY] = wr.local?.lkey ?? 0;
  buffer[o + WrLayout.LOCAL_OFFSET] = wr.localOffset ?? 0;
  buffer[o + WrLayout.LENGTH] = wr.length ?? 0;
  buffer[o + WrLayout.RKEY] = wr.rkey ?? 0;
  const remote = wr.remoteAddr ?? 0n;
  buffer[o + WrLayout.REMOTE_ADDR_LO] = Number(remote & MASK32);
  buffer[o + WrLayout.REMOTE_ADDR_HI] = Number((remote >> 32n) & MASK32);
  const compareAdd = BigInt.asUintN(64, wr.compareAdd ?? 0n);
  buffer[o + WrLayout.COMPARE_ADD_LO] = Number(compareAdd & MASK32);
  buffer[o + WrLayout.COMPARE_ADD_HI] = Number(compareAdd >> 32n);
  const swap = BigInt.asUintN(64, wr.swap ?? 0n);
  buffer[o + WrLayout.SWAP_LO] = Number(swap & MASK32);
  buffer[o + WrLayout.SWAP_HI] = Number(swap >> 32n);
  buffer[o + WrLayout.IMM] = (wr.imm ?? 0) >>> 0;
}

function writeRecvRequest(buffer: Uint32Array, index: number, rr: RecvRequest): void {
  const o = index * RecvLayout.WORDS;
  const wrId = rr.wrId ?? 0;
  buffer[o + RecvLayout.WR_ID_LO] = wrId >>> 0;
  buffer[o + RecvLayout.WR_ID_HI] = Math.floor(wrId / 0x100000000);
  buffer[o + RecvLayout.LKEY] = rr.local.lkey;
  buffer[o + RecvLayout.LOCAL_OFFSET] = rr.localOffset ?? 0;
  buffer[o + RecvLayout.LENGTH] = rr.length;
}

/** Reads completion `index` from a completions view (WcLayout). */
export function readCompletion(words: Uint32Array, index: number): Completion {
  const o = index * WcLayout.WORDS;
  const status = words[o + WcLayout.STATUS]! as WcStatus;
  return {
    wrId: words[o + WcLayout.WR_ID_LO]! + words[o + WcLayout.WR_ID_HI]! * 0x100000000,
    status,
    statusName: statusName(status),
    opcode: words[o + WcLayout.OPCODE]! as Opcode,
    byteLen: words[o + WcLayout.BYTE_LEN]!,
    imm: words[o + WcLayout.IMM]!,
    flags: words[o + WcLayout.FLAGS]!,
    qpNum: words[o + WcLayout.QP_NUM]!,
  };
}

// ---- objects ------------------------------------------------------------------------------

/** Shareable memory (a sealed memfd, or a file that survives restarts). */
export class Memory {
  /** @internal */ readonly native: NativeMemory;
  /** A Buffer over the whole mapping; it keeps the mapping alive while referenced. */
  readonly bytes: Buffer;
  constructor(length: number, path?: string) {
    try {
      this.native = path === undefined ? new addon.Memory(length) : new addon.Memory(length, path);
    } catch (error) {
      rethrow(error);
    }
    this.bytes = Buffer.from(this.native.buffer());
  }
  get length(): number {
    return this.native.length;
  }
  /** A file-backed memory whose file already held data when it was opened. */
  get existed(): boolean {
    return this.native.existed;
  }
}

export class MemoryRegion {
  constructor(
    /** @internal */ readonly native: NativeMemoryRegion,
    readonly memory: Memory,
    readonly offset: number,
  ) {}
  get lkey(): number {
    return this.native.lkey;
  }
  get rkey(): number {
    return this.native.rkey;
  }
  /** The address peers use for this region's first byte. */
  get addr(): bigint {
    return this.native.addr;
  }
  get length(): number {
    return this.native.length;
  }
  /** The region's bytes, as a view of the memory. */
  get bytes(): Buffer {
    return this.memory.bytes.subarray(this.offset, this.offset + this.native.length);
  }
  /** What a peer needs to reach this region: plain, serializable. */
  remote(): RemoteRegion {
    return { addr: this.native.addr, rkey: this.native.rkey, length: this.native.length };
  }
  deregister(): void {
    this.native.deregister();
  }
}

/** A peer's region: address, rkey and length (jonhoo/rust-ibverbs' RemoteMemorySlice). */
export interface RemoteRegion {
  addr: bigint;
  rkey: number;
  length: number;
}

export class CompletionQueue {
  /** The completions of the last pollRaw(), WcLayout words; read with readCompletion(). */
  readonly completions: Uint32Array;
  constructor(/** @internal */ readonly native: NativeCq) {
    this.completions = native.completions;
  }
  get depth(): number {
    return this.native.depth;
  }
  /** Polls up to max (≤ Limit.MAX_POLL_BATCH) completions into `completions`; returns the count. */
  pollRaw(max: number = Limit.MAX_POLL_BATCH): number {
    return this.native.poll(max);
  }
  poll(max: number = Limit.MAX_POLL_BATCH): Completion[] {
    const n = this.native.poll(max);
    const out: Completion[] = [];
    for (let i = 0; i < n; i++) out.push(readCompletion(this.completions, i));
    return out;
  }
  /** Requests a wake-up for the next completion. Poll again after arming. */
  arm(): void {
    this.native.arm();
  }
  /**
   * Event mode: a native thread waits on the CQ's event fd and calls `onReady`
   * once per wake-up. The callback should drain with poll(), arm(), and poll
   * once more (completions that raced with arm() bring no event).
   */
  watch(onReady: () => void): void {
    this.native.watch(onReady);
  }
  unwatch(): void {
    this.native.unwatch();
  }
  /**
   * Resolves with the first completions that arrive, polling on setImmediate
   * (busy) or waiting for the CQ's event (event). For tests and control paths.
   */
  async next(options: { timeoutMs?: number; mode?: 'busy' | 'event' } = {}): Promise<Completion[]> {
    const deadline = Date.now() + (options.timeoutMs ?? 5000);
    if (options.mode === 'event') {
      const ready = this.poll();
      if (ready.length > 0) return ready;
      return new Promise<Completion[]>((resolve, reject) => {
        const timer = setTimeout(() => {
          this.unwatch();
          reject(new TransportError('ETIMEDOUT', 'no completion in time'));
        }, Math.max(0, deadline - Date.now()));
        const check = (): void => {
          const got = this.poll();
          if (got.length === 0) {
            this.arm();
            const raced = this.poll();
            if (raced.length === 0) return;
            got.push(...raced);
          }
          clearTimeout(timer);
          this.unwatch();
          resolve(got);
        };
        this.watch(check);
        this.arm();
        check();
      });
    }
    for (;;) {
      const got = this.poll();
      if (got.length > 0) return got;
      if (Date.now() > deadline) throw new TransportError('ETIMEDOUT', 'no completion in time');
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  /** Collects completions until `count` have arrived. */
  async take(count: number, options: { timeoutMs?: number; mode?: 'busy' | 'event' } = {}): Promise<Completion[]> {
    const out: Completion[] = [];
    const deadline = Date.now() + (options.timeoutMs ?? 5000);
    while (out.length < count) {
      out.push(...(await this.next({ ...options, timeoutMs: Math.max(1, deadline - Date.now()) })));
    }
    return out;
  }
}

export interface QueuePairOptions {
  /** One CQ for both queues, or sendCq + recvCq. */
  cq?: CompletionQueue;
  sendCq?: CompletionQueue;
  recvCq?: CompletionQueue;
  /** @default Limit.DEFAULT_QUEUE_DEPTH */
  sendDepth?: number;
  /** @default Limit.DEFAULT_QUEUE_DEPTH */
  recvDepth?: number;
  /** Receives posted before the queue pair reaches RTR. */
  initialRecvs?: RecvRequest[];
}

export interface ConnectOptions extends QueuePairOptions {
  /** Up to Limit.MAX_PRIVATE_DATA bytes the acceptor reads (a token, a version). */
  privateData?: Buffer;
  /** @default 5000 */
  timeoutMs?: number;
}

type ConnectionEvents = {
  established: [privateData: Buffer];
  disconnected: [reason: string];
};

/** An RC queue pair and its connection. Emits 'established' and 'disconnected'. */
export class Connection extends EventEmitter<ConnectionEvents> {
  /** @internal */ settle?: { resolve: (c: Connection) => void; reject: (e: Error) => void } | undefined;
  constructor(
    /** @internal */ readonly native: NativeConnection,
    private readonly provider: Provider,
  ) {
    super();
  }
  get state(): ConnState {
    return this.native.state;
  }
  get qpNum(): number {
    return this.native.qpNum;
  }
  get maxInline(): number {
    return this.native.maxInline;
  }
  get peerPrivateData(): Buffer {
    return this.native.peerPrivateData;
  }
  get peerAddress(): string {
    return this.native.peerAddress;
  }
  /** The first error that broke this connection, e.g. "READ: REM_ACCESS_ERR (...)". */
  get firstError(): string {
    return this.native.firstError;
  }
  /** Posts `count` requests already written into provider.sendBuffer: one crossing, one doorbell. */
  postSendRaw(count: number): void {
    try {
      this.native.postSend(count);
    } catch (error) {
      rethrow(error);
    }
  }
  postSend(wrs: WorkRequest[]): void {
    if (wrs.length > Limit.MAX_POST_BATCH) throw new TransportError('ERR_OUT_OF_RANGE', 'batch too large');
    const buffer = this.provider.sendBuffer;
    wrs.forEach((wr, i) => writeWorkRequest(buffer, i, wr));
    this.postSendRaw(wrs.length);
  }
  postRecv(rrs: RecvRequest[]): void {
    if (rrs.length > Limit.MAX_POST_BATCH) throw new TransportError('ERR_OUT_OF_RANGE', 'batch too large');
    const buffer = this.provider.recvBuffer;
    rrs.forEach((rr, i) => writeRecvRequest(buffer, i, rr));
    try {
      this.native.postRecv(rrs.length);
    } catch (error) {
      rethrow(error);
    }
  }
  /** Moves the queue pair to the error state (everything outstanding is flushed) and tells the peer. */
  disconnect(): void {
    this.native.disconnect();
    this.closed();
  }
  /**
   * After disconnect(): resolves once nothing the peer posted can still land in
   * our memory. At once on verbs (the queue pair is in error); on shm it waits
   * while the peer process is paused inside a post that began before the fence
   * (until that post ends or the process exits). `onWait` is called once if it
   * has to wait longer than `warnMs`; `stopWaiting` ends the wait early (the
   * caller is shutting down) and the promise resolves to false.
   */
  async fenced(options: { warnMs?: number; onWait?: () => void; stopWaiting?: () => boolean } = {}): Promise<boolean> {
    const started = performance.now();
    let warned = false;
    for (let delay = 1; !this.native.fenceComplete(); delay = Math.min(delay * 2, 50)) {
      if (options.stopWaiting?.()) return false;
      if (!warned && performance.now() - started > (options.warnMs ?? 1000)) {
        warned = true;
        options.onWait?.();
      }
      // unref'd: waiting for a paused peer does not keep a process alive that has nothing else to do
      await new Promise((resolve) => setTimeout(resolve, delay).unref());
    }
    return true;
  }
  /** @internal */
  closed(): void {
    this.provider.release(this);
  }
}

/** A connection request seen by a listener: accept or reject it. */
export class ConnectionRequest {
  constructor(
    readonly connection: Connection,
    readonly privateData: Buffer,
    private readonly provider: Provider,
  ) {}
  get peerAddress(): string {
    return this.connection.peerAddress;
  }
  /** Creates the queue pair, posts the initial receives, and accepts. */
  accept(options: QueuePairOptions & { privateData?: Buffer }): Connection {
    try {
      this.connection.native.accept(this.provider.qpOptions(options), options.privateData);
    } catch (error) {
      rethrow(error);
    }
    return this.connection;
  }
  reject(privateData?: Buffer): void {
    this.connection.native.reject(privateData);
    this.connection.closed();
  }
}

export class Listener {
  constructor(
    private readonly native: NativeListener,
    private readonly provider: Provider,
  ) {}
  /** The bound URL (with the real port when listening on port 0). */
  get url(): string {
    return this.native.url;
  }
  close(): void {
    this.native.close();
    this.provider.release(this);
  }
}

type ProviderEvents = {
  connectRequest: [request: ConnectionRequest];
};

/**
 * One provider per scheme per user: "shm" (same host) or "rdma" (verbs).
 * Emits 'connectRequest' for every incoming connection on its listeners.
 */
export class Provider extends EventEmitter<ProviderEvents> {
  /** @internal */ readonly native: NativeProvider;
  /** Work requests for postSendRaw(), WrLayout words, Limit.MAX_POST_BATCH slots. */
  readonly sendBuffer: Uint32Array;
  /** Receive requests, RecvLayout words. */
  readonly recvBuffer: Uint32Array;
  private readonly connections = new WeakMap<NativeConnection, Connection>();
  // Pending and open connections and open listeners: held here so the GC
  // cannot take one mid-handshake, and the event loop stays alive for them.
  private readonly live = new Set<Connection | Listener>();
  private isClosed = false;

  constructor(readonly scheme: string) {
    super();
    try {
      this.native = new addon.Provider(scheme, () => this.dispatch());
    } catch (error) {
      rethrow(error);
    }
    this.sendBuffer = this.native.sendBuffer;
    this.recvBuffer = this.native.recvBuffer;
  }

  /** The provider for a URL's scheme. */
  static forUrl(url: string): Provider {
    const scheme = url.slice(0, Math.max(0, url.indexOf('://')));
    if (!knownProviders.some((p) => p.scheme === scheme)) {
      const expected = knownProviders.map((p) => `${p.scheme}://`).join(' or ');
      throw new TransportError('ERR_RKV_URL', `unknown URL scheme in '${url}': expected ${expected}`);
    }
    return new Provider(scheme);
  }

  get deviceInfo(): DeviceInfo {
    return this.native.deviceInfo;
  }

  register(memory: Memory, offset: number, length: number, access: number): MemoryRegion {
    try {
      return new MemoryRegion(this.native.register(memory.native, offset, length, access), memory, offset);
    } catch (error) {
      rethrow(error);
    }
  }

  /** Allocates memory and registers all of it. */
  allocate(length: number, access: number = Access.LOCAL_WRITE): MemoryRegion {
    const memory = new Memory(length);
    return this.register(memory, 0, memory.length, access);
  }

  createCq(depth: number = Limit.DEFAULT_QUEUE_DEPTH): CompletionQueue {
    try {
      return new CompletionQueue(this.native.createCq(depth));
    } catch (error) {
      rethrow(error);
    }
  }

  listen(url: string): Listener {
    let native: NativeListener;
    try {
      native = this.native.listen(url);
    } catch (error) {
      rethrow(error);
    }
    const listener = new Listener(native, this);
    this.retain(listener);
    return listener;
  }

  connect(url: string, options: ConnectOptions): Promise<Connection> {
    let native: NativeConnection;
    try {
      native = this.native.connect(url, this.qpOptions(options), options.privateData, options.timeoutMs ?? 5000);
    } catch (error) {
      return Promise.reject(rethrowToError(error));
    }
    const connection = this.wrap(native);
    this.retain(connection);
    return new Promise<Connection>((resolve, reject) => {
      connection.settle = { resolve, reject };
    });
  }

  /** Stops the event thread and disconnects everything. Idempotent. */
  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.native.close();
  }

  /** @internal */
  qpOptions(options: QueuePairOptions): NativeQpOptions {
    const sendCq = options.sendCq ?? options.cq;
    const recvCq = options.recvCq ?? options.cq;
    if (!sendCq || !recvCq) throw new TransportError('ERR_INVALID_ARG_TYPE', 'a queue pair needs a cq (or sendCq and recvCq)');
    const initial = options.initialRecvs ?? [];
    if (initial.length > Limit.MAX_POST_BATCH) throw new TransportError('ERR_OUT_OF_RANGE', 'too many initial receives');
    initial.forEach((rr, i) => writeRecvRequest(this.recvBuffer, i, rr));
    const out: NativeQpOptions = { sendCq: sendCq.native, recvCq: recvCq.native, initialRecvs: initial.length };
    if (options.sendDepth !== undefined) out.sendDepth = options.sendDepth;
    if (options.recvDepth !== undefined) out.recvDepth = options.recvDepth;
    return out;
  }

  /** @internal */
  retain(owner: Connection | Listener): void {
    if (this.live.has(owner)) return;
    this.live.add(owner);
    if (this.live.size === 1 && !this.isClosed) this.native.ref();
  }
  /** @internal */
  release(owner: Connection | Listener): void {
    if (!this.live.delete(owner)) return;
    if (this.live.size === 0 && !this.isClosed) this.native.unref();
  }

  private wrap(native: NativeConnection): Connection {
    let connection = this.connections.get(native);
    if (!connection) {
      connection = new Connection(native, this);
      this.connections.set(native, connection);
    }
    return connection;
  }

  private dispatch(): void {
    if (this.isClosed) return;
    for (const [type, native, privateData, message] of this.native.drainEvents()) {
      const connection = this.wrap(native);
      switch (type) {
        case ConnEvent.CONNECT_REQUEST:
          this.retain(connection);
          if (this.listenerCount('connectRequest') === 0) {
            connection.native.reject();
            connection.closed();
          } else {
            this.emit('connectRequest', new ConnectionRequest(connection, privateData, this));
          }
          break;
        case ConnEvent.ESTABLISHED:
          connection.settle?.resolve(connection);
          connection.settle = undefined;
          connection.emit('established', privateData);
          break;
        case ConnEvent.REJECTED:
          connection.closed();
          connection.settle?.reject(new TransportError('REJECTED', message || 'connection rejected', privateData));
          connection.settle = undefined;
          break;
        case ConnEvent.ERROR:
        case ConnEvent.DISCONNECTED:
          connection.closed();
          if (connection.settle) {
            connection.settle.reject(new TransportError('ERR_RKV_CONNECT', message || 'connection failed'));
            connection.settle = undefined;
          }
          connection.emit('disconnected', message);
          break;
      }
    }
  }
}

function rethrowToError(error: unknown): Error {
  try {
    rethrow(error);
  } catch (e) {
    return e as Error;
  }
}

export const access = {
  /** Everything a server region offers its clients. */
  REMOTE_ALL: Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC,
} as const;
