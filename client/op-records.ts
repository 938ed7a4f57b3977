// What the op queue holds: a single operation (PendingOp, one promise) or a
// batch of GETs or PUTs (Batch, one promise for all its keys). Both are
// plain classes with one shape each, so the queue's loops stay monomorphic.
// Keys and values stay as the caller gave them (a string is written straight
// into the core's arena; its UTF-8 length is measured once, when checked).
//
// Ownership: a record is the queue's from add() until its promise settles.
// A Batch's result array is the caller's once it resolves; the values in it
// are views of one Buffer per hand-out (one copy out of the core's scratch).
import { KvLayout, KvOp, OpFlag, OpLayout } from '../protocol/constants.js';
import { KvBufferTooSmallError, KvDisconnectedError } from '../protocol/errors.js';
import { writeText } from './keys.js';
import type { ExtRef } from './large-values.js';
import type { Session } from './session.js';

/** Key or value bytes as the queue takes them. */
export type Bytes = Buffer | string;

/** How a single op's promise resolves. */
export const Answer = {
  /** OpResult: status, value, version (a bigint), retries. */
  FULL: 0,
  /** A GET's value, or undefined when the key does not exist. */
  VALUE: 1,
  /** undefined (a PUT). */
  NONE: 2,
  /** A GET into a buffer (getInto: `ext`'s registered one, or `target`): the value's length, or undefined when the key does not exist. */
  LENGTH: 3,
  /** A GET's `{ value, version }` (getWithVersion), or undefined when the key does not exist. */
  VERSIONED: 4,
  /** A CAS: true when it wrote (false: the version did not match). */
  APPLIED: 5,
} as const;
export type Answer = (typeof Answer)[keyof typeof Answer];

/** One operation's outcome, as the native core reports it (Answer.FULL). */
export interface OpResult {
  status: number;
  value?: Buffer;
  version: bigint;
  /** Times the core retried (bucket locks busy, torn reads). */
  retries: number;
  /** A GET that found the key: its item's expiry (absolute Unix ms, 0 = never). */
  expiry?: number;
  /** A GET into a registered buffer (no `value`): the value's length there. */
  length?: number;
}

/** An operation as it is submitted. */
export interface OpRequest {
  type: KvOp;
  key: Bytes;
  /** The key's length in bytes (a string's UTF-8 length). */
  keyBytes: number;
  /** PUT, CAS: the value */
  value: Bytes | undefined;
  valueBytes: number;
  /** CAS: expected version; INCR: delta; LOCK: timeout ms; UNLOCK: token */
  arg: bigint;
  /** PUT, CAS, INCR, LOCK: the size class of the block it may need; -1: none */
  cls: number;
  /** CAS and UNLOCK: a version mismatch is an answer, not an error. */
  mismatchResolves: boolean;
  /** The value's registered buffer (large-values.ts): GET reads into it, PUT and CAS write from it (value then undefined, valueBytes 0). */
  ext?: ExtRef | undefined;
  /** A GET of a value too large for the core's scratch gets it this way instead (get() of a large value). */
  large?: LargeFallback | undefined;
  /** getInto of a plain Buffer (Answer.LENGTH): the value is copied into it out of scratch, as a get's into a new Buffer. */
  target?: Buffer | undefined;
  /** PUT, CAS: the new item's expiry (absolute Unix ms; 0 or undefined: never). */
  expiry?: number | undefined;
  /** A replicated write (PUT, DELETE, CAS): the backups' sessions, links of the same core, and the size class of the block each needs (-1: none). */
  backups?: readonly Session[] | undefined;
  backupClasses?: readonly number[] | undefined;
  /** A write on a replicated cluster: its hash slot's epoch in the client's config (OpLayout.EPOCH; 0: none). */
  epoch?: number | undefined;
  /** CAS: the new item keeps the expected version (OpFlag.KEEP_VERSION: repair's rewrite as it is). */
  keepVersion?: boolean | undefined;
}

/** Where a GET whose value is larger than the core's scratch holds goes for it: a registered buffer of `needed` bytes. */
export interface LargeFallback {
  getLarge(key: Bytes, needed: number): Promise<Buffer | undefined>;
}

/** A submitted operation: its result, and whether it reached the native core. */
export interface Submission {
  readonly result: Promise<OpResult>;
  /** Handed to the core: from then on it may take effect (history: a failure is not "never sent"). */
  readonly sent: boolean;
}

type Settle = (value: never) => void;

// One executor for every PendingOp's promise (not a closure per op): the Promise constructor calls it
// synchronously, and the constructor takes the resolving functions from here at once.
let capturedResolve: Settle | undefined;
let capturedReject: ((error: Error) => void) | undefined;
function captureSettlers(resolve: Settle, reject: (error: Error) => void): void {
  capturedResolve = resolve;
  capturedReject = reject;
}

