// One server's client: a queue pair, the native core that drives it, and the
// heap blocks this client was granted. Operations issued in one tick are
// written into the core's buffers and submitted with one crossing (one
// doorbell); the core drives every RDMA round trip and hands back one result
// per operation. Control messages (hello, heap grants) travel as msgpack over
// SEND/RECV on the same queue pair. KvClient routes keys to these.
import { EventEmitter } from 'node:events';

import {
  Access,
  type CompletionQueue,
  type Connection,
  type MemoryRegion,
  Opcode,
  Provider,
  SendFlag,
  TransportError,
} from '../native/index.js';
import { KvLayout, KvOp, KvStatus, OpLayout, ResultLayout } from '../protocol/constants.js';
import {
  KvAuthError,
  KvDisconnectedError,
  KvError,
  KvKeyTooLargeError,
  KvOutOfMemoryError,
  KvProtocolError,
  KvTimeoutError,
  KvValueTooLargeError,
  KvInvalidArgumentError,
  errorForStatus,
} from '../protocol/errors.js';
import { type Hello, RETURN_BATCH, decode, encode, grantBatch } from '../protocol/control.js';
import { RejectReason, connectData } from '../protocol/connect.js';
import { classFor, itemUnits } from '../protocol/size-classes.js';
import { createRequire } from 'node:module';
import { describe, text, toBuffer } from './keys.js';
import type { HistoryEvent, KvClientOptions, KvStatusName, Value } from './types.js';
import { fileURLToPath } from 'node:url';

type NativeCore = {
  submit(count: number): number;
  poll(): number;
  failAll(status: number): void;
  readonly inflight: number;
  readonly doorbells: number;
  readonly opWords: Uint32Array;
  readonly resultWords: Uint32Array;
  readonly arena: Buffer;
  readonly scratch: Buffer;
};
const addon = createRequire(import.meta.url)('node-gyp-build')(fileURLToPath(new URL('../..', import.meta.url))) as {
  ClientCore: new (provider: unknown, connection: unknown, cq: unknown, region: object, options: object) => NativeCore;
};

/** What a ServerClient needs: KvClientOptions' per-server part, and one URL. */
export interface ServerClientOptions extends Omit<KvClientOptions, 'url' | 'servers' | 'etcd' | 'history' | 'metrics'> {
  url: string;
  /** The cluster's recorder: one history, ids unique across servers. */
  recorder?: HistoryRecorder;
}

export interface HistoryRecorder {
  record(event: HistoryEvent): void;
  nextId(): number;
}

/** One operation's outcome, as the native core reports it. */
export interface OpResult {
  status: number;
  value?: Buffer;
  version: bigint;
  /** Times the core retried (bucket locks busy, torn reads). */
  retries: number;
}

interface PendingOp {
  type: KvOp;
  key: Buffer;
  value?: Buffer;
  arg: bigint; // CAS: expected version; INCR: delta; LOCK: timeout ms; UNLOCK: token
  cls: number; // PUT, CAS, INCR, LOCK: block class
  deadline: number;
  resolve: (result: OpResult) => void;
  reject: (error: Error) => void;
  block?: number;
  /** CAS and UNLOCK: a version mismatch is an answer, not an error. */
  mismatchResolves?: boolean;
  /** Handed to the core: from here on it may take effect (history: a failure is not "never sent"). */
  sent?: boolean;
}

const CONTROL_TAG = 2 ** KvLayout.CONTROL_TAG_SHIFT;
const CONTROL_RECVS = 16;
/** Send buffers, used in turn: a burst of sends (a reclaim's answer) must not wrap onto one the NIC may still read. */
const CONTROL_SENDS = 32;
/** Most `return` messages answering one reclaim (the biggest pools first). */
const RECLAIM_ANSWER_MESSAGES = 16;
const ARENA_BYTES = 4 << 20;
/** How long flush() polls before leaving the rest to the event loop (busy mode). */
const SPIN_MS = 0.02;
/** Flushes per event-loop turn that may spin (see spin()). */
const SPINS_PER_TURN = 256;

