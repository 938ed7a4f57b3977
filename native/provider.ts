// The providers: which URL schemes this build serves, and the Provider object
// that creates memory registrations, CQs, connections and listeners for one
// scheme and delivers their connection events.
import { EventEmitter } from 'node:events';

import { type DeviceInfo, type NativeConnection, type NativeProvider, type NativeQpOptions, type ProviderInfo, addon } from './addon.js';
import { CompletionQueue } from './completion-queue.js';
import { type ConnectOptions, Connection, ConnectionRequest, Listener, type QueuePairOptions } from './connection.js';
import { Access, ConnEvent, Limit } from './constants.generated.js';
import { TransportError } from './errors.js';
import { Memory, MemoryRegion } from './memory.js';
import { writeRecvRequest } from './work-requests.js';

/** Every provider the code knows, built or not. */
export const knownProviders: readonly ProviderInfo[] = Object.freeze(addon.providers.map((p) => Object.freeze({ ...p })));

/** Providers this build contains: always "shm"; "rdma" when built against rdma-core. */
export const builtProviders: readonly string[] = Object.freeze(knownProviders.filter((p) => p.built).map((p) => p.scheme));

if (!builtProviders.includes('rdma') && process.env.RKV_QUIET !== '1') {
  process.emitWarning(
    'rdma-kv was built without the verbs provider (rdma:// URLs): rdma-core was not found at build time. ' +
      'Install libibverbs-dev and librdmacm-dev and rebuild (npm rebuild rdma-kv) to use RDMA NICs or Soft-RoCE.',
    { code: 'RKV_NO_VERBS' },
  );
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
    this.native = new addon.Provider(scheme, () => this.dispatch());
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
    return new MemoryRegion(this.native.register(memory.native, offset, length, access), memory, offset);
  }

  /** Allocates memory and registers all of it. */
  allocate(length: number, access: number = Access.LOCAL_WRITE): MemoryRegion {
    const memory = new Memory(length);
    return this.register(memory, 0, memory.length, access);
  }

  createCq(depth: number = Limit.DEFAULT_QUEUE_DEPTH): CompletionQueue {
    return new CompletionQueue(this.native.createCq(depth));
  }

  listen(url: string): Listener {
    const listener = new Listener(this.native.listen(url), this);
    this.retain(listener);
    return listener;
  }

  connect(url: string, options: ConnectOptions): Promise<Connection> {
    let native: NativeConnection;
    try {
      native = this.native.connect(url, this.qpOptions(options), options.privateData, options.timeoutMs ?? 5000);
    } catch (error) {
      return Promise.reject(error);
    }
    const connection = this.wrap(native);
    this.retain(connection);
    const { signal } = options;
    return new Promise<Connection>((resolve, reject) => {
      const giveUp = () => {
        connection.settle = undefined;
        connection.disconnect(); // verbs sends no event for a connect given up: settle it here
        reject(new TransportError('ABORTED', `connect to ${url} given up`));
      };
      const done = () => signal?.removeEventListener('abort', giveUp);
      connection.settle = {
        resolve: (c) => (done(), resolve(c)),
        reject: (e) => (done(), reject(e)),
      };
      if (signal?.aborted) giveUp();
      else signal?.addEventListener('abort', giveUp, { once: true });
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
