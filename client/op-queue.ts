// One server's operations: queued, submitted to the native core, finished.
// Operations issued in one tick go to the core with one crossing (one doorbell
// per pass); the core drives every round trip and hands back one result per
// operation, from that same submit where completions are synchronous (shm),
// else from a poll: busy mode spins briefly after each submit, then polls on
// setImmediate; event mode waits for the CQ's event (the core re-arms it). Each
// call also hands back the session's control completions (to onControl). A
// batch (getMany, putMany) is one record with one promise. Nothing is allocated
// per op beyond its record and promise and a GET's value; ops in the core are
// found by slot (the op id's low bits), not in a Map.
//
// Ownership: a record is the queue's from add() until its promise settles; an
// op's heap block is its own once taken from the session's pools, and goes
// back to them when the core did not take the op or did not use the block.
import { type Completion, ControlWords, type PollMode, readCompletion } from '../native/index.js';
import { KvLayout, KvOp, KvStatus, OpLayout, ResultLayout } from '../protocol/constants.js';
import { KvDisconnectedError, KvTimeoutError, errorForStatus } from '../protocol/errors.js';
import { describe } from './keys.js';
import { opName } from './op-names.js';
import { Answer, Batch, type Bytes, microtask, type OpRequest, PendingOp, type Submission, writeArgument, writeDescriptor, writeExpiry } from './op-records.js';
import type { Session } from './session.js';

export { Answer, Batch } from './op-records.js';
export type { Bytes, OpRequest, OpResult, Submission } from './op-records.js';

/** How long flush() polls before leaving the rest to the event loop (busy mode). */
const SPIN_MS = 0.02;
/**
 * Submits per event-loop turn that run at once (and spin), and the time they may take. On shm
 * an op finishes inside its submit, so a caller that issues its next op as each one resolves
 * would chain microtasks forever: timers (keepalive, deadlines), I/O and a server in the same
 * process would starve. Past either budget the next flush waits for setImmediate.
 */
const SPINS_PER_TURN = 256;
const TURN_MS = 1;
const SLOTS = KvLayout.MAX_INFLIGHT;
/** Op ids: the slot in the low bits, a use count above (a stale result is told apart). */
const SLOT_BITS = 31 - Math.clz32(SLOTS);

type Work = PendingOp | Batch;

export class OpQueue {
  private session: Session | undefined;
  /** Waiting records, from `head` on (a batch stays until all its keys are in the core). */
  private queue: Array<Work | undefined> = [];
  private head = 0;
  /** By slot: the record of the op in the core, its key index (batches), its block and size class. */
  private readonly owners: Array<Work | undefined> = new Array<Work | undefined>(SLOTS).fill(undefined);
  private readonly ids = new Uint32Array(SLOTS);
  private readonly members = new Int32Array(SLOTS);
  private readonly blocks = new Int32Array(SLOTS).fill(-1);
  private readonly classes = new Int32Array(SLOTS);
  private readonly freeSlots = Int32Array.from({ length: SLOTS }, (_, i) => SLOTS - 1 - i);
  private freeCount = SLOTS;
  /** The slot of each descriptor of the batch being submitted. */
  private readonly submitted = new Int32Array(SLOTS);
  private uses = 0;
  private handouts = 0;
  private flushScheduled = false;
  private polling = false;
  private timer: NodeJS.Timeout | undefined;
  /** Event mode: polls again while ops back off (nothing of theirs is posted, so no completion wakes us for them). */
  private backoffTimer: NodeJS.Timeout | undefined;
  private spinsLeft = SPINS_PER_TURN;
  /** When this turn's first submit ran (performance.now()). */
  private turnStart = 0;
  private readonly flushTask = (): void => void ((this.flushScheduled = false), this.flush());
  private readonly newTurn = (): number => (this.spinsLeft = SPINS_PER_TURN);
  /** core.submit calls (for tests and metrics), and the retries of the ops that resolved, by KvOp (metrics read them). */
  submits = 0;
  readonly retried = new Float64Array(KvOp.UNLOCK + 1);

  /** `onControl` hears every control-channel completion the core hands back (after the op results of the same call). */
  constructor(
    private readonly timeoutMs: number,
    private readonly pollMode: PollMode,
    private readonly onControl: (session: Session, completion: Completion) => void,
  ) {}