/** One connection to one server: transport objects, native core, block pools. */
class Session {
  readonly provider: Provider;
  readonly cq: CompletionQueue;
  connection!: Connection;
  core!: NativeCore;
  hello!: Hello;
  // The core's buffers, viewed once: each accessor call makes a new external
  // ArrayBuffer, which per operation would be garbage V8 must collect.
  opWords!: Uint32Array;
  resultWords!: Uint32Array;
  arena!: Buffer;
  scratch!: Buffer;
  private readonly control: MemoryRegion;
  private sends = 0;
  /** Granted blocks by class. */
  readonly pools: number[][] = [];
  /** Blocks one grant asks for, by class (sized by bytes: grantBatch). */
  readonly batches: number[] = [];
  readonly granting = new Set<number>();

  constructor(scheme: 'shm' | 'rdma') {
    this.provider = new Provider(scheme);
    this.cq = this.provider.createCq(1024);
    this.control = this.provider.allocate((CONTROL_RECVS + CONTROL_SENDS) * KvLayout.CONTROL_RECV_BYTES, Access.LOCAL_WRITE);
  }

  recv(index: number) {
    return { wrId: CONTROL_TAG + index, local: this.control, localOffset: index * KvLayout.CONTROL_RECV_BYTES, length: KvLayout.CONTROL_RECV_BYTES };
  }

  message(index: number, length: number): ReturnType<typeof decode> {
    const offset = index * KvLayout.CONTROL_RECV_BYTES;
    return decode(this.control.bytes.subarray(offset, offset + length));
  }

  async open(options: ServerClientOptions, timeoutMs: number): Promise<void> {
    const initialRecvs = Array.from({ length: CONTROL_RECVS }, (_, i) => this.recv(i));
    try {
      this.connection = await this.provider.connect(options.url, {
        cq: this.cq,
        initialRecvs,
        privateData: connectData(options.token),
        timeoutMs,
        sendDepth: 1024,
        recvDepth: CONTROL_RECVS + 4,
      });
    } catch (error) {
      if (error instanceof TransportError && error.code === 'REJECTED') {
        const reason = error.privateData?.[0];
        if (reason === RejectReason.AUTH) throw new KvAuthError(`${options.url}: the server rejected the token`);
        if (reason === RejectReason.VERSION) {
          const theirs = error.privateData?.[1]; // servers since v2 say which version they speak
          throw new KvProtocolError(
            `${options.url}: the server speaks protocol version ${theirs ?? 'other than ' + KvLayout.PROTOCOL_VERSION}, this client ${KvLayout.PROTOCOL_VERSION}: upgrade the older side`,
          );
        }
        throw new KvDisconnectedError(`${options.url}: the server refused the connection (${reason === RejectReason.FULL ? 'no free client slot' : 'rejected'})`);
      }
      const why = (error as Error).message;
      throw new KvDisconnectedError(why.includes(options.url) ? why : `cannot connect to ${options.url}: ${why}`);
    }
    // The hello is the server's first message.
    const [wc] = await this.cq.take(1, { timeoutMs });
    if (!wc || wc.statusName !== 'SUCCESS' || wc.opcode !== Opcode.RECV) {
      throw new KvDisconnectedError(`${options.url}: no hello from the server (${wc?.statusName ?? 'nothing'})`);
    }
    const index = wc.wrId - CONTROL_TAG;
    const hello = this.message(index, wc.byteLen);
    if (hello.t !== 'hello' || hello.v !== KvLayout.PROTOCOL_VERSION) throw new KvProtocolError(`${options.url}: unexpected first message`);
    this.hello = hello;
    this.connection.postRecv([this.recv(index)]);
    const { region, layout } = hello;
    this.core = new addon.ClientCore(
      this.provider.native,
      this.connection.native,
      this.cq.native,
      {
        addr: region.addr,
        rkey: region.rkey,
        length: region.length,
        bucketCount: layout.bucketCount,
        indexOffset: layout.indexOffset,
        heapOffset: layout.heapOffset,
        heapBytes: layout.heapBytes,
        seed: layout.seed,
        ringOffset: layout.ringOffset,
        clientId: hello.clientId,
        versionBase: hello.versionBase,
        maxValueBytes: layout.maxValueBytes,
        graceMs: hello.graceMs,
      },
      { scratchBytes: options.scratchBytes ?? 16 << 20, opTimeoutMs: timeoutMs, arenaBytes: ARENA_BYTES + layout.maxValueBytes + KvLayout.MAX_KEY_BYTES },
    );
    this.opWords = this.core.opWords;
    this.resultWords = this.core.resultWords;
    this.arena = this.core.arena;
    this.scratch = this.core.scratch;
    for (const units of layout.classes) {
      this.pools.push([]);
      this.batches.push(grantBatch(units * KvLayout.UNIT_BYTES, Number(layout.heapBytes)));
    }
  }

