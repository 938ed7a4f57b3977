// One server's client, for as long as the KvClient wants that server: its
// data path. The checks an operation passes before it is queued (its limits
// are the server's), GETs and PUTs one at a time or as batches, and a replica
// set's view (withBackups) whose writes also name its backups. The connection
// under it (status, reconnects, a Session per connection, control messages)
// is its ServerLink's (server-link.ts). The operations themselves run in the
// op queue of the session's host, shared with the KvClient's other servers
// (core-host.ts). KvClient routes keys to these.
import { Buffer } from 'node:buffer'; // the global Buffer is a getter: a call per use
import { EventEmitter } from 'node:events';

import { KvLayout, KvOp, KvStatus } from '../protocol/constants.js';
import { KvDisconnectedError, type KvError, KvInvalidArgumentError, KvKeyTooLargeError, KvValueTooLargeError } from '../protocol/errors.js';
import { classFor, itemUnits } from '../protocol/size-classes.js';
import { type HistoryRecorder, recorded } from './history.js';
import { measureKey, toBuffer } from './keys.js';
import { roleRefusal } from './roles.js';
import { type ExtRef, extOf, freedError, holding, withBounce } from './large-values.js';
import { Answer, Batch, type Bytes, type OpQueue, type OpResult } from './op-queue.js';
import { PendingOp } from './op-records.js';
import { ServerLink, type ServerLinkOptions } from './server-link.js';
import type { Session } from './session.js';
import type { KvStatusName, Value, VersionedValue } from './types.js';

export type { HistoryRecorder } from './history.js';
export type { Bytes, OpResult } from './op-queue.js';

/** What a ServerClient needs: KvClientOptions' per-server part, and one URL. */
export interface ServerClientOptions extends ServerLinkOptions {
  /** The cluster's recorder: one history, ids unique across servers. */
  recorder?: HistoryRecorder;
}

type ClientEvents = {
  status: [status: KvStatusName];
  error: [error: Error];
};

export class ServerClient extends EventEmitter<ClientEvents> {
  /** The connection: this client's own, and its views' through their prototype (one session, one status for all). */
  private readonly link: ServerLink;
  /** A replica set's view (withBackups): the servers its PUT, DELETE and CAS also write, or why its writes cannot go. */
  private backups: readonly ServerClient[] = [];
  private backupsMissing: KvError | undefined;
  /** A replica set's view: the epoch of its hash slots in the config it came from, carried by its writes (0: none). */
  private epoch = 0;

  constructor(readonly options: ServerClientOptions) {
    super();
    this.link = new ServerLink(options, { status: (status) => this.emit('status', status), error: (error) => this.emit('error', error) });
  }

  get url(): string {
    return this.options.url;
  }

  get status(): KvStatusName {
    return this.link.status;
  }

  /** The connection's session while it is up (the link's): the data path queues its ops on it. */
  private get session(): Session | undefined {
    return this.link.session;
  }

  /** core.submit calls of its host's queue (every server of the provider's: a batch over them is one) (for tests and metrics). */
  get submits(): number {
    return this.link.host?.queue.submits ?? 0;
  }

  /** Ops waiting out a backoff (a held lock, a full ring), in its host's core. */
  get backoffs(): number {
    return this.link.host?.queue.backoffs ?? 0;
  }

  /** The largest value the server accepts, in bytes (undefined before the first hello). */
  get maxValueBytes(): number | undefined {
    return this.link.hello?.layout.maxValueBytes;
  }

  /** post_send calls by its host's cores so far. */
  get doorbells(): number {
    return this.link.host?.doorbells ?? 0;
  }

  /**
   * This server as the primary of a replica set (docs/replication-design.md, scheme A): a view whose writes also lock and
   * write `backups`, committing there first, and carry `epoch`. Its prototype is this client, so it follows its connection.
   */
  withBackups(backups: readonly ServerClient[], missing?: KvError, epoch = 0): ServerClient {
    const view = Object.create(this) as ServerClient;
    view.backups = backups;
    view.backupsMissing = missing;
    view.epoch = epoch;
    return view;
  }

  /** A replica set's view (withBackups), even one left with its primary alone after a failover: writes carry its epoch, one key per op. */
  private get replicated(): boolean {
    return this.epoch !== 0 || this.backups.length > 0 || this.backupsMissing !== undefined;
  }

