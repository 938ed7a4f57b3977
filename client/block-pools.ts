// The heap blocks one session was granted, by size class. A PUT (CAS, INCR,
// LOCK) takes a block of its item's size class from here; the pool asks the
// server for a batch when it runs low, gives blocks back when the server is
// short of memory (reclaim), and returns what is left when the session closes.
// The server owns the heap; these blocks are this client's until returned.
import { type ControlMessage, type Granted, RETURN_BATCH, grantBatch } from '../protocol/control.js';
import { KvLayout } from '../protocol/constants.js';

/** Most `return` messages answering one reclaim (the biggest pools first). */
const RECLAIM_ANSWER_MESSAGES = 16;

export class BlockPools {
  /** Granted blocks by size class (offsets in units from the heap's start). */
  private readonly pools: number[][];
  /** Blocks one grant asks for, by size class (sized by bytes: grantBatch). */
  private readonly batches: number[];
  /** Size classes with a grant request outstanding. */
  private readonly granting = new Set<number>();

  /** `units`: the heap's block sizes in units, smallest first (the hello's layout.classes). */
  constructor(
    private readonly units: readonly number[],
    heapBytes: number,
    private readonly send: (message: ControlMessage) => void,
  ) {
    this.pools = units.map(() => []);
    this.batches = units.map((u) => grantBatch(u * KvLayout.UNIT_BYTES, heapBytes));
  }

  /** A size class's block size, in units. */
  unitsOf(cls: number): number {
    return this.units[cls]!;
  }

  /** Some grant has not been answered yet. */
  get awaitingGrants(): boolean {
    return this.granting.size > 0;
  }

  /**
   * A block of size class `cls`, or undefined when there is none until a grant
   * arrives. Asks for the next batch as soon as less than one is left: the answer comes a
   * moderation interval or more later (server/fabric.ts), and what is left must outlast it.
   * For a batch of one (blocks of 16 KiB and more) that is as the last block is taken, so
   * back-to-back PUTs of large values do not each wait for a grant's round trip, and the
   * client holds at most one spare block of such a class.
   */
  take(cls: number): number | undefined {
    const pool = this.pools[cls]!;
    if (pool.length < Math.max(this.batches[cls]!, 2)) this.request(cls);
    return pool.pop();
  }

  /** A block taken and not used (the core did not take its op, or did not need it). */
  giveBack(cls: number, block: number): void {
    this.pools[cls]!.push(block);
  }

  /** A grant arrived. False when it names a size class this session does not have. */
  granted(message: Granted): boolean {
    this.granting.delete(message.c);
    const pool = this.pools[message.c];
    if (!pool) return false;
    // Beneath the blocks still in hand (take() pops from the top): a grant arrives while up to
    // a batch is left, and on top it would leave those at the bottom unused for good.
    this.pools[message.c] = message.blocks.slice().reverse().concat(pool);
    return true;
  }

  /**
   * The server is short of memory: the blocks in the pools go back, except, per size class,
   * as many as queued ops wait for (`needed`; taking those would starve them: a grant that
   * just arrived for them would go straight back). The biggest pools first, in at most
   * RECLAIM_ANSWER_MESSAGES returns, the last marked end.
   */
  answerReclaim(needed: ReadonlyMap<number, number>): void {
    const returns: Array<{ c: number; blocks: number[] }> = [];
    const spare = this.pools.map((pool, c) => ({ c, count: Math.max(0, pool.length - (needed.get(c) ?? 0)) }));
    spare.sort((a, b) => b.count * this.units[b.c]! - a.count * this.units[a.c]!);
    for (let { c, count } of spare) {
      const pool = this.pools[c]!;
      while (count > 0 && returns.length < RECLAIM_ANSWER_MESSAGES) {
        const blocks = pool.splice(-Math.min(count, RETURN_BATCH));
        count -= blocks.length;
        returns.push({ c, blocks });
      }
    }
    if (returns.length === 0) returns.push({ c: 0, blocks: [] });
    returns.forEach(({ c, blocks }, i) => this.send(i === returns.length - 1 ? { t: 'return', c, blocks, end: true } : { t: 'return', c, blocks }));
  }

  /** Gives every unused block back (the session is closing). */
  returnAll(): void {
    this.pools.forEach((blocks, c) => {
      for (let i = 0; i < blocks.length; i += RETURN_BATCH) this.send({ t: 'return', c, blocks: blocks.slice(i, i + RETURN_BATCH) });
    });
  }

  private request(cls: number): void {
    if (this.granting.has(cls)) return;
    this.granting.add(cls);
    this.send({ t: 'grant', c: cls, n: this.batches[cls]! });
  }
}