  sendControl(message: Parameters<typeof encode>[0]): void {
    const bytes = encode(message);
    const index = CONTROL_RECVS + (this.sends++ % CONTROL_SENDS);
    bytes.copy(this.control.bytes, index * KvLayout.CONTROL_RECV_BYTES);
    this.connection.postSend([
      { wrId: CONTROL_TAG + index, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: this.control, localOffset: index * KvLayout.CONTROL_RECV_BYTES, length: bytes.length },
    ]);
  }

  /**
   * The server is short of memory: the blocks in the pools go back, except, per class, as
   * many as queued ops wait for (`needed`; taking those would starve them: a grant that just
   * arrived for them would go straight back). The biggest pools first, in at most
   * RECLAIM_ANSWER_MESSAGES returns, the last marked end.
   */
  answerReclaim(needed: ReadonlyMap<number, number>): void {
    const returns: Array<{ c: number; blocks: number[] }> = [];
    const spare = this.pools.map((pool, c) => ({ c, count: Math.max(0, pool.length - (needed.get(c) ?? 0)) }));
    spare.sort((a, b) => b.count * this.hello.layout.classes[b.c]! - a.count * this.hello.layout.classes[a.c]!);
    for (let { c, count } of spare) {
      const pool = this.pools[c]!;
      while (count > 0 && returns.length < RECLAIM_ANSWER_MESSAGES) {
        const blocks = pool.splice(-Math.min(count, RETURN_BATCH));
        count -= blocks.length;
        returns.push({ c, blocks });
      }
    }
    if (returns.length === 0) returns.push({ c: 0, blocks: [] });
    returns.forEach(({ c, blocks }, i) => this.sendControl(i === returns.length - 1 ? { t: 'return', c, blocks, end: true } : { t: 'return', c, blocks }));
  }

  close(): void {
    try {
      // Blocks we were granted and never used go back before we leave.
      this.pools.forEach((blocks, c) => {
        for (let i = 0; i < blocks.length; i += RETURN_BATCH) this.sendControl({ t: 'return', c, blocks: blocks.slice(i, i + RETURN_BATCH) });
      });
    } catch {
      // the connection is already gone
    }
    this.connection?.disconnect();
    this.provider.close();
  }
}

type ClientEvents = {
  status: [status: KvStatusName];
  error: [error: Error];
};

export class ServerClient extends EventEmitter<ClientEvents> {
  private session: Session | undefined;
  private _status: KvStatusName = 'connecting';
  private readonly queue: PendingOp[] = [];
  private readonly inflight = new Map<number, PendingOp>();
  private nextId = 1;
  private flushScheduled = false;
  private polling = false;
  private readonly timeoutMs: number;
  private readonly pollMode: 'busy' | 'event';
  private timer: NodeJS.Timeout | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private lastPong = 0;
  private closing: Promise<void> | undefined;
  private readonly recorder: HistoryRecorder | undefined;
  /** core.submit calls: one doorbell each (for tests and metrics). */
  submits = 0;
  private spinsLeft = SPINS_PER_TURN;