/** On the error of an op that failed before the core had it: it cannot have taken effect. */
export const NOT_SENT = Symbol('rdma-kv.notSent');

/** An idle op's promise: it never settles, and holds nothing. */
const IDLE_RESULT = new Promise<OpResult>(() => {});
const ignore = (): void => {};
/** Ops kept for the next request (PendingOp.of), at most one per slot the core has. */
const idleOps: PendingOp[] = [];

export class PendingOp implements OpRequest, Submission {
  /** A replicated write's backups and their blocks' size classes (ServerClient.replicate sets them before the op is queued). */
  backups: readonly Session[] | undefined = undefined;
  backupClasses: readonly number[] | undefined = undefined;
  /** When it must have been submitted by (performance.now() ms); 0 until the queue first keeps it waiting. */
  deadline = 0;
  result: Promise<OpResult> = IDLE_RESULT;
  resolve: (value: unknown) => void = ignore;
  private rejectPromise: (error: Error) => void = ignore;
  sent = false;
  /** The session (member) it runs on: set when queued. */
  session: Session | undefined = undefined;
  // The request, as OpRequest's fields (set by of(); positional: one object per op, not a request object copied into this one).
  type: KvOp = KvOp.GET;
  key: Bytes = '';
  keyBytes = 0;
  value: Bytes | undefined = undefined;
  valueBytes = 0;
  arg = 0n;
  cls = -1;
  mismatchResolves = false;
  ext: ExtRef | undefined = undefined;
  large: LargeFallback | undefined = undefined;
  target: Buffer | undefined = undefined;
  expiry = 0;
  epoch = 0;
  keepVersion = false;
  answer: Answer = Answer.NONE;

  /**
   * An op for this request with a new promise: one that recycle() kept if there is one (a PendingOp
   * is ~200 B, a tenth of what a YCSB operation allocated), else a new one.
   */
  static of(type: KvOp, key: Bytes, keyBytes: number, value: Bytes | undefined, valueBytes: number, arg: bigint, cls: number, mismatchResolves: boolean, ext: ExtRef | undefined, large: LargeFallback | undefined, expiry: number, epoch: number, keepVersion: boolean, answer: Answer, target: Buffer | undefined): PendingOp {
    const op = idleOps.pop() ?? new PendingOp();
    op.type = type;
    op.key = key;
    op.keyBytes = keyBytes;
    op.value = value;
    op.valueBytes = valueBytes;
    op.arg = arg;
    op.cls = cls;
    op.mismatchResolves = mismatchResolves;
    op.ext = ext;
    op.large = large;
    op.target = target;
    op.expiry = expiry;
    op.epoch = epoch;
    op.keepVersion = keepVersion;
    op.answer = answer;
    op.result = new Promise<OpResult>(captureSettlers);
    op.resolve = capturedResolve as (value: unknown) => void;
    op.rejectPromise = capturedReject!;
    return op;
  }

  private constructor() {}

  /**
   * Keeps the op for the next request, once its promise has resolved and nothing holds it (the
   * queue and the core's slot let go of it before; deliverResults calls this last). Not an op whose
   * record someone may still read: a recorded one (Answer.FULL: the history reads `sent`), a
   * replicated write, one of a registered buffer. Everything it referred to is let go of.
   */
  recycle(): void {
    if (this.answer === Answer.FULL || this.backups !== undefined || this.ext !== undefined || idleOps.length >= KvLayout.MAX_INFLIGHT) return;
    this.result = IDLE_RESULT;
    this.resolve = ignore;
    this.rejectPromise = ignore;
    this.key = '';
    this.value = undefined;
    this.large = undefined;
    this.target = undefined;
    this.session = undefined;
    this.deadline = 0;
    this.sent = false;
    this.arg = 0n;
    idleOps.push(this);
  }

  /**
   * Fails the op; a plain GET whose value is larger than scratch holds fetches it through a
   * registered buffer instead. A lost connection's error, for an op never handed to the core,
   * is its own copy marked NOT_SENT (KvClient retries those on a replicated cluster).
   */
  reject(error: Error): void {
    if (!this.sent && error instanceof KvDisconnectedError && !(NOT_SENT in error)) {
      error = Object.assign(new KvDisconnectedError(error.message), { [NOT_SENT]: true });
    }
    if (this.large !== undefined && this.answer === Answer.VALUE && error instanceof KvBufferTooSmallError) {
      this.large.getLarge(this.key, error.needed).then(this.resolve, this.rejectPromise);
    } else {
      this.rejectPromise(error);
    }
  }
}

/**
 * Many GETs (or PUTs) of one server as one record: the queue hands its keys
 * to the core as slots allow (chunks of KvLayout.MAX_INFLIGHT), and its one
 * promise settles when every key has its answer, or at the first failure.
 */
