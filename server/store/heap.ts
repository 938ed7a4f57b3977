// The item heap's allocator, owned by the server. The heap is one run of
// 64-byte units cut into chunks: blocks that are out (granted to a client, or
// holding a live item), blocks waiting out their grace period, and free
// extents. A grant of class c cuts a block of that class's size from the
// front of the smallest free extent that fits; a freed block merges with the
// free extents on either side, so memory freed by one size class is usable by
// every other (no class keeps what it once had). A block superseded or deleted
// is freed only after the grace period, so a one-sided reader that found it
// through an old slot never sees it reused (readers retry when their GET took
// longer than half the grace period).
//
// What a steady stream of PUTs frees is what the next grants of its class ask
// for: a freed block first waits on its class's recycle stack, which a grant of
// that class takes from first (nothing merged or cut); a grant that finds no
// free extent that fits merges every recycled block and looks again.
//
// All of it lives in the server's JS memory; nothing here writes the region.
// The notice drain (native/server/notice_drain.cc) reads and clears the
// granted bitmap of retired blocks in native code (bitmaps()), then hands
// them to enqueueRetired(): retire() is that check, that bit and that queue.
import { UnitTable } from './unit-table.js';

/** At most 1/RECYCLE_SHARE of the heap waits unmerged: enough for one reclaim (~100 ms of PUTs; 1/64 was not). */
const RECYCLE_SHARE = 4;

export interface HeapStats {
  /** Bytes granted to clients and not freed, by class size in bytes. */
  usedBytesByClass: Map<number, number>;
  usedBytes: number;
  /** Bytes never handed out yet (past the highest block ever granted). */
  untouchedBytes: number;
  /** Free extents (a freed block merges with its free neighbours into one), and recycled blocks not merged yet. */
  freeBlocks: number;
  waitingForGrace: number;
  /** Bytes of the blocks waiting out their grace period (counted in usedBytes until freed). */
  graceBytes: number;
}

/**
 * The starts of the free extents of one bin, as a stack. An extent merged away or taken
 * whole is not searched for: its entry goes stale and is skipped when it comes up (the
 * heap's maps say whether a start is still a free extent of this bin), and the stack is
 * compacted when stale entries outnumber live ones.
 */
class FreeBin {
  private stack: number[] = [];
  /** Free extents in this bin. */
  live = 0;

  constructor(
    private readonly bin: number,
    private readonly binOfFree: (start: number) => number,
  ) {}

  add(start: number): void {
    this.stack.push(start);
    this.live++;
    if (this.stack.length > 2 * this.live + 64) this.compact();
  }

  /** One extent of this bin left it (the caller removes it from the heap's maps). */
  remove(): void {
    this.live--;
  }

  /** The start of some free extent of this bin (live > 0); it stays counted until remove(). */
  take(): number {
    for (;;) {
      const start = this.stack.pop();
      if (start === undefined) throw new Error(`heap bin ${this.bin} counts ${this.live} free extents and holds none`);
      if (this.binOfFree(start) === this.bin) return start;
    }
  }

  clear(): void {
    this.stack = [];
    this.live = 0;
  }

  private compact(): void {
    // Sorted, so that a start freed twice into this bin (two entries) keeps one.
    const valid = this.stack.filter((start) => this.binOfFree(start) === this.bin).sort((a, b) => b - a);
    this.stack = valid.filter((start, i) => i === 0 || start !== valid[i - 1]);
  }
}

/** Blocks waiting out their grace period, oldest first: flat arrays, no object per block. */
class GraceQueue {
  private at = new Float64Array(1024);
  private cls = new Uint32Array(1024);
  private block = new Uint32Array(1024);
  private head = 0;
  private tail = 0;

  get length(): number {
    return this.tail - this.head;
  }

  push(at: number, cls: number, block: number): void {
    if (this.tail === this.at.length) this.makeRoom();
    this.at[this.tail] = at;
    this.cls[this.tail] = cls;
    this.block[this.tail++] = block;
  }

