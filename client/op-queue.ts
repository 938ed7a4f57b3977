// The operations of a KvClient's servers over one provider (one CoreHost):
// queued, submitted to the host's native core, finished. Operations issued in
// one tick go to the core with one crossing, whichever members they are for
// (one doorbell per member per pass); each names its session's link, and
// the core drives every round trip and hands back one result per
// operation, from that same submit where completions are synchronous (shm),
// else from a poll: busy mode spins briefly after each submit, then polls on
// setImmediate; event mode waits for the CQ's event (the core re-arms it). Each
// call also hands back control completions (the host routes them by qpNum). A
// batch (getMany, putMany) is one record with one promise. Nothing is allocated
// per op beyond its promise and a GET's value (a single op's record is taken
// again once it resolved: PendingOp.of); ops in the core are found by slot (the
// op id's low bits), not in a Map.
//
// Ownership: a record is the queue's from add() until its promise settles; an
// op's heap block is its own once taken from its session's pools, and goes
// back to them when the core did not take the op or did not use the block.
import { type ClientCore, ControlWords, type PollMode, readCompletion } from '../native/index.js';
import { KvLayout, KvOp, KvStatus, OpLayout } from '../protocol/constants.js';
import { KvDisconnectedError, KvTimeoutError } from '../protocol/errors.js';
import type { CoreHost } from './core-host.js';
import { describe } from './keys.js';
import { Answer, Batch, type Bytes, microtask, type OpRequest, PendingOp, type Submission, writeArgument, writeDescriptor, writeExpiry } from './op-records.js';
import { type Slots, deliverResults } from './op-results.js';
import { BackupBlocks } from './backup-blocks.js';
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

/** The record's ops run on `session`: as their primary, or as a replicated write's backup. */
const runsOn = (work: Work, session: Session | undefined): boolean =>
  work.session === session || (work instanceof PendingOp && session !== undefined && work.backups !== undefined && work.backups.includes(session));

export class OpQueue implements Slots {
  /** The sessions whose ops it takes (attach() to lose() or close()). */
  private readonly attached = new Set<Session>();
  /** Waiting records, from `head` to `tail` (a batch stays until all its keys are in the core). Emptied, it keeps its storage. */
  private queue: Array<Work | undefined> = [];
  private head = 0;
  private tail = 0;
  /** By slot: the record of the op in the core, its key index (batches), its block and size class. */
  readonly owners: Array<Work | undefined> = new Array<Work | undefined>(SLOTS).fill(undefined);
  private readonly ids = new Uint32Array(SLOTS);
  readonly members = new Int32Array(SLOTS);
  readonly blocks = new Int32Array(SLOTS).fill(-1);
  readonly classes = new Int32Array(SLOTS);
  readonly sessions: Array<Session | undefined> = new Array<Session | undefined>(SLOTS).fill(undefined);
  /** By slot: a replicated write's blocks on its backups. */
  readonly backups = new BackupBlocks(SLOTS);
  private readonly freeSlots = Int32Array.from({ length: SLOTS }, (_, i) => SLOTS - 1 - i);
  private freeCount = SLOTS;
  /** The slot of each descriptor of the batch being submitted. */
  private readonly submitted = new Int32Array(SLOTS);
  private uses = 0;
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

  /** The host's core takes the ops; every control completion goes to the host to route (after the op results of the same call). */
  constructor(
    private readonly host: CoreHost,
    private readonly timeoutMs: number,
    private readonly pollMode: PollMode,
  ) {}

  /** Ops may go to `session` from now on (until lose() or close()). */
  attach(session: Session): void {
    this.attached.add(session);
  }

  /** Ops in the core waiting out a backoff (every member's). */
  get backoffs(): number {
    return this.host.core?.backoffs ?? 0;
  }

  /** Ops in the core. */
  get inflightCount(): number {
    return SLOTS - this.freeCount;
  }

  /** Ops in the core for `session`. */
  inflightOf(session: Session): number {
    let n = 0;
    for (let slot = 0; slot < SLOTS; slot++) if (this.owners[slot] !== undefined && this.sessions[slot] === session) n++;
    return n;
  }

  /** Queues one operation on `session` for the next flush (in this tick's microtasks). */
  add(session: Session, op: PendingOp): Submission {
    op.session = session;
    this.queue[this.tail++] = op;
    this.scheduleFlush();
    return op;
  }

  /** Queues a batch on `session`; its keys go to the core as slots allow. */
  addBatch(session: Session, batch: Batch): void {
    batch.session = session;
    this.queue[this.tail++] = batch;
    this.scheduleFlush();
  }