  /** Connects once; rejects with why not. */
  start(): Promise<void> {
    return this.link.start();
  }

  /** After a failed start: keep trying in the background (status 'reconnecting'), as after losing an established connection. */
  keepTrying(): void {
    this.link.keepTrying();
  }

  /** The server is (back) at its address: try now rather than at the next backoff step. */
  reconnectNow(): void {
    this.link.reconnectNow();
  }

  /**
   * Queues one operation for the next flush. The key and value are checked
   * here: their limits are the server's. CAS and UNLOCK resolve a version
   * mismatch (it is an answer); every other failure rejects with a KvError.
   * `expiry`: a PUT's or CAS's item expiry (absolute Unix ms, 0 = never). `keepVersion`: a CAS's new item keeps the expected version.
   */
  submit(type: KvOp, key: Bytes, value?: Value, arg = 0n, mismatchResolves = false, expiry = 0, keepVersion = false): Promise<OpResult> {
    return this.request(type, key, value, arg, mismatchResolves, Answer.FULL, undefined, expiry, keepVersion) as Promise<OpResult>;
  }

  /** A GET with the full answer (value, version, expiry) into a registered buffer: the value stays there, `value` is absent. */
  getFullInto(key: Bytes, ext: ExtRef): Promise<OpResult> {
    return holding(ext, () => this.request(KvOp.GET, key, undefined, 0n, false, Answer.FULL, ext) as Promise<OpResult>);
  }

  /** A GET that resolves the value (or undefined): no result object, no version. */
  getValue(key: Bytes): Promise<Buffer | undefined> {
    return this.request(KvOp.GET, key, undefined, 0n, false, Answer.VALUE) as Promise<Buffer | undefined>;
  }

  /** A GET that resolves `{ value, version }` (or undefined), without the full result object. */
  getVersioned(key: Bytes): Promise<VersionedValue | undefined> {
    return this.request(KvOp.GET, key, undefined, 0n, false, Answer.VERSIONED) as Promise<VersionedValue | undefined>;
  }

  /** A CAS that resolves whether it wrote (a version mismatch: false). */
  casApplied(key: Bytes, expectedVersion: bigint, value: Value): Promise<boolean> {
    return this.request(KvOp.CAS, key, value, expectedVersion, true, Answer.APPLIED) as Promise<boolean>;
  }

  /**
   * A GET into `buffer` (large-values.ts): the value's length, or undefined when the key does not exist. A
   * registered buffer's bytes are READ straight into it. A plain Buffer's are copied into it out of scratch (one copy,
   * nothing allocated), or, for a buffer larger than scratch holds, out of a registered bounce buffer.
   */
  getInto(key: Bytes, buffer: Buffer): Promise<number | undefined> {
    if (!Buffer.isBuffer(buffer)) return Promise.reject(new KvInvalidArgumentError('getInto: the buffer must be a Buffer'));
    const ext = extOf(buffer);
    if (ext === 'freed') return Promise.reject(freedError('getInto'));
    if (ext) return holding(ext, () => this.request(KvOp.GET, key, undefined, 0n, false, Answer.LENGTH, ext) as Promise<number | undefined>);
    // Any item whose value this buffer can take fits scratch, whatever its key: the value is copied out of scratch into
    // the buffer, as get()'s into a new one (a longer value: KV_BUFFER_TOO_SMALL, as for a registered buffer).
    const session = this.session;
    if (session === undefined || KvLayout.ITEM_HEADER_BYTES + KvLayout.MAX_KEY_BYTES + buffer.length <= session.itemLimit) { // (no session: request() refuses)
      return this.request(KvOp.GET, key, undefined, 0n, false, Answer.LENGTH, undefined, 0, false, buffer) as Promise<number | undefined>;
    }
    return withBounce(buffer.length, async (bounce) => {
      const len = (await this.getInto(key, bounce.subarray(0, buffer.length))) as number | undefined;
      if (len !== undefined) bounce.copy(buffer, 0, 0, len);
      return len;
    });
  }

  /** get() of a value larger than the core's scratch holds: through a registered buffer of its size, then one copy. */
  getLarge(key: Bytes, needed: number): Promise<Buffer | undefined> {
    return withBounce(needed, async (bounce) => {
      const len = await this.getInto(key, bounce);
      return len === undefined ? undefined : Buffer.from(bounce.subarray(0, len));
    });
  }