  /** Takes the oldest entry if its time has come: its index for cls/block, or -1. */
  takeDue(now: number): number {
    return this.head < this.tail && this.at[this.head]! <= now ? this.head++ : -1;
  }

  clsAt(i: number): number {
    return this.cls[i]!;
  }

  blockAt(i: number): number {
    return this.block[i]!;
  }

  clear(): void {
    this.head = this.tail = 0;
  }

  /** Moves the live entries to the front, growing the arrays when more than half full. */
  private makeRoom(): void {
    const live = this.tail - this.head;
    const size = live * 2 > this.at.length ? this.at.length * 2 : this.at.length;
    const move = <T extends Float64Array | Uint32Array>(from: T, to: T): T => {
      to.set(from.subarray(this.head, this.tail));
      return to;
    };
    this.at = move(this.at, size === this.at.length ? this.at : new Float64Array(size));
    this.cls = move(this.cls, size === this.cls.length ? this.cls : new Uint32Array(size));
    this.block = move(this.block, size === this.block.length ? this.block : new Uint32Array(size));
    this.head = 0;
    this.tail = live;
  }
}

export class Heap {
  /** Free extents: start -> length, and end -> start (to merge with the one before). */
  private readonly freeLength = new UnitTable();
  private readonly freeEndingAt = new UnitTable();
  /**
   * Free extents by length: bin i holds those at least classes[i] and shorter than
   * classes[i + 1] (so any of them fits a class-i block); the last bin those longer than
   * the largest class.
   */
  private readonly bins: FreeBin[];
  /** One bit per unit: set where a chunk (out, waiting for grace, or free) starts. */
  private readonly chunkStart: Uint32Array;
  /** One bit per unit: set where a granted (or live) block starts. A block is freed only if its bit is set. */
  private readonly granted: Uint32Array;
  private readonly usedUnits: number[];
  private readonly graceQueue = new GraceQueue();
  /** Freed blocks by class, not merged: the next grants of their class take them first. */
  private readonly recycled: number[][];
  /** Units on the recycle stacks, at most recycleLimit (then a freed block merges at once). */
  private recycledUnits = 0;
  private readonly recycleLimit: number;
  /** End of the highest block ever granted (untouchedBytes). */
  private touched = 0;
  /** Units of the blocks in the grace queue (eviction counts them as already freed). */
  private graceUnits = 0;

  constructor(
    private readonly heapUnits: number,
    readonly classes: readonly number[],
    private readonly graceMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.usedUnits = classes.map(() => 0);
    this.recycled = classes.map(() => []);
    this.recycleLimit = Math.floor(heapUnits / RECYCLE_SHARE);
    this.bins = Array.from({ length: classes.length + 1 }, (_, bin) => new FreeBin(bin, (start) => this.binOfFree(start)));
    this.chunkStart = new Uint32Array(Math.ceil(heapUnits / 32));
    this.granted = new Uint32Array(Math.ceil(heapUnits / 32));
    this.rebuild([]);
  }

  /** Is `block` a granted block of class `cls` that may be retired? (Guards against forged or repeated notices.) */
  isGranted(cls: number, block: number): boolean {
    if (!Number.isInteger(block) || block < 0 || !Number.isInteger(cls) || cls < 0 || cls >= this.classes.length) return false;
    const end = block + this.classes[cls]!;
    // Out, and exactly one chunk: the next chunk starts at its end, none inside it.
    return end <= this.heapUnits && bit(this.granted, block) && (end === this.heapUnits || bit(this.chunkStart, end)) && !anyBit(this.chunkStart, block + 1, end);
  }