  /** Ops go to `session` from now on (until lose() or close()). */
  attach(session: Session): void {
    this.session = session;
    if (this.pollMode === 'event') {
      session.cq.watch(() => this.pollOnce());
      session.cq.arm();
    }
  }

  /** Ops in the core waiting out a backoff. */
  get backoffs(): number {
    return this.session?.core.backoffs ?? 0;
  }

  /** Ops in the core. */
  get inflightCount(): number {
    return SLOTS - this.freeCount;
  }

  /** Queues one operation for the next flush (in this tick's microtasks). */
  add(request: OpRequest, answer: Answer = Answer.FULL): Submission {
    const op = new PendingOp(request, answer);
    this.queue.push(op);
    this.scheduleFlush();
    return op;
  }

  /** Queues a batch; its keys go to the core as slots allow. */
  addBatch(batch: Batch): void {
    this.queue.push(batch);
    this.scheduleFlush();
  }

  /** Blocks by size class the queued ops wait for (a reclaim leaves them). */
  needed(): Map<number, number> {
    const needed = new Map<number, number>();
    const add = (cls: number) => {
      if (cls >= 0) needed.set(cls, (needed.get(cls) ?? 0) + 1);
    };
    for (let i = this.head; i < this.queue.length; i++) {
      const work = this.queue[i]!;
      if (work instanceof PendingOp) add(work.cls);
      else if (work.classes) for (let k = work.next; k < work.keys.length; k++) add(work.classes[k]!);
    }
    return needed;
  }

  /** Fails the queued ops waiting for a block of size class `cls` (the server has none left). */
  failWaiting(cls: number, error: Error): void {
    this.removeQueued((work) => (work instanceof PendingOp ? work.cls === cls : work.classes !== undefined && work.classes.subarray(work.next).includes(cls)), error);
  }

  scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    if (this.spinsLeft > 0) microtask(this.flushTask);
    else setImmediate(this.flushTask); // this turn's budget is spent: let timers and I/O run first
  }

  /** Polls the core until it has nothing more (in event mode the core re-arms the CQ), then flushes. */
  pollOnce(): void {
    const session = this.session;
    if (!session) return;
    for (;;) {
      const n = session.core.poll();
      const controls = session.core.controlCount;
      if (n === 0 && controls === 0) break;
      this.onPolled(session, n, controls);
    }
    if (this.head < this.queue.length) this.flush();
    else this.watchBackoffs(session);
  }

  /** The session's connection is lost: finish everything the core holds, then the rest of the queue. */
  lose(session: Session, reason: string): void {
    session.core.failAll(KvStatus.DISCONNECTED);
    this.onPolled(session, session.core.poll(), session.core.controlCount);
    const error = new KvDisconnectedError(`lost the server: ${reason}`);
    this.failInflight(error);
    this.removeQueued(() => true, error);
    this.session = undefined;
  }

  /** Fails what is queued and takes nothing more from the timer. */
  close(error: Error): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
    this.removeQueued(() => true, error);
  }

  /** Waits, until `deadline` at most, for the ops in the core (they may hold bucket locks), then fails the rest. */
  async drain(deadline: number, error: Error): Promise<void> {
    while (this.inflightCount > 0 && performance.now() < deadline) {
      this.pollOnce();
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.failInflight(error);
    this.session = undefined;
  }

  private failInflight(error: Error): void {
    for (let slot = 0; slot < SLOTS; slot++) {
      const owner = this.owners[slot];
      if (!owner) continue;
      this.release(slot);
      if (owner instanceof PendingOp) owner.reject(error);
      else owner.fail(error);
    }
  }

  /** Takes the queued records `which` picks out of the queue and fails them with `error`. */
  private removeQueued(which: (work: Work) => boolean, error: Error | ((work: Work) => Error)): void {
    const kept: Work[] = [];
    const queued = this.queue;
    const head = this.head;
    this.queue = kept;
    this.head = 0;
    for (let i = head; i < queued.length; i++) {
      const work = queued[i]!;
      const why = () => (typeof error === 'function' ? error(work) : error);
      if (!which(work)) kept.push(work);
      else if (work instanceof PendingOp) work.reject(why());
      else work.fail(why());
    }
  }

  private release(slot: number): void {
    this.owners[slot] = undefined;
    this.blocks[slot] = -1;
    this.freeSlots[this.freeCount++] = slot;
  }

  /** Submits what fits (slots, arena, granted blocks) with one crossing. */
  private flush(): void {
    const session = this.session;
    if (!session || this.head === this.queue.length) return;
    const { core, pools } = session;
    const words = core.opWords;
    const arena = core.arena;
    let count = 0;
    let arenaUsed = 0;
    let waiting: Work[] | undefined; // no block yet: until the grant arrives
    const queue = this.queue;
    fill: while (this.head < queue.length && this.freeCount > 0) {
      const work = queue[this.head]!;
      if (work instanceof PendingOp) {
        if (arenaUsed + work.keyBytes + work.valueBytes > arena.length) break;
        let block = -1;
        if (work.cls >= 0) block = pools.take(work.cls) ?? -1;
        queue[this.head++] = undefined;
        if (work.cls >= 0 && block < 0) {
          (waiting ??= []).push(work);
          continue;
        }
        arenaUsed = this.describe(words, arena, count++, arenaUsed, work, 0, work.type, work.key, work.keyBytes, work.value, work.valueBytes, work.cls, block);
        work.sent = true;
        if (work.type !== KvOp.DELETE) writeArgument(words, (count - 1) * OpLayout.WORDS, work);
        continue;
      }
      if (work.failed) {
        queue[this.head++] = undefined;
        continue;
      }
      const { keys, keyBytes, values, valueBytes, classes } = work;
      while (work.next < keys.length && this.freeCount > 0) {
        const k = work.next;
        const vb = valueBytes ? valueBytes[k]! : 0;
        if (arenaUsed + keyBytes[k]! + vb > arena.length) break fill;
        const cls = classes ? classes[k]! : -1;
        const block = cls >= 0 ? (pools.take(cls) ?? -1) : -1;
        if (cls >= 0 && block < 0) break;
        arenaUsed = this.describe(words, arena, count++, arenaUsed, work, k, work.type, keys[k]!, keyBytes[k]!, values?.[k], vb, cls, block);
        if (work.type === KvOp.PUT) writeExpiry(words, (count - 1) * OpLayout.WORDS, work.expiries?.[k] ?? 0);
        work.next++;
      }
      if (work.next < keys.length && this.freeCount > 0) {
        queue[this.head++] = undefined;
        (waiting ??= []).push(work); // its next key waits for a block
      } else if (work.next === keys.length) {
        queue[this.head++] = undefined;
      }
    }
    if (waiting) for (let i = waiting.length - 1; i >= 0; i--) this.unshift(waiting[i]!);
    const taken = count > 0 ? core.submit(count) : 0;
    if (count > 0) {
      this.submits++;
      if (this.spinsLeft-- === SPINS_PER_TURN) {
        setImmediate(this.newTurn);
        this.turnStart = performance.now();
      } else if ((this.spinsLeft & 15) === 0 && performance.now() - this.turnStart > TURN_MS) {
        this.spinsLeft = 0; // this turn's time is spent
      }
      // What the core could not take goes back to the front, in order.
      for (let i = count - 1; i >= taken; i--) this.giveBack(this.submitted[i]!, pools);
    }
    if (this.head === queue.length) {
      queue.length = 0;
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > queue.length) {
      queue.splice(0, this.head);
      this.head = 0;
    }
    // Ops left queued start their deadline now (no clock read for the ones that went at once).
    for (let i = queue.length - 1; i >= this.head && queue[i]!.deadline === 0; i--) queue[i]!.deadline = performance.now() + this.timeoutMs;
    if (count > 0) this.onPolled(session, core.submittedResults, core.controlCount);
    if (this.session === session && this.inflightCount > 0 && this.pollMode === 'busy' && this.spinsLeft > 0) this.spin(session);
    // Ops that finished inside the submit freed their slots: the rest goes next (not after a refusal:
    // an op in flight holds the item buffer, and its completion flushes).
    if (count > 0 && this.freeCount > 0 && this.head < this.queue.length && (taken === count || this.inflightCount === 0)) this.scheduleFlush();
    this.startPolling();
    this.watchBackoffs(session);
    this.armTimer();
  }

  /** Event mode: ops waiting out a backoff (a held lock, a full ring) are retried by the next poll, a millisecond on. */
  private watchBackoffs(session: Session): void {
    if (this.pollMode !== 'event' || this.backoffTimer || this.session !== session || session.core.backoffs === 0) return;
    this.backoffTimer = setTimeout(() => ((this.backoffTimer = undefined), this.pollOnce()), 1);
  }

  /** Writes descriptor `i` (and its key and value into the arena) for key `k` of `owner` in a free slot; returns the arena used. */
  private describe(words: Uint32Array, arena: Buffer, i: number, at: number, owner: Work, k: number, type: KvOp, key: Bytes, keyBytes: number, value: Bytes | undefined, valueBytes: number, cls: number, block: number): number {
    const slot = this.freeSlots[--this.freeCount]!;
    const id = ((++this.uses << SLOT_BITS) | slot) >>> 0; // OpLayout.ID is one word: ids wrap
    this.owners[slot] = owner;
    this.ids[slot] = id;
    this.members[slot] = k;
    this.blocks[slot] = block;
    this.classes[slot] = cls;
    this.submitted[i] = slot;
    const units = cls >= 0 ? this.session!.pools.unitsOf(cls) : 0;
    return writeDescriptor(words, arena, i * OpLayout.WORDS, at, type, id, key, keyBytes, value, valueBytes, block < 0 ? 0 : block, units);
  }

  /** An op the core did not take: its slot and block back, its record to the queue's front. */
  private giveBack(slot: number, pools: Session['pools']): void {
    const owner = this.owners[slot]!;
    if (this.blocks[slot]! >= 0) pools.giveBack(this.classes[slot]!, this.blocks[slot]!);
    this.release(slot);
    if (owner instanceof PendingOp) owner.sent = false;
    else owner.next--; // a batch's untaken keys are the last it described
    if (this.queue.indexOf(owner, this.head) < 0) this.unshift(owner); // rare: the core had no item buffer
  }

  private unshift(work: Work): void {
    if (work.deadline === 0) work.deadline = performance.now() + this.timeoutMs;
    if (this.head > 0) this.queue[--this.head] = work;
    else this.queue.unshift(work);
  }

  /** Polls right after posting, a few µs: a NIC's round trip often ends within that, saving a turn of the event loop. */
  private spin(session: Session): void {
    const end = performance.now() + SPIN_MS;
    do {
      const n = session.core.poll();
      const controls = session.core.controlCount;
      if (n > 0 || controls > 0) this.onPolled(session, n, controls);
    } while (this.session === session && this.inflightCount > 0 && performance.now() < end);
  }

  private startPolling(): void {
    if (this.polling || this.pollMode === 'event') return;
    if (!this.session || (this.inflightCount === 0 && !this.session.pools.awaitingGrants && this.head === this.queue.length)) return;
    this.polling = true;
    const loop = () => {
      this.pollOnce();
      // Queued ops count too: a grant may be all they wait for.
      if (this.session && (this.inflightCount > 0 || this.session.pools.awaitingGrants || this.head < this.queue.length)) setImmediate(loop);
      else this.polling = false;
    };
    setImmediate(loop);
  }

  /** One call's output: `n` op results, then `controls` control completions. */
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

  /** The op of a result's id, or -1 (a stale id). */
  private slotOf(id: number): number {
    const slot = id & (SLOTS - 1);
    return this.owners[slot] !== undefined && this.ids[slot] === id ? slot : -1;
  }

  private onResults(session: Session, n: number): void {
    const words = session.core.resultWords;
    const scratch = session.core.scratch;
    const handout = ++this.handouts;
    // First the bytes each batch's values take in this hand-out: one Buffer each.
    for (let i = 0, o = 0; i < n; i++, o += ResultLayout.WORDS) {
      const slot = this.slotOf(words[o + ResultLayout.ID]!);
      const owner = slot < 0 ? undefined : this.owners[slot];
      if (!(owner instanceof Batch) || owner.type !== KvOp.GET || words[o + ResultLayout.STATUS] !== KvStatus.OK) continue;
      if (owner.handout !== handout) {
        owner.handout = handout;
        owner.chunk = undefined;
        owner.chunkBytes = owner.chunkUsed = 0;
      }
      owner.chunkBytes += words[o + ResultLayout.VALUE_LEN]!;
    }
    for (let i = 0, o = 0; i < n; i++, o += ResultLayout.WORDS) {
      const slot = this.slotOf(words[o + ResultLayout.ID]!);
      if (slot < 0) continue;
      const owner = this.owners[slot]!;
      const k = this.members[slot]!;
      if (words[o + ResultLayout.BLOCK_UNUSED] && this.blocks[slot]! >= 0) session.pools.giveBack(this.classes[slot]!, this.blocks[slot]!);
      this.release(slot);
      const status = words[o + ResultLayout.STATUS]!;
      if (status === KvStatus.OK || status === KvStatus.NOT_FOUND || status === KvStatus.VERSION_MISMATCH) this.retried[owner.type] += words[o + ResultLayout.DETAIL]!;
      if (owner instanceof Batch) {
        if (owner.failed) continue;
        if (status === KvStatus.OK && owner.type === KvOp.GET) {
          const at = words[o + ResultLayout.VALUE_OFFSET]!;
          const len = words[o + ResultLayout.VALUE_LEN]!;
          const chunk = (owner.chunk ??= Buffer.allocUnsafe(owner.chunkBytes));
          scratch.copy(chunk, owner.chunkUsed, at, at + len); // a copy: scratch is reused
          owner.out![owner.positions ? owner.positions[k]! : k] = chunk.subarray(owner.chunkUsed, (owner.chunkUsed += len));
        } else if (status !== KvStatus.OK && status !== KvStatus.NOT_FOUND) {
          owner.fail(errorForStatus(status, words[o + ResultLayout.DETAIL]!, `${opName(owner.type)} ${describe(owner.keys[k]!)}`));
          continue;
        }
        if (--owner.left === 0) owner.resolve(owner.out);
        continue;
      }
      if (status === KvStatus.OK || status === KvStatus.NOT_FOUND || (status === KvStatus.VERSION_MISMATCH && owner.mismatchResolves)) {
        let value: Buffer | undefined;
        if (owner.type === KvOp.GET && status === KvStatus.OK && owner.ext === undefined) {
          const at = words[o + ResultLayout.VALUE_OFFSET]!;
          const len = words[o + ResultLayout.VALUE_LEN]!;
          value = Buffer.allocUnsafe(len); // a copy: scratch is reused
          scratch.copy(value, 0, at, at + len);
        }
        if (owner.answer === Answer.VALUE || owner.answer === Answer.NONE) owner.resolve(value); // undefined but for a GET's value
        else if (owner.answer === Answer.LENGTH) owner.resolve(status === KvStatus.OK ? words[o + ResultLayout.VALUE_LEN]! : undefined); // in the registered buffer
        else {
          const version = BigInt(words[o + ResultLayout.VERSION_LO]!) | (BigInt(words[o + ResultLayout.VERSION_HI]!) << 32n);
          const retries = words[o + ResultLayout.DETAIL]!;
          const expiry = words[o + ResultLayout.EXPIRY_LO]! + words[o + ResultLayout.EXPIRY_HI]! * 0x100000000;
          owner.resolve(value ? { status, value, version, retries, expiry } : { status, version, retries, expiry, length: words[o + ResultLayout.VALUE_LEN]! });
        }
      } else {
        owner.reject(errorForStatus(status, words[o + ResultLayout.DETAIL]!, `${opName(owner.type)} ${describe(owner.key)}`));
      }
    }
  }

  /** Fails queued ops whose deadline passed (a grant that never came, a stuck server). */
  private armTimer(): void {
    if (this.timer || this.head === this.queue.length) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const now = performance.now();
      const late = (work: Work) => work.deadline !== 0 && work.deadline <= now;
      if (this.queue.some((work, i) => i >= this.head && late(work!))) {
        this.removeQueued(late, (work) => new KvTimeoutError(`${describe(work instanceof PendingOp ? work.key : work.keys[work.next]!)}: not started within ${this.timeoutMs} ms`));
      }
      this.armTimer();
    }, 100);
    this.timer.unref();
  }
}
