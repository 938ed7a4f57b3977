// The addon as it is compiled (native/binding/*.cc), and the one place that
// loads it. Only the modules of native/ import this file: they wrap these raw
// objects in the typed face that native/index.ts exports, and nothing above
// native/ (client, server, protocol, tests, benchmarks) sees them.
//
// Loading it hands the addon the class its native code throws (TransportError,
// with a string code), once per environment (better-sqlite3's pattern): what
// the addon throws needs no wrapping on its way up.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

import type { ConnEvent, ConnState } from './constants.generated.js';
import { TransportError } from './errors.js';

export interface NativeMemory {
  readonly length: number;
  readonly fileBacked: boolean;
  readonly existed: boolean;
  readonly pageKind: 'hugetlb' | 'thp' | '4k';
  readonly pageNote: string;
  buffer(): ArrayBuffer;
}
export interface NativeMemoryRegion {
  readonly lkey: number;
  readonly rkey: number;
  readonly addr: bigint;
  readonly length: number;
  readonly access: number;
  deregister(): void;
}
export interface NativeWindow {
  readonly rkey: number;
  readonly addr: bigint;
  readonly length: number;
  readonly access: number;
  readonly valid: boolean;
  invalidate(): void;
}
export interface NativeCq {
  poll(max: number): number;
  arm(): void;
  ackEvent(): void;
  watch(callback: () => number | void, moderationUs?: number, onEventsFailed?: (reason: string) => void): void;
  unwatch(): void;
  /** For tests: the watch's event fd fails as on POLLERR. */
  failEventsForTest(): void;
  readonly completions: Uint32Array;
  readonly eventFd: number;
  readonly depth: number;
}
export interface NativeQpOptions {
  sendCq: NativeCq;
  recvCq: NativeCq;
  sendDepth?: number;
  recvDepth?: number;
  initialRecvs?: number;
}
export interface NativeConnection {
  postSend(count: number): void;
  postRecv(count: number): void;
  accept(options: NativeQpOptions, privateData?: Buffer): void;
  reject(privateData?: Buffer): void;
  disconnect(): void;
  fenceComplete(): boolean;
  bindWindow(region: NativeMemoryRegion, offset: number, length: number, access: number): NativeWindow;
  readonly state: ConnState;
  readonly qpNum: number;
  readonly maxInline: number;
  readonly peerPrivateData: Buffer;
  readonly peerAddress: string;
  readonly firstError: string;
}
export interface NativeListener {
  readonly url: string;
  close(): void;
}
export interface DeviceInfo {
  name: string;
  maxQpRdAtom: number;
  maxQpInitRdAtom: number;
  atomicCap: 'NONE' | 'HCA' | 'GLOB';
  maxInline: number;
  /** Connection.bindWindow works: per-connection rkeys (verbs: type 2B memory windows, probed at start). */
  memoryWindows: boolean;
  /** How that was found, or why not. */
  memoryWindowsNote: string;
  /** The deepest completion queue createCq accepts (verbs: ibv_device_attr.max_cqe). */
  maxCqe: number;
}
export interface NativeProvider {
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

/** The region a client core works on: the server's hello (protocol/control.ts) in the binding's field names. */
export interface CoreRegion {
  // The server's region: address, rkey, length (the hello's region).
  addr: bigint; rkey: number; length: bigint;
  // Where the index, heap and notification rings lie in it (the hello's layout).
  bucketCount: number; indexOffset: bigint; heapOffset: bigint; heapBytes: bigint; seed: bigint; ringOffset: bigint; maxValueBytes: number;
  // This client: its owner id in lock words, its write versions' base, and the grace period of freed blocks.
  clientId: number; versionBase: bigint; graceMs: number;
  // The access table's offset when the server evicts (GETs mark what they read); absent: none.
  accessOffset?: bigint;
  // The epoch table's offset (region format 5, write clients): a write READs its hash slot's word; absent: none.
  epochOffset?: bigint;
}
export interface CoreOptions {
  /** The core's scratch memory (bucket images, atomics results, the buffer pool), registered once. */
  scratchBytes: number;
  /** How long one operation may take before it fails with TIMEOUT. */
  opTimeoutMs: number;
  /** Keys and values of one submitted batch. */
  arenaBytes: number;
  /** Event mode: the core re-arms the CQ after each submit and poll (and disarms it while it posts). */
  armWhenDone?: boolean;
  /** Entries of the location cache (GET in one READ on a hit), 32 B each, made once; 0 disables it. @default KvLayout.DEFAULT_LOCATION_CACHE_ENTRIES */
  locationCacheEntries?: number;
}
/** native/binding/kv_binding.cc: the client data-path core over one connection. */
export interface NativeClientCore {
  /** The largest item (header + key + value) its scratch holds; larger ones need a registered buffer. */
  readonly itemLimit: number;
  /** taken + results * 65536 (see ClientCore.submit in native/client-core.ts). */
  submit(count: number): number;
  poll(): number;
  failAll(status: number, connection?: number): void;
  close(waitMs?: number): boolean;
  addConnection(provider: NativeProvider, connection: NativeConnection, region: CoreRegion): number;
  closeConnection(connection: number, waitMs?: number): boolean;
  connectionItemLimit(connection: number): number;
  permitReads(connection: number, ms: number): void;
  copyValues(target: Uint8Array | ArrayBuffer, first: number, count: number): void;
  readonly connections: number;
  /** [hits, misses, validation failures] of the location cache since the core was made. */
  locationStats(): [number, number, number];
  readonly inflight: number;
  readonly doorbells: number;
  readonly backoffs: number;
  // Each read of these makes a new external ArrayBuffer: read them once.
  readonly opWords: Uint32Array;
  readonly resultWords: Uint32Array;
  readonly copyWords: Uint32Array;
  /** This core in coreSubmit & co. (a slot of the thread's table and its generation). */
  readonly handle: number;
  readonly controlWords: Uint32Array;
  readonly arena: Buffer;
  /** Shares the core: the core's memory goes only with the last view of it. */
  readonly scratch: Buffer;
}

/** native/binding/notice_binding.cc: the server's notice path over one fabric's CQ. */
export interface NativeNoticeDrain {
  attach(connection: NativeConnection, ring: number): void;
  detach(qpNum: number): void;
  poll(max: number, chunkStart: Uint32Array, granted: Uint32Array): number;
  // Each read of these makes a new external ArrayBuffer: read them once.
  readonly out: Uint32Array;
  readonly others: Uint32Array;
}
export interface NoticeDrainLayout {
  heapOffset: number; heapBytes: number; ringOffset: number; ringBytes: number; maxClients: number;
}

export interface Addon {
  constants: Record<string, Record<string, number>>;
  /** Native code throws `new cls(code, message)` from now on (this environment). */
  setErrorClass(cls: new (code: string, message: string) => Error): void;
  providers: ProviderInfo[];
  Provider: new (scheme: string, onEvents: () => void) => NativeProvider;
  Memory: new (length: number, path?: string, hugePages?: boolean) => NativeMemory;
  /** A registered buffer for large values: its id and its memory (native/kv_binding.cc). */
  registeredBuffer(bytes: number): [id: number, memory: ArrayBuffer];
  /** Forgets a registered buffer: ops naming it fail with BAD_BUFFER. False if it was not registered. */
  freeRegistered(id: number): boolean;
  ClientCore: new (provider: NativeProvider, connection: NativeConnection, cq: NativeCq, region: CoreRegion, options: CoreOptions) => NativeClientCore;
  /** A core's submit, poll and copyValues by its handle: calls without an instance method's unwrap (kv_binding.cc). */
  coreSubmit(handle: number, count: number): number;
  corePoll(handle: number): number;
  coreCopyValues(handle: number, target: Uint8Array | ArrayBuffer, first: number, count: number): void;
  hashKey(key: Buffer, seed: bigint, bucketCount: number): [number, number, number];
  NoticeDrain: new (region: Buffer, layout: NoticeDrainLayout, classes: readonly number[], recv: Buffer, recvLkey: number, recvBytes: number, provider: NativeProvider, cq: NativeCq) => NativeNoticeDrain;
  indexWords(fp: number, units: number, block: number, version: number, owner: number, counter: bigint): [bigint, bigint, bigint, bigint, number, number, number];
  crc32c(bytes: Buffer, path: 0 | 1 | 2, crc: number): number;
  crc32cHardware: boolean;
  buildItem(type: number, key: Buffer, value: Buffer, version: bigint): Buffer;
  itemChecksum(item: Buffer): number;
}

const packageRoot = fileURLToPath(new URL('../..', import.meta.url));
export const addon = (createRequire(import.meta.url)('node-gyp-build') as (dir: string) => Addon)(packageRoot);
addon.setErrorClass(TransportError);
