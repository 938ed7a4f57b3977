// The item heap's allocator, owned by the server. Blocks are granted to
// clients in batches by size class; a block superseded or deleted is freed
// only after the grace period, so a one-sided reader that found it through an
// old slot never sees it reused (readers retry when their GET took longer
// than half the grace period).
export interface HeapStats {
  /** Bytes granted to clients and not freed, by class size in bytes. */
  usedBytesByClass: Map<number, number>;
  usedBytes: number;
  /** Bytes never handed out yet (the bump region). */
  untouchedBytes: number;
  freeBlocks: number;
  waitingForGrace: number;
}

export class Heap {
  private bump = 0; // in units
  private readonly free: number[][];
  private readonly usedUnits: number[];
  private readonly graceQueue: Array<{ at: number; cls: number; block: number }> = [];
  private graceHead = 0;
  /** One bit per unit: set where a granted (or live) block starts. A block is freed only if its bit is set. */
  private readonly granted: Uint8Array;

  constructor(
    private readonly heapUnits: number,
    readonly classes: readonly number[],
    private readonly graceMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.free = classes.map(() => []);
    this.usedUnits = classes.map(() => 0);
    this.granted = new Uint8Array(Math.ceil(heapUnits / 8));
  }

  private mark(block: number, on: boolean): void {
    if (on) this.granted[block >> 3]! |= 1 << (block & 7);
    else this.granted[block >> 3]! &= ~(1 << (block & 7));
  }

  /** Is `block` a granted block of class `cls` that may be retired? (Guards against forged or repeated notices.) */
  isGranted(cls: number, block: number): boolean {
    return (
      Number.isInteger(block) && block >= 0 && cls >= 0 && cls < this.classes.length &&
      block + this.classes[cls]! <= this.heapUnits && (this.granted[block >> 3]! & (1 << (block & 7))) !== 0
    );
  }

  /** Up to `count` blocks of class `cls` (offsets in units); fewer when the heap is full. */
  grant(cls: number, count: number): number[] {
    const size = this.classes[cls]!;
    const out: number[] = [];
    const free = this.free[cls]!;
    while (out.length < count && free.length > 0) out.push(free.pop()!);
    while (out.length < count && this.bump + size <= this.heapUnits) {
      out.push(this.bump);
      this.bump += size;
    }
    this.usedUnits[cls]! += out.length * size;
    for (const block of out) this.mark(block, true);
    return out;
  }

  /** A block that is no longer referenced, reusable after the grace period. */
  retire(cls: number, block: number): boolean {
    if (!this.isGranted(cls, block)) return false;
    this.mark(block, false);
    this.graceQueue.push({ at: this.now() + this.graceMs, cls, block });
    return true;
  }

  /** A block that was never published (returned unused): reusable at once. */
  giveBack(cls: number, block: number): boolean {
    if (!this.isGranted(cls, block)) return false;
    this.mark(block, false);
    this.free[cls]!.push(block);
    this.usedUnits[cls]! -= this.classes[cls]!;
    return true;
  }

  /** Frees every retired block whose grace period has passed; returns how many. */
  reclaim(): number {
    const now = this.now();
    let n = 0;
    while (this.graceHead < this.graceQueue.length && this.graceQueue[this.graceHead]!.at <= now) {
      const { cls, block } = this.graceQueue[this.graceHead++]!;
      this.free[cls]!.push(block);
      this.usedUnits[cls]! -= this.classes[cls]!;
      n++;
    }
    if (this.graceHead > 4096 && this.graceHead * 2 > this.graceQueue.length) {
      this.graceQueue.splice(0, this.graceHead);
      this.graceHead = 0;
    }
    return n;
  }

  /**
   * After a restart: the blocks the live slots use are taken, everything else
   * is free (gaps carved into the largest classes that fit).
   */
  rebuild(live: Array<{ block: number; units: number }>): void {
    live.sort((a, b) => a.block - b.block);
    this.free.forEach((list) => (list.length = 0));
    this.usedUnits.fill(0);
    this.granted.fill(0);
    let cursor = 0;
    const carve = (from: number, to: number) => {
      for (let at = from, c = this.classes.length - 1; c >= 0; c--) {
        while (to - at >= this.classes[c]!) {
          this.free[c]!.push(at);
          at += this.classes[c]!;
        }
      }
    };
    for (const { block, units } of live) {
      if (block < cursor) continue; // overlapping would be corruption; never reuse it
      const cls = this.classOfUnits(units);
      carve(cursor, block);
      this.usedUnits[cls]! += this.classes[cls]!;
      this.mark(block, true);
      cursor = block + this.classes[cls]!;
    }
    this.bump = cursor;
  }

  /** The class of a published item of `units` units (its block's class). */
  classOfUnits(units: number): number {
    let lo = 0;
    let hi = this.classes.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.classes[mid]! >= units) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  stats(): HeapStats {
    const usedBytesByClass = new Map<number, number>();
    let usedBytes = 0;
    this.classes.forEach((size, cls) => {
      const bytes = this.usedUnits[cls]! * 64;
      if (bytes > 0) usedBytesByClass.set(size * 64, bytes);
      usedBytes += bytes;
    });
    return {
      usedBytesByClass,
      usedBytes,
      untouchedBytes: (this.heapUnits - this.bump) * 64,
      freeBlocks: this.free.reduce((n, list) => n + list.length, 0),
      waitingForGrace: this.graceQueue.length - this.graceHead,
    };
  }
}