  /** A PUT that resolves undefined; `expiry` as submit's. */
  putValue(key: Bytes, value: Value, expiry = 0): Promise<void> {
    return this.request(KvOp.PUT, key, value, 0n, false, Answer.NONE, undefined, expiry) as Promise<void>;
  }

  /**
   * Many GETs as one batch: one promise, values as views of one Buffer per hand-out. `out[positions[i]]`
   * (default `out[i]`) gets key i's value or stays undefined. Every key is checked before anything is queued.
   */
  getMany(keys: Bytes[], out: Array<Buffer | undefined>, positions?: Int32Array): Promise<unknown> {
    const refused = this.refusal();
    if (refused) return Promise.reject(refused);
    const keyBytes = new Int32Array(keys.length);
    for (let i = 0; i < keys.length; i++) {
      const tooLarge = measureKey(keys[i]!, keyBytes, i);
      if (tooLarge) return Promise.reject(tooLarge);
    }
    const batch = new Batch(KvOp.GET, keys, keyBytes, undefined, undefined, undefined, out, positions);
    this.session!.host.queue.addBatch(this.session!, batch);
    return batch.promise;
  }

  /** Many PUTs as one batch (one promise); every entry is checked before anything is queued. `expiries` as Batch's. */
  putMany(keys: Bytes[], values: Bytes[], expiries?: Float64Array): Promise<unknown> {
    const refused = this.refusal(KvOp.PUT);
    if (refused) return Promise.reject(refused);
    // Replicated: each key a PUT of its own; issued in one tick, they still go to the core in one submit.
    if (this.replicated) return Promise.all(keys.map((key, i) => this.putValue(key, values[i]!, expiries?.[i] ?? 0)));
    const { classes, maxValueBytes } = this.session!.hello.layout;
    const n = keys.length;
    const keyBytes = new Int32Array(n);
    const valueBytes = new Int32Array(n);
    const sizes = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      const tooLarge = measureKey(keys[i]!, keyBytes, i);
      if (tooLarge) return Promise.reject(tooLarge);
      const value = values[i]!;
      const vb = (valueBytes[i] = typeof value === 'string' ? Buffer.byteLength(value) : value.length);
      if (vb > maxValueBytes) return Promise.reject(new KvValueTooLargeError(`value of ${vb} bytes: the limit is ${maxValueBytes}`));
      const limit = this.session!.itemLimit - KvLayout.ITEM_HEADER_BYTES - keyBytes[i]!; // a batch's values go through scratch
      if (vb > limit) return Promise.reject(new KvValueTooLargeError(`value of ${vb} bytes: putMany takes values up to ${limit} bytes here; put() takes larger ones`));
      sizes[i] = classFor(classes, itemUnits(keyBytes[i]!, vb));
    }
    const batch = new Batch(KvOp.PUT, keys, keyBytes, values, valueBytes, sizes, undefined, undefined, expiries);
    this.session!.host.queue.addBatch(this.session!, batch);
    return batch.promise;
  }

  /** Why an op of `type` cannot go now: its primary or (a write) a backup not connected; KvClient waits out a failover on it. */
  routeRefusal(type: KvOp): KvError | undefined {
    const refused = this.refusal(type);
    // A GET waits for its replica to apply the hash slot's epoch (given one without keys, it drops stale items then).
    if (!refused && type === KvOp.GET && this.session && this.epoch > this.session.appliedConfigEpoch) return this.session.behindEpoch(this.epoch);
    // An UNLOCK needs its primary only: a backup's word is released if it can be (replicate()).
    if (refused || type === KvOp.GET || type === KvOp.UNLOCK || this.backupsMissing) return refused ?? (type === KvOp.UNLOCK ? undefined : this.backupsMissing);
    for (const backup of this.backups) if (backup.refusal(type)) return new KvDisconnectedError(`a backup of this key: ${backup.refusal(type)!.message}`);
    return undefined;
  }

  /** Whether a GET sent now would be answered within the server's read lease (a replica's; true for other servers). */
  get readLeaseHeld(): boolean {
    return this.session?.readLeaseHeld ?? false;
  }

  /** Repair's copier, reading its own member: from now on its GETs count whatever the read lease (SessionOptions.readsUnleased). */
  readWithoutLease(): void {
    this.link.readWithoutLease();
  }

  /** The config epoch a replica last said it applied (its hello's or a pong's configEpoch; 0: none said). */
  get appliedConfigEpoch(): number {
    return this.session?.appliedConfigEpoch ?? 0;
  }

  /** Why no operation (of `type`) can be queued now (undefined: it can). */
  private refusal(type: KvOp = KvOp.GET): KvError | undefined {
    const { status, hello } = this.link;
    if (status === 'closed') return new KvDisconnectedError('the client is closed');
    // The last hello's role, reconnecting too: a read client's write is refused as such.
    const refused = hello && roleRefusal(hello, type, this.options.url);
    if (refused) return refused;
    if (status !== 'ready' || !this.session) {
      const failure = status === 'reconnecting' ? this.link.lastFailure : undefined;
      return new KvDisconnectedError(`not connected to ${this.options.url} (${status}${failure ? `; the last attempt: ${failure}` : ''})`);
    }
    return undefined;
  }

  private request(type: KvOp, key: Bytes, value: Value | undefined, arg: bigint, mismatchResolves: boolean, answer: Answer, into?: ExtRef, expiry = 0, keepVersion = false, target?: Buffer): Promise<unknown> {
    const refused = this.refusal(type);
    if (refused) return Promise.reject(refused);
    const keyBytes = typeof key === 'string' ? Buffer.byteLength(key) : key.length;
    if (keyBytes > KvLayout.MAX_KEY_BYTES) {
      return Promise.reject(new KvKeyTooLargeError(`key of ${keyBytes} bytes: the limit is ${KvLayout.MAX_KEY_BYTES}`));
    }
    const session = this.session!;
    const queue = session.host.queue;
    const { classes, maxValueBytes } = session.hello.layout;
    let bytes: Bytes | undefined;
    let valueBytes = 0;
    let cls = -1; // the size class of the block it may need
    if (type === KvOp.PUT || type === KvOp.CAS) {
      if (typeof value === 'string') {
        bytes = value;
        valueBytes = Buffer.byteLength(value);
      } else {
        try {
          bytes = toBuffer(value, 'value');
        } catch (error) {
          return Promise.reject(error);
        }
        valueBytes = bytes.length;
      }
      if (valueBytes > maxValueBytes) return Promise.reject(new KvValueTooLargeError(`value of ${valueBytes} bytes: the limit is ${maxValueBytes}`));
      cls = classFor(classes, itemUnits(keyBytes, valueBytes));
      const ext = typeof bytes === 'string' || valueBytes === 0 ? undefined : extOf(bytes!);
      if (ext === 'freed') return Promise.reject(freedError('value'));
      if (ext) {
        // Written from the caller's registered buffer, without a copy.
        const op = PendingOp.of(type, key, keyBytes, undefined, 0, arg, cls, mismatchResolves, ext, undefined, expiry, this.epoch, keepVersion, answer, undefined);
        const refused = this.replicated ? this.replicate(op, session) : undefined;
        if (refused) return Promise.reject(refused);
        return queueHolding(queue, session, op, ext);
      }
      if (KvLayout.ITEM_HEADER_BYTES + keyBytes + valueBytes > session.itemLimit) {
        // Larger than the core's scratch holds: through a registered bounce buffer (one copy).
        return this.requestBounced(type, key, bytes!, valueBytes, arg, mismatchResolves, answer, expiry, keepVersion);
      }
    } else if (type === KvOp.INCR || type === KvOp.LOCK) {
      cls = classFor(classes, itemUnits(keyBytes, 0)); // in case it must be created
    }
    const large = type === KvOp.GET && answer === Answer.VALUE ? this : undefined; // a value past scratch: getLarge
    // A recorded op resolves the full result (the history needs its version); what it answers is mapped after.
    const recorder = into === undefined && target === undefined ? this.options.recorder : undefined; // a getInto is not recorded: its answer is a length, not a value
    const op = PendingOp.of(type, key, keyBytes, bytes, valueBytes, arg, cls, mismatchResolves, into, large, expiry, type === KvOp.GET ? 0 : this.epoch, keepVersion, recorder ? Answer.FULL : answer, target);
    if (this.replicated && type !== KvOp.GET) {
      const replicated = this.replicate(op, session);
      if (replicated) return Promise.reject(replicated);
    }
    if (recorder) return queueRecorded(recorder, queue, session, op, answer);
    return queue.add(session, op).result;
  }

  // request()'s slow paths, apart: a closure inside request() would give every call a context.

  /** A write larger than scratch holds, through a registered bounce buffer (one copy). */
  private requestBounced(type: KvOp, key: Bytes, from: Bytes, valueBytes: number, arg: bigint, mismatchResolves: boolean, answer: Answer, expiry: number, keepVersion: boolean): Promise<unknown> {
    return withBounce(valueBytes, (bounce) => {
      if (typeof from === 'string') bounce.write(from, 0, valueBytes);
      else from.copy(bounce, 0);
      return this.request(type, key, bounce.subarray(0, valueBytes), arg, mismatchResolves, answer, undefined, expiry, keepVersion);
    });
  }

  /**
   * Names the view's backups in a write's request: their sessions and, for a new item, the size class
   * of its block on each (their heaps have their own). Returns why the write cannot go (undefined: it can).
   */
  private replicate(request: PendingOp, session: Session): KvError | undefined {
    const { type } = request;
    if (this.backupsMissing && type !== KvOp.UNLOCK) return this.backupsMissing;
    const backups: Session[] = [];
    const classes: number[] = [];
    for (const backup of this.backups) {
      const refused = backup.refusal(type);
      if (refused && type === KvOp.UNLOCK) continue; // its server gives the lock word back when the session ends
      if (refused) return new KvDisconnectedError(`a backup of this key: ${refused.message}`);
      const s = backup.session!;
      if (s.host !== session.host) return new KvInvalidArgumentError(`the backup ${backup.url} is on another provider than its primary ${this.url}`);
      backups.push(s);
      // PUT, CAS: the new item's block (its value may be in a registered buffer); INCR, LOCK: the item's, should that backup lack it.
      const valueBytes = request.ext !== undefined ? request.ext.length : request.valueBytes;
      classes.push(type === KvOp.DELETE || type === KvOp.UNLOCK ? -1 : classFor(s.hello.layout.classes, itemUnits(request.keyBytes, valueBytes)));
    }
    if (backups.length === 0) return undefined; // its primary alone (after a failover): a plain write with the epoch
    request.backups = backups;
    request.backupClasses = classes;
    return undefined;
  }

  /** Waits for operations in flight, gives unused blocks back, disconnects. Idempotent. */
  close(): Promise<void> {
    return this.link.close();
  }
}

