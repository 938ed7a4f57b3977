// The expiry sweep: in the background, the index is walked in chunks of
// SWEEP_CHUNK buckets (a setImmediate between chunks, so the event loop keeps
// serving grants and notices), and every item whose EXPIRY (absolute Unix ms,
// inside the checksum) has passed is removed through remove.ts: its slot
// cleared under its bucket's lock, its block reused after the grace period.
// Readers already treat an expired item as missing; the sweep gives its memory
// back. One pass every interval covers at most PASS_BUCKETS buckets from where
// the last one stopped (a 1 GiB region's index in 32 passes: each slot costs a
// read of its item's header, a cache miss, so a pass is bounded in time, not
// only in chunks) and removes at most SWEEP_BURST items. Slots are read as
// 32-bit halves, so an empty slot or an item without EXPIRY makes no BigInt.
// The EXPIRY read is trusted only when the item's checksum holds (a torn or
// damaged header must not remove a live item). Only bytes items are swept:
// a counter or lock would need its seal first (docs/architecture.md).
import type { Logger } from 'pino';

import { itemChecksum } from '../../native/index.js';
import { ItemHeader, ItemType, KvLayout } from '../../protocol/constants.js';
import { EMPTY_SLOT, readItemHeader, slotBlock, slotUnits } from '../../protocol/index-format.js';
import type { Fabric } from '../fabric.js';
import type { Chain } from '../recovery/chain.js';
import type { RegionStore } from '../store/region.js';
import { onChain } from './evictor.js';
import { type RemoveParts, type Victim, removeItems } from './remove.js';

/** Buckets read per chunk of a pass, and per pass. */
const SWEEP_CHUNK = 512;
const PASS_BUCKETS = 32768;
/** Items removed per loopback batch, and per pass at most. */
const REMOVE_BATCH = 64;
const SWEEP_BURST = 16384;

export interface ExpirySweepParts extends RemoveParts {
  loopbackChain: Chain;
  fabric: () => Fabric | undefined;
  log: Logger | undefined;
  isClosed: () => boolean;
  /** Is the block granted to a client and its notice not drained yet? (Its writer's departure would retire it again.) */
  unannounced: (block: number) => boolean;
}

export class ExpirySweep {
  private running = false;
  /** the next bucket a pass reads */
  private cursor = 0;
  /** the index as 32-bit halves: [lock lo, lock hi, slot 1 lo (block), slot 1 hi, ...] */
  private readonly halves: Uint32Array;
  private readonly heapUnits: number;

  constructor(private readonly parts: ExpirySweepParts) {
    const { layout, bytes } = parts.store;
    this.halves = new Uint32Array(bytes.buffer, bytes.byteOffset + layout.indexOffset, layout.bucketCount * KvLayout.BUCKET_BYTES / 4);
    this.heapUnits = layout.heapBytes / KvLayout.UNIT_BYTES;
  }

  /** One pass over the whole index, unless one is running; resolves when it ends. */
  async pass(): Promise<number> {
    if (this.running) return 0;
    this.running = true;
    try {
      return await this.walk();
    } finally {
      this.running = false;
    }
  }

  private async walk(): Promise<number> {
    const { parts, halves } = this;
    const { store } = parts;
    const buckets = store.index.bucketCount;
    const last = Math.min(buckets, this.cursor + PASS_BUCKETS);
    let removed = 0;
    for (let start = this.cursor; start < last && removed < SWEEP_BURST && !parts.isClosed(); start += SWEEP_CHUNK) {
      const now = Date.now();
      const found: Victim[] = [];
      for (let bucket = start; bucket < Math.min(last, start + SWEEP_CHUNK); bucket++) {
        for (let i = 0, at = bucket * 16 + 2; i < KvLayout.SLOTS_PER_BUCKET; i++, at += 2) {
          const block = halves[at]!;
          if ((block | halves[at + 1]!) === 0 || block >= this.heapUnits) continue;
          if (this.expiryOf(block, now)) {
            const slot = store.index.slot(bucket, i);
            if (slot !== EMPTY_SLOT && slotBlock(slot) === block && this.expired(slot)) found.push({ bucket, i, slot });
          }
        }
      }
      for (let k = 0; k < found.length && !parts.isClosed(); k += REMOVE_BATCH) {
        const fabric = parts.fabric();
        if (!fabric) return removed;
        const batch = found.slice(k, k + REMOVE_BATCH);
        const done = await onChain(parts.loopbackChain, () => removeItems(parts, fabric, batch, () => true));
        if (done.items > 0) {
          removed += done.items;
          parts.stats.count.expirations += done.items;
          parts.stats.count.removedBytes.expired += done.bytes;
          }
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.cursor = last >= buckets ? 0 : last;
    if (removed > 0) parts.log?.debug({ removed }, 'expired items removed');
    return removed;
  }

  /** Is the EXPIRY of the item at `block` set and past `now`? (Two 32-bit reads: no BigInt for items without one.) */
  private expiryOf(block: number, now: number): boolean {
    const region = this.parts.store.bytes;
    const at = this.parts.store.itemAt(block) + ItemHeader.EXPIRY;
    if (at + 8 > region.length) return false;
    const low = region.readUInt32LE(at);
    const high = region.readUInt32LE(at + 4);
    return (low | high) !== 0 && high * 2 ** 32 + low <= now;
  }

  /** A published bytes item (its notice drained), whole (the checksum covers EXPIRY), of a slot that fits it. */
  private expired(slot: bigint): boolean {
    const { store } = this.parts;
    if (!store.slotInHeap(slot)) return false;
    const block = slotBlock(slot);
    if (this.parts.unannounced(block)) return false;
    const region = store.bytes;
    const at = store.itemAt(block);
    const header = readItemHeader(region, at);
    const bytes = KvLayout.ITEM_HEADER_BYTES + header.keyLength + header.valueLength;
    if (header.type !== ItemType.BYTES || header.keyLength > KvLayout.MAX_KEY_BYTES || bytes > slotUnits(slot) * KvLayout.UNIT_BYTES) return false;
    return itemChecksum(region.subarray(at, at + bytes)) === header.checksum;
  }
}
