// What the server knows of each item's use, by heap block (in units): when
// its notice published it, when clients last read it (access bits, see
// access-bits.ts) and, under lfu, a saturating count of those reads. Kept in
// the server's memory, 4 bytes per 64-byte unit (5 under lfu), never in the
// region. A block whose stamp is 0 is no candidate for eviction or expiry:
// its PUT's notice has not been drained (the block is still in its writer's
// held set, whose departure would retire it again), or it was never
// published through a notice (a restart stamps the live ones).

/** Stamps count ticks of this many ms since the server started (a Uint32 lasts 198 days). */
export const TICK_MS = 4;

export class ItemUse {
  /** Last publish or read, in ticks (0: not a candidate). */
  readonly stamp: Uint32Array;
  /** lfu only: reads seen, saturating at 255, halved every decay period. */
  readonly hits: Uint8Array | undefined;
  private readonly start = performance.now();

  constructor(heapUnits: number, lfu: boolean) {
    this.stamp = new Uint32Array(heapUnits);
    this.hits = lfu ? new Uint8Array(heapUnits) : undefined;
  }

  /** Now in ticks (at least 1: 0 means "no candidate"). */
  now(): number {
    return 1 + Math.floor((performance.now() - this.start) / TICK_MS);
  }

  /** A notice published the block: a candidate from now on, as fresh as a read. */
  published(block: number, now: number): void {
    this.stamp[block] = now;
    if (this.hits) this.hits[block] = 1;
  }

  /** A client read the item (its access bit was set). */
  read(block: number, now: number): void {
    if (this.stamp[block] === 0) return; // not published (yet): no candidate
    this.stamp[block] = now;
    const { hits } = this;
    if (hits && hits[block]! < 255) hits[block]!++;
  }

  /** The block was superseded, deleted, evicted or expired: no candidate until published again. */
  gone(block: number): void {
    this.stamp[block] = 0;
    if (this.hits) this.hits[block] = 0;
  }

  /** lfu's aging: every count halves, so keys hot long ago give way to keys hot now. */
  decay(): void {
    const { hits } = this;
    if (!hits) return;
    for (let i = 0; i < hits.length; i++) if (hits[i] !== 0) hits[i] = Math.max(1, hits[i]! >> 1);
  }
}