  constructor(readonly options: ServerClientOptions) {
    super();
    this.timeoutMs = Math.ceil(options.timeoutMs ?? 5000); // the transport takes whole ms
    this.pollMode = options.pollMode ?? 'busy';
    this.recorder = options.recorder;
  }

  get url(): string {
    return this.options.url;
  }

  /** Connects once; rejects with why not. */
  async start(): Promise<void> {
    await this.establish();
  }

  /**
   * After a failed start: keep trying in the background (status
   * 'reconnecting'), as after losing an established connection.
   */
  keepTrying(): void {
    if (this._status === 'closed' || this._status === 'ready') return;
    this.setStatus('reconnecting');
    this.scheduleReconnect(1);
  }

  /** The server is (back) at its address: try now rather than at the next backoff step. */
  reconnectNow(): void {
    if (this._status !== 'reconnecting') return;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    this.scheduleReconnect(0);
  }

  get status(): KvStatusName {
    return this._status;
  }

  /** The largest value the server accepts, in bytes (undefined before the first hello). */
  get maxValueBytes(): number | undefined {
    return this.hello?.layout.maxValueBytes;
  }

  /** post_send calls by the native core of the current connection. */
  get doorbells(): number {
    return this.session?.core.doorbells ?? 0;
  }

  private hello: Hello | undefined;

  private setStatus(status: KvStatusName): void {
    if (this._status === status) return;
    this._status = status;
    this.emit('status', status);
  }

  private async establish(): Promise<void> {
    const scheme = this.options.url.startsWith('rdma://') ? 'rdma' : this.options.url.startsWith('shm://') ? 'shm' : undefined;
    if (!scheme) throw new KvInvalidArgumentError(`unknown URL '${this.options.url}': expected shm:///path or rdma://host:port`);
    let session: Session;
    try {
      session = new Session(scheme);
    } catch (error) {
      throw providerError(this.options.url, error);
    }
    try {
      await session.open(this.options, this.timeoutMs);
    } catch (error) {
      session.provider.close();
      throw providerError(this.options.url, error);
    }
    this.session = session;
    this.hello = session.hello;
    session.connection.once('disconnected', (reason) => this.lost(session, reason));
    if (this.pollMode === 'event') {
      session.cq.watch(() => this.pollOnce(true));
      session.cq.arm();
    }
    this.startKeepalive(session);
    this.setStatus('ready');
  }

  // ---- operations ----------------------------------------------------------------------

  /**
   * Queues one operation for the next flush. The key and value are checked
   * here: their limits are the server's. CAS and UNLOCK resolve a version
   * mismatch (it is an answer); every other failure rejects with a KvError.
   */
  submit(type: KvOp, keyBytes: Buffer, value?: Value, arg = 0n, mismatchResolves = false): Promise<OpResult> {
    if (this._status === 'closed') return Promise.reject(new KvDisconnectedError('the client is closed'));
    if (this._status !== 'ready' || !this.session) return Promise.reject(new KvDisconnectedError(`not connected to ${this.options.url} (${this._status})`));
    if (keyBytes.length > KvLayout.MAX_KEY_BYTES) {
      return Promise.reject(new KvKeyTooLargeError(`key of ${keyBytes.length} bytes: the limit is ${KvLayout.MAX_KEY_BYTES}`));
    }
    let cls = -1;
    let valueBytes: Buffer | undefined;
    if (type === KvOp.PUT || type === KvOp.CAS) {
      try {
        valueBytes = toBuffer(value, 'value');
      } catch (error) {
        return Promise.reject(error);
      }
      const max = this.session.hello.layout.maxValueBytes;
      if (valueBytes.length > max) return Promise.reject(new KvValueTooLargeError(`value of ${valueBytes.length} bytes: the limit is ${max}`));
      cls = classFor(this.session.hello.layout.classes, itemUnits(keyBytes.length, valueBytes.length));
    } else if (type === KvOp.INCR || type === KvOp.LOCK) {
      cls = classFor(this.session.hello.layout.classes, itemUnits(keyBytes.length, 0)); // in case it must be created
    }
    if (this.recorder) return this.recorded(type, keyBytes, valueBytes, arg, cls, mismatchResolves);
    return new Promise((resolve, reject) => {
      const op: PendingOp = { type, key: keyBytes, arg, cls, deadline: performance.now() + this.timeoutMs, resolve, reject };
      if (mismatchResolves) op.mismatchResolves = true;
      if (valueBytes) op.value = valueBytes;
      this.queue.push(op);
      this.scheduleFlush();
    });
  }

