// One server's operations: queued, submitted to the native core, finished.
// Operations issued in one tick are written into the core's buffers and
// submitted with one crossing (one doorbell); the core drives every RDMA round
// trip and hands back one result per operation. The queue polls for results
// in busy mode (a short spin after each submit, then a setImmediate loop while
// anything is pending) or in event mode (the CQ's event wakes it). Each poll
// also hands back the completions of the session's control requests, which
// go to the owner's onControl.
//
// Ownership: an op is the queue's from add() until its promise settles; its
// heap block is its own once taken from the session's pools, and goes back to
// them when the core did not take the op or did not use the block.
import { type Completion, ControlWords, type PollMode, readCompletion } from '../native/index.js';
import { KvLayout, KvOp, KvStatus, OpLayout, ResultLayout } from '../protocol/constants.js';
import { KvDisconnectedError, KvTimeoutError, errorForStatus } from '../protocol/errors.js';
import { describe } from './keys.js';
import { opName } from './op-names.js';
import type { Session } from './session.js';

/** One operation's outcome, as the native core reports it. */
export interface OpResult {
  status: number;
  value?: Buffer;
  version: bigint;
  /** Times the core retried (bucket locks busy, torn reads). */
  retries: number;
}

/** An operation as it is submitted. */
export interface OpRequest {
  type: KvOp;
  key: Buffer;
  /** PUT, CAS: the value */
  value: Buffer | undefined;
  /** CAS: expected version; INCR: delta; LOCK: timeout ms; UNLOCK: token */
  arg: bigint;
  /** PUT, CAS, INCR, LOCK: the size class of the block it may need; -1: none */
  cls: number;
  /** CAS and UNLOCK: a version mismatch is an answer, not an error. */
  mismatchResolves: boolean;
}

/** A submitted operation: its result, and whether it reached the native core. */
export interface Submission {
  readonly result: Promise<OpResult>;
  /** Handed to the core: from then on it may take effect (history: a failure is not "never sent"). */
  readonly sent: boolean;
}

interface PendingOp extends OpRequest {
  result: Promise<OpResult>;
  deadline: number;
  resolve: (result: OpResult) => void;
  reject: (error: Error) => void;
  /** The heap block taken for it (PUT, CAS, INCR, LOCK), until it is given back or written. */
  block: number | undefined;
  sent: boolean;
}

/** How long flush() polls before leaving the rest to the event loop (busy mode). */
const SPIN_MS = 0.02;
/** Flushes per event-loop turn that may spin (see spin()). */
const SPINS_PER_TURN = 256;

export class OpQueue {
  private session: Session | undefined;
  private readonly queue: PendingOp[] = [];
  private readonly inflight = new Map<number, PendingOp>();
  private nextId = 1;
  private flushScheduled = false;
  private polling = false;
  private timer: NodeJS.Timeout | undefined;
  private spinsLeft = SPINS_PER_TURN;
  /** core.submit calls: one doorbell each (for tests and metrics). */
  submits = 0;

  /** `onControl` hears every control-channel completion the core hands back (after the op results of the same poll). */
  constructor(
    private readonly timeoutMs: number,
    private readonly pollMode: PollMode,
    private readonly onControl: (session: Session, completion: Completion) => void,
  ) {}

  /** Ops go to `session` from now on (until lose() or close()). */
  attach(session: Session): void {
    this.session = session;
    if (this.pollMode === 'event') {
      session.cq.watch(() => this.pollOnce(true));
      session.cq.arm();
    }
  }

  /** Ops still in the core. */
  get inflightCount(): number {
    return this.inflight.size;
  }

  /** Queues one operation for the next flush (in this tick's microtasks). */
  add(request: OpRequest): Submission {
    let resolve!: PendingOp['resolve'];
    let reject!: PendingOp['reject'];
    const result = new Promise<OpResult>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // One shape for every op (no spread, no optional fields): flush() and onResults() stay monomorphic.
    const { type, key, value, arg, cls, mismatchResolves } = request;
    const op: PendingOp = { type, key, value, arg, cls, mismatchResolves, result, deadline: performance.now() + this.timeoutMs, resolve, reject, block: undefined, sent: false };
    this.queue.push(op);
    this.scheduleFlush();
    return op;
  }

  /** Blocks by size class the queued ops wait for (a reclaim leaves them). */
  needed(): Map<number, number> {
    const needed = new Map<number, number>();
    for (const op of this.queue) if (op.cls >= 0) needed.set(op.cls, (needed.get(op.cls) ?? 0) + 1);
    return needed;
  }

  /** Fails the queued ops waiting for a block of size class `cls` (the server has none left). */
  failWaiting(cls: number, error: Error): void {
    for (let i = this.queue.length - 1; i >= 0; i--) {
      const op = this.queue[i]!;
      if (op.cls === cls) {
        this.queue.splice(i, 1);
        op.reject(error);
      }
    }
  }

  scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    queueMicrotask(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  /** Polls the core until it has nothing more (twice around an arm() when an event woke us), then flushes. */
  pollOnce(fromEvent: boolean): void {
    const session = this.session;
    if (!session) return;
    for (let round = 0; round < (fromEvent ? 2 : 1); round++) {
      for (;;) {
        const n = session.core.poll();
        const controls = session.core.controlCount;
        if (n === 0 && controls === 0) break;
        this.onPolled(session, n, controls);
      }
      if (fromEvent && round === 0) session.cq.arm();
    }
    if (this.queue.length > 0) this.flush();
  }

  /** The session's connection is lost: finish everything the core holds, then the rest of the queue. */
  lose(session: Session, reason: string): void {
    session.core.failAll(KvStatus.DISCONNECTED);
    this.onPolled(session, session.core.poll(), session.core.controlCount);
    this.failInflight(new KvDisconnectedError(`lost the server: ${reason}`));
    for (const op of this.queue.splice(0)) op.reject(new KvDisconnectedError(`lost the server: ${reason}`));
    this.session = undefined;
  }

  /** Fails what is queued and takes nothing more from the timer. */
  close(error: Error): void {
    if (this.timer) clearTimeout(this.timer);
    for (const op of this.queue.splice(0)) op.reject(error);
  }

  /** Waits, until `deadline` at most, for the ops in the core (they may hold bucket locks), then fails the rest. */
  async drain(deadline: number, error: Error): Promise<void> {
    while (this.inflight.size > 0 && performance.now() < deadline) {
      this.pollOnce(false);
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.failInflight(error);
    this.session = undefined;
  }

  private failInflight(error: Error): void {
    for (const op of this.inflight.values()) op.reject(error);
    this.inflight.clear();
  }

  /** Submits what fits (slots, arena, granted blocks) with one crossing. */
  private flush(): void {
    const session = this.session;
    if (!session || this.queue.length === 0) return;
    const { core, pools } = session;
    const words = core.opWords;
    const arena = core.arena;
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
        const block = pools.take(op.cls);
        if (block === undefined) {
          waiting.push(op); // until the grant arrives
          continue;
        }
        op.block = block;
      }
      const id = this.nextId;
      this.nextId = (id + 1) >>> 0; // OpLayout.ID is one word: any u32 is an op id, and they wrap
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
      words[o + OpLayout.BLOCK_UNITS] = op.cls >= 0 ? pools.unitsOf(op.cls) : 0;
      writeArgument(words, o, op);
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
        pools.giveBack(op.cls, op.block);
        op.block = undefined;
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
      const controls = session.core.controlCount;
      if (n > 0 || controls > 0) this.onPolled(session, n, controls);
    } while (this.session === session && this.inflight.size > 0 && performance.now() < end);
  }

  private startPolling(): void {
    if (this.polling || this.pollMode === 'event') return;
    this.polling = true;
    const loop = () => {
      this.pollOnce(false);
      // Queued ops count too: the spin in flush() may finish a whole batch, leaving nothing in flight.
      if (this.session && (this.inflight.size > 0 || this.session.pools.awaitingGrants || this.queue.length > 0)) setImmediate(loop);
      else this.polling = false;
    };
    setImmediate(loop);
  }

  /** One poll's output: `n` op results, then `controls` control completions. */
  private onPolled(session: Session, n: number, controls: number): void {
    if (n > 0) this.onResults(session, n);
    if (controls > 0) this.onControls(session, controls);
  }

  private onControls(session: Session, count: number): void {
    const words = session.core.controlWords;
    for (let i = 0; i < count; i++) {
      // Not flush() from here (onControl schedules one): flush polls, which would overwrite these words.
      this.onControl(session, readCompletion(words, i, ControlWords.ENTRIES));
    }
  }

  private onResults(session: Session, n: number): void {
    const words = session.core.resultWords;
    const scratch = session.core.scratch;
    for (let i = 0; i < n; i++) {
      const o = i * ResultLayout.WORDS;
      const id = words[o + ResultLayout.ID]!;
      const status = words[o + ResultLayout.STATUS]!;
      const op = this.inflight.get(id);
      if (!op) continue;
      this.inflight.delete(id);
      if (words[o + ResultLayout.BLOCK_UNUSED] && op.block !== undefined) session.pools.giveBack(op.cls, op.block);
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
        op.reject(errorForStatus(status, words[o + ResultLayout.DETAIL]!, `${opName(op.type)} ${describe(op.key)}`));
      }
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
}

/** The argument of the op's type, in OpLayout's words of its name (the other types have none). */
function writeArgument(words: Uint32Array, o: number, op: OpRequest): void {
  switch (op.type) {
    case KvOp.CAS:
      words[o + OpLayout.EXPECTED_VERSION_LO] = Number(op.arg & 0xffffffffn);
      words[o + OpLayout.EXPECTED_VERSION_HI] = Number(op.arg >> 32n);
      break;
    case KvOp.INCR:
      words[o + OpLayout.DELTA_LO] = Number(op.arg & 0xffffffffn);
      words[o + OpLayout.DELTA_HI] = Number(op.arg >> 32n);
      break;
    case KvOp.LOCK:
      words[o + OpLayout.LOCK_TIMEOUT_MS] = Number(op.arg);
      break;
    case KvOp.UNLOCK:
      words[o + OpLayout.TOKEN] = Number(op.arg & 0xffffffffn);
      break;
  }
}