  /** Up to `count` blocks of class `cls` (offsets in units); fewer when no free extent fits more. */
  grant(cls: number, count: number): number[] {
    const size = this.classes[cls]!;
    const out: number[] = [];
    const recycled = this.recycled[cls]!;
    while (out.length < count && recycled.length > 0) {
      const block = recycled.pop()!;
      this.recycledUnits -= size;
      setBit(this.granted, block, true);
      out.push(block);
    }
    let bin = cls;
    while (out.length < count) {
      while (bin < this.bins.length && this.bins[bin]!.live === 0) bin++;
      if (bin === this.bins.length) {
        if (this.recycledUnits === 0) break;
        this.merge(); // what other classes recycled may fit, merged
        bin = cls;
        continue;
      }
      const start = this.bins[bin]!.take();
      const length = this.freeLength.get(start)!;
      this.removeFree(start, length);
      // as many blocks as wanted and fit, from its front
      const cut = Math.min(count - out.length, Math.floor(length / size));
      for (let block = start; block < start + cut * size; block += size) {
        setBit(this.chunkStart, block, true);
        setBit(this.granted, block, true);
        out.push(block);
      }
      const rest = start + cut * size;
      if (rest < start + length) {
        setBit(this.chunkStart, rest, true);
        this.addFree(rest, start + length - rest);
      }
      this.touched = Math.max(this.touched, rest);
      bin = cls; // the rest may be in a smaller bin
    }
    this.usedUnits[cls]! += out.length * size;
    return out;
  }

  /** A block that is no longer referenced, reusable after the grace period. */
  retire(cls: number, block: number): boolean {
    if (!this.isGranted(cls, block)) return false;
    setBit(this.granted, block, false);
    this.graceQueue.push(this.graceEnd(), cls, block);
    this.graceUnits += this.classes[cls]!;
    return true;
  }

  /** Bytes of the blocks waiting out their grace period (eviction counts them as freed). */
  get graceBytes(): number {
    return this.graceUnits * 64;
  }

  /** When a block retired now becomes reusable (one clock read per batch of retirements). */
  graceEnd(): number {
    return this.now() + this.graceMs;
  }

  /**
   * A block the notice drain retired: it checked isGranted's conditions on bitmaps() and
   * cleared the block's granted bit (native/server/notice_drain.cc); reusable at `at`.
   */
  enqueueRetired(cls: number, block: number, at: number): void {
    this.graceQueue.push(at, cls, block);
    this.graceUnits += this.classes[cls]!;
  }

  /** The bitmaps isGranted reads (chunk starts, granted block starts), for the notice drain. */
  bitmaps(): { chunkStart: Uint32Array; granted: Uint32Array } {
    return { chunkStart: this.chunkStart, granted: this.granted };
  }

  /** A block that was never published (returned unused): reusable at once. */
  giveBack(cls: number, block: number): boolean {
    if (!this.isGranted(cls, block)) return false;
    setBit(this.granted, block, false);
    this.free(cls, block);
    return true;
  }

  /** Frees every retired block whose grace period has passed; returns how many. */
  reclaim(): number {
    const now = this.now();
    let n = 0;
    for (let i = this.graceQueue.takeDue(now); i >= 0; i = this.graceQueue.takeDue(now)) {
      const cls = this.graceQueue.clsAt(i);
      this.graceUnits -= this.classes[cls]!;
      this.free(cls, this.graceQueue.blockAt(i));
      n++;
    }
    return n;
  }