  /** submit() with each invocation and completion written to the history. */
  private recorded(type: KvOp, key: Buffer, value: Buffer | undefined, arg: bigint, cls: number, mismatchResolves: boolean) {
    const recorder = this.recorder!;
    const record = (event: HistoryEvent) => recorder.record(event);
    const id = recorder.nextId();
    const f = (opNames[type] ?? 'op') as HistoryEvent['f'];
    const base = { id, f, key: text(key) };
    const invoke: HistoryEvent = { ...base, type: 'invoke', time: process.hrtime.bigint().toString() };
    if (value) invoke.value = text(value);
    if (type === KvOp.CAS) invoke.expected = arg.toString();
    if (type === KvOp.INCR) invoke.delta = arg.toString();
    record(invoke);
    return new Promise<OpResult>((resolve, reject) => {
      const op: PendingOp = {
        type, key, arg, cls, deadline: performance.now() + this.timeoutMs,
        resolve: (r) => {
          const done: HistoryEvent = { ...base, type: 'ok', time: process.hrtime.bigint().toString() };
          if (type === KvOp.GET) {
            done.value = r.value ? text(r.value) : null;
            if (r.value) done.version = r.version.toString();
          } else if (type === KvOp.DELETE || type === KvOp.CAS) {
            done.value = r.status === KvStatus.OK;
          } else if (type === KvOp.INCR) {
            done.value = r.version.toString();
          }
          // The version written, or the fencing token: a checker need not infer them.
          if ((type === KvOp.PUT || type === KvOp.CAS || type === KvOp.LOCK) && r.status === KvStatus.OK) done.version = r.version.toString();
          record(done);
          resolve(r);
        },
        reject: (error) => {
          const failed: HistoryEvent = { ...base, type: 'fail', error: (error as KvError).code ?? error.message, time: process.hrtime.bigint().toString() };
          if (!op.sent) failed.sent = false; // failed in the queue: it cannot have happened
          record(failed);
          reject(error);
        },
      };
      if (value) op.value = value;
      if (mismatchResolves) op.mismatchResolves = true;
      this.queue.push(op);
      this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    queueMicrotask(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  /** Submits what fits (slots, scratch, granted blocks) with one crossing. */
  private flush(): void {
    const session = this.session;
    if (!session || this.queue.length === 0) return;
    const { core } = session;
    const words = session.opWords;
    const arena = session.arena;
    let count = 0;
    let arenaUsed = 0;
    const batch: PendingOp[] = [];
    const waiting: PendingOp[] = [];
    const capacity = KvLayout.MAX_INFLIGHT - core.inflight;
    while (this.queue.length > 0 && count < capacity) {
      const op = this.queue[0]!;
      const bytes = op.key.length + (op.value?.length ?? 0);
      if (arenaUsed + bytes > arena.length) break;
      this.queue.shift();
      if (op.cls >= 0) {
        const pool = session.pools[op.cls]!;
        if (pool.length < session.batches[op.cls]! / 4) this.requestBlocks(session, op.cls); // a batch of one: when empty
        if (pool.length === 0) {
          waiting.push(op); // until the grant arrives
          continue;
        }
        op.block = pool.pop()!;
      }
      const id = this.nextId;
      this.nextId = id >= 0xfffffffe ? 1 : id + 1; // 0xffffffff marks control results
      const o = count * OpLayout.WORDS;
      words[o + OpLayout.TYPE] = op.type;
      words[o + OpLayout.ID] = id;
      words[o + OpLayout.KEY_OFFSET] = arenaUsed;
      words[o + OpLayout.KEY_LEN] = op.key.length;
      op.key.copy(arena, arenaUsed);
      arenaUsed += op.key.length;
      words[o + OpLayout.VALUE_OFFSET] = arenaUsed;
      words[o + OpLayout.VALUE_LEN] = op.value?.length ?? 0;
      if (op.value) {
        op.value.copy(arena, arenaUsed);
        arenaUsed += op.value.length;
      }
      words[o + OpLayout.BLOCK] = op.block ?? 0;
      words[o + OpLayout.BLOCK_UNITS] = op.cls >= 0 ? session.hello.layout.classes[op.cls]! : 0;
      words[o + OpLayout.ARG_LO] = Number(op.arg & 0xffffffffn);
      words[o + OpLayout.ARG_HI] = Number(op.arg >> 32n);
      this.inflight.set(id, op);
      batch.push(op);
      count++;
    }
    let taken = 0;
    if (count > 0) {
      taken = core.submit(count);
      this.submits++;
      for (let i = 0; i < taken; i++) batch[i]!.sent = true;
    }
    // What the core could not take goes back to the front, in order.
    for (let i = batch.length - 1; i >= taken; i--) {
      const op = batch[i]!;
      this.inflight.delete(words[i * OpLayout.WORDS + OpLayout.ID]!);
      if (op.block !== undefined) {
        session.pools[op.cls]!.push(op.block);
        delete op.block;
      }
      this.queue.unshift(op);
    }
    this.queue.unshift(...waiting);
    if (taken > 0 && this.pollMode === 'busy' && this.spinsLeft > 0) this.spin(session);
    this.startPolling();
    this.armTimer();
  }

  /**
   * Polls right after posting, for a few microseconds: a round trip often
   * completes within that (at once on shm, ~2 µs on a NIC), and finishing
   * here saves a turn of the event loop, which costs more than the trip.
   */
  private spin(session: Session): void {
    // A caller that issues its next op as each one resolves would otherwise
    // chain microtasks forever: timers (keepalive, deadlines) and I/O starve.
    // So only SPINS_PER_TURN flushes per event-loop turn spin.
    if (this.spinsLeft-- === SPINS_PER_TURN) {
      setImmediate(() => {
        this.spinsLeft = SPINS_PER_TURN;
      });
    }
    const end = performance.now() + SPIN_MS;
    do {
      const n = session.core.poll();
      if (n > 0) this.onResults(session, n);
    } while (this.session === session && this.inflight.size > 0 && performance.now() < end);
  }

  private requestBlocks(session: Session, cls: number): void {
    if (session.granting.has(cls)) return;
    session.granting.add(cls);
    session.sendControl({ t: 'grant', c: cls, n: session.batches[cls]! });
  }

  // ---- completions ---------------------------------------------------------------------

  private startPolling(): void {
    if (this.polling || this.pollMode === 'event') return;
    this.polling = true;
    const loop = () => {
      this.pollOnce(false);
      // Queued ops count too: the spin in flush() may finish a whole batch, leaving nothing in flight.
      if (this.session && (this.inflight.size > 0 || this.session.granting.size > 0 || this.queue.length > 0)) setImmediate(loop);
      else this.polling = false;
    };
    setImmediate(loop);
  }

  private pollOnce(fromEvent: boolean): void {
    const session = this.session;
    if (!session) return;
    for (let round = 0; round < (fromEvent ? 2 : 1); round++) {
      for (;;) {
        const n = session.core.poll();
        if (n === 0) break;
        this.onResults(session, n);
      }
      if (fromEvent && round === 0) session.cq.arm();
    }
    if (this.queue.length > 0) this.flush();
  }

  private onResults(session: Session, n: number): void {
    const words = session.resultWords;
    const scratch = session.scratch;
    for (let i = 0; i < n; i++) {
      const o = i * ResultLayout.WORDS;
      const id = words[o + ResultLayout.ID]!;
      const status = words[o + ResultLayout.STATUS]!;
      if (id === 0xffffffff) {
        this.onControl(session, words[o + ResultLayout.VALUE_OFFSET]!, words[o + ResultLayout.VALUE_LEN]!, status, words[o + ResultLayout.DETAIL]!);
        continue;
      }
      const op = this.inflight.get(id);
      if (!op) continue;
      this.inflight.delete(id);
      if (words[o + ResultLayout.BLOCK_UNUSED] && op.block !== undefined) session.pools[op.cls]!.push(op.block);
      const version = BigInt(words[o + ResultLayout.VERSION_LO]!) | (BigInt(words[o + ResultLayout.VERSION_HI]!) << 32n);
      const retries = words[o + ResultLayout.DETAIL]!;
      if (status === KvStatus.OK || status === KvStatus.NOT_FOUND || (status === KvStatus.VERSION_MISMATCH && op.mismatchResolves)) {
        let value: Buffer | undefined;
        if (op.type === KvOp.GET && status === KvStatus.OK) {
          const at = words[o + ResultLayout.VALUE_OFFSET]!;
          value = Buffer.from(scratch.subarray(at, at + words[o + ResultLayout.VALUE_LEN]!)); // a copy: scratch is reused
        }
        op.resolve(value ? { status, value, version, retries } : { status, version, retries });
      } else {
        op.reject(errorForStatus(status, words[o + ResultLayout.DETAIL]!, `${opNames[op.type] ?? 'op'} ${describe(op.key)}`));
      }
    }
  }

  private onControl(session: Session, index: number, length: number, wcStatus: number, opcode: number): void {
    if (opcode !== Opcode.RECV) return; // our own SENDs completing
    if (wcStatus !== 0) return; // flushed: the connection is going away
    let message;
    try {
      message = session.message(index, length);
    } catch (error) {
      this.emit('error', new KvProtocolError(`malformed control message from the server: ${(error as Error).message}`));
      session.connection.postRecv([session.recv(index)]);
      return;
    }
    session.connection.postRecv([session.recv(index)]);
    if (message.t === 'pong') {
      this.lastPong = performance.now();
      return;
    }
    if (message.t === 'reclaim') {
      const needed = new Map<number, number>(); // blocks by class the queued ops wait for
      for (const op of this.queue) if (op.cls >= 0) needed.set(op.cls, (needed.get(op.cls) ?? 0) + 1);
      try {
        session.answerReclaim(needed);
      } catch {
        // the connection is going away
      }
      return;
    }
    if (message.t === 'granted') {
      session.granting.delete(message.c);
      const pool = session.pools[message.c];
      if (!pool) return;
      pool.push(...message.blocks);
      if (message.blocks.length === 0) {
        // Nothing left of that size: PUTs waiting for it fail now.
        const error = new KvOutOfMemoryError(`the server has no free block of ${session.hello.layout.classes[message.c]! * 64} bytes`);
        for (let i = this.queue.length - 1; i >= 0; i--) {
          const op = this.queue[i]!;
          if (op.cls === message.c) {
            this.queue.splice(i, 1);
            op.reject(error);
          }
        }
      }
      // Not flush(): we are inside onResults, and flush polls, which would
      // overwrite the result words the caller is still reading.
      this.scheduleFlush();
    }
  }

  /** Fails queued ops whose deadline passed (a grant that never came, a stuck server). */
  private armTimer(): void {
    if (this.timer || this.queue.length === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const now = performance.now();
      for (let i = this.queue.length - 1; i >= 0; i--) {
        const op = this.queue[i]!;
        if (op.deadline <= now) {
          this.queue.splice(i, 1);
          op.reject(new KvTimeoutError(`${describe(op.key)}: not started within ${this.timeoutMs} ms`));
        }
      }
      this.armTimer();
    }, 100);
    this.timer.unref();
  }

  // ---- keepalive, connection loss and close --------------------------------------------------

  /**
   * RDMA has no keepalive of its own: ping every interval the server gave;
   * three intervals without a pong and the server is taken for lost.
   */
  private startKeepalive(session: Session): void {
    const interval = session.hello.keepaliveMs;
    this.lastPong = performance.now();
    if (this.keepaliveTimer) clearInterval(this.keepaliveTimer);
    this.keepaliveTimer = setInterval(() => {
      if (this.session !== session) return;
      this.pollOnce(false); // an idle busy-mode client polls nowhere else: pongs and SEND completions land here
      if (this.session !== session) return;
      if (performance.now() - this.lastPong > 3 * interval) return this.lost(session, `no keepalive answer for ${3 * interval} ms`);
      try {
        session.sendControl({ t: 'ping' });
      } catch (error) {
        this.lost(session, (error as Error).message);
      }
    }, interval);
    this.keepaliveTimer.unref();
  }

  private lost(session: Session, reason: string): void {
    if (this.session !== session) return;
    // Finish everything the core holds, then the rest of the queue.
    session.core.failAll(KvStatus.DISCONNECTED);
    this.onResults(session, session.core.poll());
    for (const op of this.inflight.values()) op.reject(new KvDisconnectedError(`lost the server: ${reason}`));
    this.inflight.clear();
    for (const op of this.queue.splice(0)) op.reject(new KvDisconnectedError(`lost the server: ${reason}`));
    session.cq.unwatch();
    session.provider.close();
    this.session = undefined;
    if (this._status === 'closed') return;
    if (this.options.reconnect === false) {
      this.setStatus('closed');
      return;
    }
    this.setStatus('reconnecting');
    this.scheduleReconnect(1);
  }

  private scheduleReconnect(attempt: number): void {
    const delay = Math.min(2000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this._status !== 'reconnecting') return;
      this.establish().catch(() => {
        if (this._status === 'reconnecting') this.scheduleReconnect(attempt + 1);
      });
    }, delay);
  }

  /** Waits for operations in flight, gives unused blocks back, disconnects. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    const wasReady = this._status === 'ready';
    this.setStatus('closed');
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    if (this.keepaliveTimer) clearInterval(this.keepaliveTimer);
    if (this.timer) clearTimeout(this.timer);
    for (const op of this.queue.splice(0)) op.reject(new KvDisconnectedError('the client was closed'));
    const session = this.session;
    if (!session) return;
    // In-flight ops may hold bucket locks: let them finish rather than abandon them.
    const deadline = performance.now() + this.timeoutMs;
    while (wasReady && this.inflight.size > 0 && performance.now() < deadline) {
      this.pollOnce(false);
      await new Promise((resolve) => setImmediate(resolve));
    }
    for (const op of this.inflight.values()) op.reject(new KvDisconnectedError('the client was closed'));
    this.inflight.clear();
    this.session = undefined;
    session.cq.unwatch();
    session.close();
  }
}

/**
 * A failed connection attempt as a KvError. A provider that cannot be had
 * (rdma:// on a build without verbs, or on a host without an RDMA device) is
 * configuration, not a lost server; anything else not already a KvError
 * (a native allocation that failed, say) counts as a failed connect.
 */
function providerError(url: string, error: unknown): Error {
  if (error instanceof KvError) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof TransportError && error.code === 'ERR_RKV_PROVIDER') return new KvInvalidArgumentError(`${url}: ${message}`);
  return new KvDisconnectedError(`cannot connect to ${url}: ${message}`);
}

const opNames: Record<number, string> = {
  [KvOp.GET]: 'get', [KvOp.PUT]: 'put', [KvOp.DELETE]: 'delete', [KvOp.CAS]: 'cas',
  [KvOp.INCR]: 'incr', [KvOp.LOCK]: 'lock', [KvOp.UNLOCK]: 'unlock',
};

export { KvError };