  /** Blocks by size class the ops queued on `session` wait for (a reclaim leaves them). */
  needed(session: Session): Map<number, number> {
    const needed = new Map<number, number>();
    const add = (cls: number) => {
      if (cls >= 0) needed.set(cls, (needed.get(cls) ?? 0) + 1);
    };
    for (let i = this.head; i < this.tail; i++) {
      const work = this.queue[i]!;
      if (work.session !== session) continue;
      if (work instanceof PendingOp) add(work.cls);
      else if (work.classes) for (let k = work.next; k < work.keys.length; k++) add(work.classes[k]!);
    }
    return needed;
  }

  /** Fails the ops queued on `session` waiting for a block of size class `cls` (its server has none left). */
  failWaiting(session: Session, cls: number, error: Error): void {
    this.removeQueued((work) => work.session === session && (work instanceof PendingOp ? work.cls === cls : work.classes !== undefined && work.classes.subarray(work.next).includes(cls)), error);
  }

  scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    if (this.spinsLeft > 0) microtask(this.flushTask);
    else setImmediate(this.flushTask); // this turn's budget is spent: let timers and I/O run first
  }

  /** Polls the core until it has nothing more (in event mode the core re-arms the CQ), then flushes. */
  pollOnce(): void {
    const core = this.host.core;
    if (!core) return;
    for (;;) {
      const n = core.poll();
      const controls = core.controlCount;
      if (n === 0 && controls === 0) break;
      this.onPolled(core, n, controls);
    }
    if (this.head < this.tail) this.flush();
    else this.watchBackoffs(core);
  }

  /** The session's connection is lost: finish what the core holds of it, then the rest of its queued ops. */
  lose(session: Session, reason: string): void {
    session.lostReason = reason; // in the errors of its ops the core fails now
    const core = this.host.core;
    if (core) {
      core.failAll(KvStatus.DISCONNECTED, session.link);
      this.onPolled(core, core.poll(), core.controlCount);
    }
    const error = new KvDisconnectedError(`lost the server: ${reason}`);
    this.failInflight(error, session);
    // A queued replicated write naming it as a backup goes too: its link may soon be another server's.
    this.removeQueued((work) => runsOn(work, session), error);
    this.attached.delete(session);
    if (this.head < this.tail) this.scheduleFlush(); // the other members' ops may have slots now
  }

  /** Fails what is queued on `session` (its server client is closing). */
  close(session: Session | undefined, error: Error): void {
    this.removeQueued((work) => runsOn(work, session), error);
  }

  /** Takes nothing more from the timers (the host is closing). */
  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
  }

  /** Waits, until `deadline` at most, for the session's ops in the core (they may hold bucket locks), then fails the rest. */
  async drain(session: Session, deadline: number, error: Error): Promise<void> {
    while (this.inflightOf(session) > 0 && performance.now() < deadline) {
      this.pollOnce();
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.failInflight(error, session);
    this.attached.delete(session);
    if (this.head < this.tail) this.scheduleFlush();
  }

  /** Fails the ops in the core of `session` (undefined: of every session). */
  private failInflight(error: Error, session: Session | undefined): void {
    for (let slot = 0; slot < SLOTS; slot++) {
      const owner = this.owners[slot];
      if (!owner || (session !== undefined && this.sessions[slot] !== session)) continue;
      // A replicated write is answered by the core once its followers have ended (their
      // backups' blocks, and a registered buffer they may still read, are not free before),
      // unless this session is the core's last: the core closes with it, unpolled.
      if (this.backups.names(slot) && this.host.links > 1) continue;
      this.release(slot);
      if (owner instanceof PendingOp) owner.reject(error);
      else owner.fail(error);
    }
  }

  /** The core closed with its last link (CoreHost.detach): hands out what it answered as it closed, then fails what it left. */
  closed(core: ClientCore): void {
    for (let n = core.poll(); n > 0 || core.controlCount > 0; n = core.poll()) this.onPolled(core, n, core.controlCount);
    this.failInflight(new KvDisconnectedError('the client closed its last connection'), undefined); // no link is left: none is skipped
  }

  /** Takes the queued records `which` picks out of the queue and fails them with `error`. */
  private removeQueued(which: (work: Work) => boolean, error: Error | ((work: Work) => Error)): void {
    const kept: Work[] = [];
    const queued = this.queue;
    const { head, tail } = this;
    this.queue = kept;
    this.head = this.tail = 0;
    for (let i = head; i < tail; i++) {
      const work = queued[i]!;
      const why = () => (typeof error === 'function' ? error(work) : error);
      if (!which(work)) kept[this.tail++] = work;
      else if (work instanceof PendingOp) work.reject(why());
      else work.fail(why());
    }
  }

  release(slot: number): void {
    this.owners[slot] = undefined;
    this.blocks[slot] = -1;
    this.backups.clear(slot);
    this.freeSlots[this.freeCount++] = slot;
  }

  /** Submits what fits (slots, arena, granted blocks) with one crossing. */
  private flush(): void {
    const core = this.host.core;
    if (!core || this.head === this.tail) return;
    const words = core.opWords;
    const arena = core.arena;
    let count = 0;
    let arenaUsed = 0;
    let waiting: Work[] | undefined; // no block yet: until the grant arrives
    const queue = this.queue;
    fill: while (this.head < this.tail && this.freeCount > 0) {
      const work = queue[this.head]!;
      const session = work.session!;
      const pools = session.pools;
      if (work instanceof PendingOp) {
        if (arenaUsed + work.keyBytes + work.valueBytes > arena.length) break;
        let block = -1;
        if (work.cls >= 0) block = pools.take(work.cls) ?? -1;
        queue[this.head++] = undefined;
        if ((work.cls >= 0 && block < 0) || (work.backups !== undefined && !this.backups.take(work))) {
          if (block >= 0) pools.giveBack(work.cls, block);
          (waiting ??= []).push(work);
          continue;
        }
        arenaUsed = this.describe(words, arena, count++, arenaUsed, session, work, 0, work.type, work.key, work.keyBytes, work.value, work.valueBytes, work.cls, block);
        if (work.backups !== undefined) this.backups.describe(words, (count - 1) * OpLayout.WORDS, this.submitted[count - 1]!, work);
        if (work.epoch !== 0) words[(count - 1) * OpLayout.WORDS + OpLayout.EPOCH] = work.epoch;
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
        arenaUsed = this.describe(words, arena, count++, arenaUsed, session, work, k, work.type, keys[k]!, keyBytes[k]!, values?.[k], vb, cls, block);
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
      for (let i = count - 1; i >= taken; i--) this.giveBack(this.submitted[i]!);
    }
    if (this.head === this.tail) {
      this.head = this.tail = 0; // every entry taken was cleared; the array keeps its storage (truncated, V8 frees it)
    } else if (this.head > 1024 && this.head * 2 > this.tail) {
      queue.copyWithin(0, this.head, this.tail);
      queue.fill(undefined, this.tail - this.head, this.tail);
      this.tail -= this.head;
      this.head = 0;
    }
    // Ops left queued start their deadline now (no clock read for the ones that went at once).
    for (let i = this.tail - 1; i >= this.head && queue[i]!.deadline === 0; i--) queue[i]!.deadline = performance.now() + this.timeoutMs;
    if (count > 0) this.onPolled(core, core.submittedResults, core.controlCount);
    if (this.host.core === core && this.inflightCount > 0 && this.pollMode === 'busy' && this.spinsLeft > 0) this.spin(core);
    // Ops that finished inside the submit freed their slots: the rest goes next (not after a refusal:
    // an op in flight holds the item buffer, and its completion flushes).
    if (count > 0 && this.freeCount > 0 && this.head < this.tail && (taken === count || this.inflightCount === 0)) this.scheduleFlush();
    this.startPolling();
    this.watchBackoffs(core);
    this.armTimer();
  }

  /** Event mode: ops waiting out a backoff (a held lock, a full ring) are retried by the next poll, a millisecond on. */
  private watchBackoffs(core: ClientCore): void {
    if (this.pollMode !== 'event' || this.backoffTimer || this.host.core !== core || core.backoffs === 0) return;
    this.backoffTimer = setTimeout(this.backoffOver, 1);
  }
  // Made once: an arrow inside watchBackoffs (run per flush) would cost every call a context for `this`.
  private readonly backoffOver = (): void => void ((this.backoffTimer = undefined), this.pollOnce());

  /** Writes descriptor `i` (and its key and value into the arena) for key `k` of `owner` on `session` in a free slot; returns the arena used. */
  private describe(words: Uint32Array, arena: Buffer, i: number, at: number, session: Session, owner: Work, k: number, type: KvOp, key: Bytes, keyBytes: number, value: Bytes | undefined, valueBytes: number, cls: number, block: number): number {
    const slot = this.freeSlots[--this.freeCount]!;
    const id = ((++this.uses << SLOT_BITS) | slot) >>> 0; // OpLayout.ID is one word: ids wrap
    this.owners[slot] = owner;
    this.ids[slot] = id;
    this.members[slot] = k;
    this.blocks[slot] = block;
    this.classes[slot] = cls;
    this.sessions[slot] = session;
    this.submitted[i] = slot;
    const units = cls >= 0 ? session.pools.unitsOf(cls) : 0;
    words[i * OpLayout.WORDS + OpLayout.CONNECTION] = session.link;
    return writeDescriptor(words, arena, i * OpLayout.WORDS, at, type, id, key, keyBytes, value, valueBytes, block < 0 ? 0 : block, units);
  }

  /** An op the core did not take: its slot and block back, its record to the queue's front. */
  private giveBack(slot: number): void {
    const owner = this.owners[slot]!;
    if (this.blocks[slot]! >= 0) this.sessions[slot]!.pools.giveBack(this.classes[slot]!, this.blocks[slot]!);
    this.backups.giveBack(slot, ~0);
    this.release(slot);
    if (owner instanceof PendingOp) owner.sent = false;
    else owner.next--; // a batch's untaken keys are the last it described
    if (this.queue.indexOf(owner, this.head) < 0) this.unshift(owner); // rare: the core had no item buffer
  }

  private unshift(work: Work): void {
    if (work.deadline === 0) work.deadline = performance.now() + this.timeoutMs;
    if (this.head > 0) return void (this.queue[--this.head] = work);
    this.queue.unshift(work);
    this.tail++;
  }

  /** Polls right after posting, a few µs: a NIC's round trip often ends within that, saving a turn of the event loop. */
  private spin(core: ClientCore): void {
    const end = performance.now() + SPIN_MS;
    do {
      const n = core.poll();
      const controls = core.controlCount;
      if (n > 0 || controls > 0) this.onPolled(core, n, controls);
    } while (this.host.core === core && this.inflightCount > 0 && performance.now() < end);
  }

  /** Some session waits for a grant (its queued ops may need it). */
  private awaitingGrants(): boolean {
    for (const session of this.attached) if (session.pools.awaitingGrants) return true;
    return false;
  }

  private startPolling(): void {
    if (this.polling || this.pollMode === 'event') return;
    if (!this.host.core || (this.inflightCount === 0 && !this.awaitingGrants() && this.head === this.tail)) return;
    this.polling = true;
    setImmediate(this.pollLoop);
  }

  // Made once, as failLate: a closure made in startPolling or armTimer costs its context per call (both run per flush).
  private readonly pollLoop = (): void => {
    this.pollOnce();
    // Queued ops count too: a grant may be all they wait for.
    if (this.host.core && (this.inflightCount > 0 || this.awaitingGrants() || this.head < this.tail)) setImmediate(this.pollLoop);
    else this.polling = false;
  };

  /** One call's output: `n` op results, then `controls` control completions. */
  private onPolled(core: ClientCore, n: number, controls: number): void {
    if (n > 0) deliverResults(this, core, n);
    if (controls > 0) this.onControls(core, controls);
  }

  private onControls(core: ClientCore, count: number): void {
    const words = core.controlWords;
    for (let i = 0; i < count; i++) {
      // Not flush() from here (a session's onControl schedules one): flush polls, which would overwrite these words.
      this.host.route(readCompletion(words, i, ControlWords.ENTRIES));
    }
  }

  /** The op of a result's id, or -1 (a stale id). */
  slotOf(id: number): number {
    const slot = id & (SLOTS - 1);
    return this.owners[slot] !== undefined && this.ids[slot] === id ? slot : -1;
  }

  /** Fails queued ops whose deadline passed (a grant that never came, a stuck server). */
  private armTimer(): void {
    if (this.timer || this.head === this.tail) return;
    this.timer = setTimeout(this.failLate, 100);
    this.timer.unref();
  }

  private readonly failLate = (): void => {
    this.timer = undefined;
    const now = performance.now();
    const late = (work: Work) => work.deadline !== 0 && work.deadline <= now;
    if (this.queue.some((work, i) => i >= this.head && i < this.tail && late(work!))) {
      this.removeQueued(late, (work) => new KvTimeoutError(`${describe(work instanceof PendingOp ? work.key : work.keys[work.next]!)}: not started within ${this.timeoutMs} ms`));
    }
    this.armTimer();
  };
}
