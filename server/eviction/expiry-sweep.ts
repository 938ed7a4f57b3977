// The expiry sweep: in the background, the index is walked in chunks of
// SWEEP_CHUNK buckets (a setImmediate between chunks, so the event loop keeps
// serving grants and notices), and every item whose EXPIRY (absolute Unix ms,
// inside the checksum) has passed is removed through remove.ts: its slot
// cleared under its bucket's lock, its block reused after the grace period.
// Readers already treat an expired item as missing; the sweep gives its memory
// back. One pass every interval; a pass removes at most SWEEP_BURST items.
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

/** Buckets read per chunk of a pass. */
const SWEEP_CHUNK = 4096;
/** Items removed per loopback batch, and per pass at most. */
const REMOVE_BATCH = 64;
const SWEEP_BURST = 16384;

export interface ExpirySweepParts extends RemoveParts {
  loopbackChain: Chain;
  fabric: () => Fabric | undefined;
  log: Logger | undefined;
  isClosed: () => boolean;
  /** after a batch that removed something */
  onRemoved: () => void;
}

export class ExpirySweep {
  private running = false;

  constructor(private readonly parts: ExpirySweepParts) {}

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
    const { parts } = this;
    const { store } = parts;
    const buckets = store.index.bucketCount;
    let removed = 0;
    for (let start = 0; start < buckets && removed < SWEEP_BURST && !parts.isClosed(); start += SWEEP_CHUNK) {
      const now = BigInt(Date.now());
      const found: Victim[] = [];
      for (let bucket = start; bucket < Math.min(buckets, start + SWEEP_CHUNK); bucket++) {
        for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
          const slot = store.index.slot(bucket, i);
          if (slot !== EMPTY_SLOT && this.expired(slot, now)) found.push({ bucket, i, slot });
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
          parts.onRemoved();
        }
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    if (removed > 0) parts.log?.debug({ removed }, 'expired items removed');
    return removed;
  }

  /** A published bytes item, whole (checksum), whose EXPIRY is set and past. */
  private expired(slot: bigint, now: bigint): boolean {
    const { store, use } = this.parts;
    if (!store.slotInHeap(slot)) return false;
    const block = slotBlock(slot);
    if (use.stamp[block] === 0) return false; // its notice not drained yet
    const region = store.bytes;
    const at = store.itemAt(block);
    const expiry = region.readBigUInt64LE(at + ItemHeader.EXPIRY);
    if (expiry === 0n || expiry > now) return false;
    const header = readItemHeader(region, at);
    const bytes = KvLayout.ITEM_HEADER_BYTES + header.keyLength + header.valueLength;
    if (header.type !== ItemType.BYTES || header.keyLength > KvLayout.MAX_KEY_BYTES || bytes > slotUnits(slot) * KvLayout.UNIT_BYTES) return false;
    return itemChecksum(region.subarray(at, at + bytes)) === header.checksum;
  }
}