/** A recorded op's result as its answer asks (the queue gives recorded ops the full result). */
function answerOf(answer: Answer, x: OpResult): unknown {
  const ok = x.status === KvStatus.OK;
  if (answer === Answer.VALUE) return ok ? x.value : undefined;
  if (answer === Answer.VERSIONED) return ok ? { value: x.value!, version: x.version } : undefined;
  if (answer === Answer.APPLIED) return ok;
  return undefined;
}

/** Queues an op of a registered buffer, which stays registered until the op has ended. */
function queueHolding(queue: OpQueue, session: Session, op: PendingOp, ext: ExtRef): Promise<unknown> {
  return holding(ext, () => queue.add(session, op).result);
}

/** Queues a recorded op: the history gets its invoke now and its answer when it ends. */
function queueRecorded(recorder: HistoryRecorder, queue: OpQueue, session: Session, op: PendingOp, answer: Answer): Promise<unknown> {
  const r = recorded(recorder, op, () => queue.add(session, op));
  return answer === Answer.FULL ? r : r.then((x) => answerOf(answer, x));
}

// KvClient's runs of an op on its server: functions made once, so no call makes a closure.
export const runGet = (server: ServerClient, key: Bytes): Promise<Buffer | undefined> => server.getValue(key);
export const runGetInto = (server: ServerClient, key: Bytes, buffer: Value | undefined): Promise<number | undefined> => server.getInto(key, buffer as Buffer);
export const runGetVersioned = (server: ServerClient, key: Bytes): Promise<VersionedValue | undefined> => server.getVersioned(key);
export const runPut = (server: ServerClient, key: Bytes, value: Value | undefined, expiry: number): Promise<void> => server.putValue(key, value!, expiry);
export const runCas = (server: ServerClient, key: Bytes, value: Value | undefined, expected: bigint): Promise<boolean> => server.casApplied(key, expected, value!);
