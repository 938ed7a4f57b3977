// The region as the server holds it: its memory (anonymous, or a region file),
// its layout and hash seed from the superblock, the index (read through
// protocol/index-format.ts's IndexView), the heap's allocator, and the lock
// items learned from notices. Every other part of the server reaches the
// region's bytes through this object.
import { randomBytes } from 'node:crypto';

import { Memory } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { IndexView, EMPTY_SLOT, slotBlock, slotUnits } from '../../protocol/index-format.js';
import { KvConfigError, type ServerSettings } from '../options.js';
import { EpochTable } from './epoch-table.js';
import { Heap } from './heap.js';
import { type RegionLayout, LayoutError, compareLayout, formatMismatch, planLayout, readSuperblock, writeSuperblock } from './layout.js';

export class RegionStore {
  readonly index: IndexView;
  readonly heap: Heap;
  /** The hash seed: new for a new region, the superblock's for a region file. */
  readonly seed: bigint;
  /** A region file with data from an earlier run: restart recovery (recovery/restart.ts) must run before serving. */
  readonly existed: boolean;
  /** Heap blocks (units) of lock items, learned from notices and restarts, for releasing a dead holder's locks. */
  readonly lockItems = new Set<number>();
  /** The region's random id for its life (format 5 on; 0n in a file of an earlier format). */
  readonly regionId: bigint;
  /** The hash slots' epoch words (format 5 on; undefined in a file of an earlier format). */
  readonly epochs: EpochTable | undefined;
  readonly layout: RegionLayout;

  private constructor(
    planned: RegionLayout,
    readonly memory: Memory,
    graceMs: number,
    regionFile: string | undefined,
    replan: (format: number) => RegionLayout,
  ) {
    let layout = planned;
    this.existed = memory.existed;
    if (this.existed) {
      const found = readSuperblock(memory.bytes);
      const format = formatMismatch(found);
      if (format) throw new KvConfigError(`${regionFile} ${format}`);
      // A file of an earlier format is served in its own layout, and stays in its format.
      if (found.magic === KvLayout.MAGIC && found.version !== planned.format) layout = replan(found.version);
      const mismatch = compareLayout(found, layout);
      if (mismatch) throw new KvConfigError(`${regionFile} was created with ${mismatch}: start with the options it was created with`);
      this.seed = found.seed;
      this.regionId = layout.format >= 5 ? found.regionId : 0n;
    } else {
      this.seed = randomBytes(8).readBigUInt64LE();
      this.regionId = randomBytes(8).readBigUInt64LE() || 1n;
    }
    this.layout = layout;
    this.index = new IndexView(memory.bytes, layout.indexOffset, layout.bucketCount);
    this.heap = new Heap(layout.heapBytes / KvLayout.UNIT_BYTES, layout.classes, graceMs);
    this.epochs = layout.epochOffset ? new EpochTable(memory.bytes, layout.epochOffset) : undefined;
    if (!this.existed) this.epochs?.openAll(0);
    writeSuperblock(memory.bytes, layout, this.seed, BigInt(Date.now()), this.regionId);
  }

  /** Plans the layout and maps the region (a new one, or the region file's); KvConfigError if either cannot be. */
  static open(settings: ServerSettings): RegionStore {
    const plan = (format?: number): RegionLayout => {
      try {
        return planLayout({ regionBytes: settings.memoryBytes, buckets: settings.buckets, maxClients: settings.maxClients, maxValueBytes: settings.maxValueBytes, accessTable: settings.eviction !== 'none', format });
      } catch (error) {
        if (error instanceof LayoutError) throw new KvConfigError(error.message);
        throw error;
      }
    };
    const layout = plan();
    let memory: Memory;
    try {
      // Huge pages for an anonymous region when the host has them: fewer TLB misses for the
      // clients' random READs over the index and the heap (a region file stays on its pages).
      memory = settings.regionFile === undefined ? new Memory(layout.regionBytes, undefined, { hugePages: true }) : new Memory(layout.regionBytes, settings.regionFile);
    } catch (error) {
      throw new KvConfigError(`region: ${(error as Error).message}`);
    }
    return new RegionStore(layout, memory, settings.graceMs, settings.regionFile, plan);
  }

  get bytes(): Buffer {
    return this.memory.bytes;
  }

  /** Region offset of the item in heap block `block` (in units). */
  itemAt(block: number): number {
    return this.layout.heapOffset + block * KvLayout.UNIT_BYTES;
  }

  /** Region offset of a client ring (its header: the consumed counter). */
  ringAt(ring: number): number {
    return this.layout.ringOffset + ring * this.layout.ringBytes;
  }

  /** The block size of an item of `units` units. */
  blockUnits(units: number): number {
    return this.layout.classes[this.heap.classOfUnits(units)]!;
  }

  /** An empty slot, or one whose item lies inside the heap. */
  slotInHeap(slot: bigint): boolean {
    if (slot === EMPTY_SLOT) return true;
    const units = slotUnits(slot);
    return units > 0 && (slotBlock(slot) + units) * KvLayout.UNIT_BYTES <= this.layout.heapBytes;
  }

  /** The block of a superseded or deleted slot goes back to the heap after the grace period; false if it was not in use. */
  retireSlot(slot: bigint): boolean {
    return this.heap.retire(this.heap.classOfUnits(slotUnits(slot)), slotBlock(slot));
  }
}