export class Batch {
  /** Keys handed to the core so far. */
  next = 0;
  /** As PendingOp's. */
  deadline = 0;
  /** Keys without an answer yet. */
  left: number;
  failed = false;
  /** As PendingOp's. */
  session: Session | undefined = undefined;
  readonly promise: Promise<Array<Buffer | undefined> | undefined>;
  resolve!: (out: Array<Buffer | undefined> | undefined) => void;
  reject!: (error: Error) => void;

  /**
   * `out[positions[i]]` (or `out[i]`) gets key i's value (GET); `classes[i]`
   * is the size class of key i's block (PUT), `expiries[i]` its item's expiry
   * (absolute Unix ms, 0 = never; undefined: none expires).
   */
  constructor(
    readonly type: KvOp,
    readonly keys: Bytes[],
    readonly keyBytes: Int32Array,
    readonly values: Bytes[] | undefined,
    readonly valueBytes: Int32Array | undefined,
    readonly classes: Int32Array | undefined,
    readonly out: Array<Buffer | undefined> | undefined,
    readonly positions: Int32Array | undefined,
    readonly expiries?: Float64Array,
  ) {
    this.left = keys.length;
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  /** The first failure settles the batch; later answers only give their blocks back. */
  fail(error: Error): void {
    if (this.failed) return;
    this.failed = true;
    this.reject(error);
  }
}

const RESOLVED = Promise.resolve();

/**
 * Runs `task` as a microtask. Not queueMicrotask(): Node makes an AsyncResource and a bound
 * function for each call (measured alone: ~250-500 ns a call against ~50-120 ns for a then()
 * on a settled promise), and the queue schedules a flush for every sequential op.
 */
export function microtask(task: () => void): void {
  void RESOLVED.then(task);
}

/** Writes the descriptor at word `o` and its key and value into the arena at `at`; returns the arena used after them. */
export function writeDescriptor(words: Uint32Array, arena: Buffer, o: number, at: number, type: KvOp, id: number, key: Bytes, keyBytes: number, value: Bytes | undefined, valueBytes: number, block: number, blockUnits: number): number {
  words[o + OpLayout.TYPE] = type;
  words[o + OpLayout.ID] = id;
  words[o + OpLayout.KEY_OFFSET] = at;
  words[o + OpLayout.KEY_LEN] = keyBytes;
  if (typeof key === 'string') writeText(arena, key, at, keyBytes);
  else key.copy(arena, at);
  at += keyBytes;
  words[o + OpLayout.VALUE_OFFSET] = at;
  words[o + OpLayout.VALUE_LEN] = valueBytes;
  if (value !== undefined) {
    if (typeof value === 'string') writeText(arena, value, at, valueBytes);
    else value.copy(arena, at);
    at += valueBytes;
  }
  words[o + OpLayout.BLOCK] = block;
  words[o + OpLayout.BLOCK_UNITS] = blockUnits;
  return at;
}

/** A PUT's or CAS's item expiry (absolute Unix ms, below 2^48), in OpLayout's EXPIRY words. */
export function writeExpiry(words: Uint32Array, o: number, expiry: number): void {
  words[o + OpLayout.EXPIRY_LO] = expiry % 0x100000000;
  words[o + OpLayout.EXPIRY_HI] = Math.floor(expiry / 0x100000000);
}

/** The argument of the op's type, in OpLayout's words of its name (the other types have none), its expiry and its registered buffer. */
export function writeArgument(words: Uint32Array, o: number, op: PendingOp): void {
  switch (op.type) {
    case KvOp.PUT:
      writeExpiry(words, o, op.expiry);
      break;
    case KvOp.CAS:
      writeExpiry(words, o, op.expiry);
      words[o + OpLayout.EXPECTED_VERSION_LO] = Number(op.arg & 0xffffffffn);
      words[o + OpLayout.EXPECTED_VERSION_HI] = Number(op.arg >> 32n);
      if (op.keepVersion) words[o + OpLayout.TYPE] |= OpFlag.KEEP_VERSION << OpLayout.TYPE_FLAGS_SHIFT;
      break;
    case KvOp.INCR:
      words[o + OpLayout.DELTA_LO] = Number(op.arg & 0xffffffffn);
      words[o + OpLayout.DELTA_HI] = Number(op.arg >> 32n);
      break;
    case KvOp.LOCK:
      words[o + OpLayout.LOCK_TIMEOUT_MS] = Number(op.arg & 0xffffffffn);
      words[o + OpLayout.LOCK_FLOOR] = Number(op.arg >> 32n); // repair's copy of a lock (client/repair.ts)
      break;
    case KvOp.UNLOCK:
      words[o + OpLayout.TOKEN] = Number(op.arg & 0xffffffffn);
      break;
  }
  if (op.ext !== undefined) {
    words[o + OpLayout.EXT_BUFFER] = op.ext.id; // the binding clears it once read
    words[o + OpLayout.EXT_OFFSET] = op.ext.offset;
    words[o + OpLayout.EXT_LEN] = op.ext.length;
  }
}