  /**
   * After a restart: the blocks the live slots use are taken, every gap between them is one
   * free extent. Slots are read from the region: one whose block overlaps another or runs
   * past the heap is left out (never reused either: it would be corruption).
   */
  rebuild(live: Array<{ block: number; units: number }>): void {
    live.sort((a, b) => a.block - b.block);
    this.freeLength.clear();
    this.freeEndingAt.clear();
    this.bins.forEach((bin) => bin.clear());
    this.chunkStart.fill(0);
    this.granted.fill(0);
    this.usedUnits.fill(0);
    this.graceQueue.clear();
    this.graceUnits = 0;
    for (const stack of this.recycled) stack.length = 0;
    this.recycledUnits = 0;
    let cursor = 0;
    for (const { block, units } of live) {
      const cls = this.classOfUnits(units);
      if (!Number.isInteger(block) || block < cursor || cls >= this.classes.length || block + this.classes[cls]! > this.heapUnits) continue;
      if (block > cursor) this.addChunk(cursor, block - cursor);
      setBit(this.chunkStart, block, true);
      setBit(this.granted, block, true);
      this.usedUnits[cls]! += this.classes[cls]!;
      cursor = block + this.classes[cls]!;
    }
    if (cursor < this.heapUnits) this.addChunk(cursor, this.heapUnits - cursor);
    this.touched = cursor;
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
      untouchedBytes: (this.heapUnits - this.touched) * 64,
      freeBlocks: this.freeLength.size + this.recycledBlocks(),
      waitingForGrace: this.graceQueue.length,
      graceBytes: this.graceUnits * 64,
    };
  }

  /**
   * Gives every recycled block back to the free extents, merged with its free neighbours (a
   * grant does when nothing else fits; the tests, to see the extents whole).
   */
  merge(): void {
    for (let cls = 0; cls < this.recycled.length; cls++) {
      const stack = this.recycled[cls]!;
      for (let block = stack.pop(); block !== undefined; block = stack.pop()) this.addMerged(block, this.classes[cls]!);
    }
    this.recycledUnits = 0;
  }

  /** A block (out, its granted bit already cleared) becomes free: recycled for its class, or merged with free neighbours. */
  private free(cls: number, block: number): void {
    const size = this.classes[cls]!;
    this.usedUnits[cls]! -= size;
    if (this.recycledUnits + size <= this.recycleLimit) {
      this.recycled[cls]!.push(block);
      this.recycledUnits += size;
      return;
    }
    this.addMerged(block, size);
  }

  /** A free block of `size` units into the free extents, merged with its free neighbours. */
  private addMerged(block: number, size: number): void {
    let start = block;
    let end = block + size;
    const after = this.freeLength.get(end);
    if (after !== undefined) {
      this.removeFree(end, after);
      setBit(this.chunkStart, end, false);
      end += after;
    }
    const before = this.freeEndingAt.get(start);
    if (before !== undefined) {
      this.removeFree(before, start - before);
      setBit(this.chunkStart, start, false);
      start = before;
    }
    this.addFree(start, end - start);
  }

  private recycledBlocks(): number {
    let n = 0;
    for (const stack of this.recycled) n += stack.length;
    return n;
  }

  /** A new free chunk (rebuild): its start bit and its extent. */
  private addChunk(start: number, length: number): void {
    setBit(this.chunkStart, start, true);
    this.addFree(start, length);
  }

  private addFree(start: number, length: number): void {
    this.freeLength.set(start, length);
    this.freeEndingAt.set(start + length, start);
    this.bins[this.binOf(length)]!.add(start);
  }

  private removeFree(start: number, length: number): void {
    this.freeLength.delete(start);
    this.freeEndingAt.delete(start + length);
    this.bins[this.binOf(length)]!.remove();
  }

  /** The bin a free extent starting at `start` is in now, or -1 if none starts there. */
  private binOfFree(start: number): number {
    const length = this.freeLength.get(start);
    return length === undefined ? -1 : this.binOf(length);
  }

  /** The bin of a free extent of `length` units: the largest class it holds, or the last bin. */
  private binOf(length: number): number {
    if (length > this.classes[this.classes.length - 1]!) return this.classes.length;
    const cls = this.classOfUnits(length);
    return this.classes[cls] === length ? cls : cls - 1;
  }
}

function bit(bits: Uint32Array, at: number): boolean {
  return (bits[at >>> 5]! & (1 << (at & 31))) !== 0;
}

function setBit(bits: Uint32Array, at: number, on: boolean): void {
  if (on) bits[at >>> 5]! |= 1 << (at & 31);
  else bits[at >>> 5]! &= ~(1 << (at & 31));
}

/** Is any bit in [from, to) set? Word at a time. */
function anyBit(bits: Uint32Array, from: number, to: number): boolean {
  for (let at = from; at < to; ) {
    const word = at >>> 5;
    const first = at & 31;
    const last = Math.min(32, first + (to - at)); // exclusive, within this word
    const mask = last - first === 32 ? 0xffffffff : ((1 << (last - first)) - 1) << first;
    if ((bits[word]! & mask) !== 0) return true;
    at += last - first;
  }
  return false;
}
