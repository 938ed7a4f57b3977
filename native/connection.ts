// Connections: an RC queue pair and its connection, a request to accept or
// reject, and a listener. The Provider (provider.ts) creates all three and
// holds the live ones.
import { EventEmitter } from 'node:events';

import type { NativeConnection, NativeListener } from './addon.js';
import type { CompletionQueue } from './completion-queue.js';
import { type ConnState, Limit } from './constants.generated.js';
import { TransportError } from './errors.js';
import { type MemoryRegion, MemoryWindow } from './memory.js';
import type { Provider } from './provider.js';
import { type RecvRequest, type WorkRequest, writeRecvRequest, writeWorkRequest } from './work-requests.js';

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
  /** Aborted: the connect is given up at once (its promise rejects with ABORTED, and it holds the event loop no more). */
  signal?: AbortSignal;
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
    this.native.postSend(count);
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
    this.native.postRecv(rrs.length);
  }
  /**
   * Binds a memory window over `region` (all of it, or `offset`/`length`) for this connection's
   * peer alone, with remote `access` (Access.REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC). The region
   * needs Access.MW_BIND (and LOCAL_WRITE for a writable window); the provider needs
   * deviceInfo.memoryWindows. Throws a TransportError (ERR_RKV_WINDOW) when it cannot bind.
   * The connection's end (disconnect, failure) invalidates it.
   */
  bindWindow(region: MemoryRegion, access: number, range: { offset?: number; length?: number } = {}): MemoryWindow {
    const offset = range.offset ?? 0;
    const length = range.length ?? region.length - offset;
    return new MemoryWindow(this.native.bindWindow(region.native, offset, length, access), region);
  }
  /** Moves the queue pair to the error state (everything outstanding is flushed), invalidates its windows and tells the peer. */
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
    this.connection.native.accept(this.provider.qpOptions(options), options.privateData);
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
