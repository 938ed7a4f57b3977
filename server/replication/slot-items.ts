// This member's items of some hash slots, found by walking its own index: what
// a member syncing into a hash slot drops first (epoch-follower.ts), and the
// keys a primary's copier rewrites onto its syncing replicas (copier.ts). The
// CPU only reads here; every header is checked against its slot before its key
// is trusted (a torn or damaged item is skipped: its slot says nothing valid).
import { ItemType, KvLayout } from '../../protocol/constants.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { EMPTY_SLOT, readItemHeader, sealOf, slotBlock, slotUnits } from '../../protocol/index-format.js';
import type { Victim } from '../eviction/remove.js';
import type { RegionStore } from '../store/region.js';

/** An item of a wanted hash slot: where its slot is (for removal), its key, its type. */
export interface SlotItem extends Victim {
  key: Buffer;
  type: number;
  hashSlot: number;
}

/** Buckets read between two turns of the event loop. */
const CHUNK_BUCKETS = 4096;

/** A hash slot set as a mask, for the walk. */
export function hashSlotMask(hashSlots: Iterable<number>): Uint8Array {
  const mask = new Uint8Array(SLOT_COUNT);
  for (const slot of hashSlots) mask[slot] = 1;
  return mask;
}

/**
 * Every linked item of the hash slots in `wanted`, by one walk of the index (yielding to the
 * event loop every CHUNK_BUCKETS buckets). Counters and locks carry their seal, for removal.
 */
export async function itemsOfHashSlots(store: RegionStore, wanted: Uint8Array, isClosed: () => boolean = () => false): Promise<SlotItem[]> {
  const { index } = store;
  const region = store.bytes;
  const found: SlotItem[] = [];
  for (let start = 0; start < index.bucketCount && !isClosed(); start += CHUNK_BUCKETS) {
    for (let bucket = start; bucket < Math.min(index.bucketCount, start + CHUNK_BUCKETS); bucket++) {
      for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
        const slot = index.slot(bucket, i);
        if (slot === EMPTY_SLOT || !store.slotInHeap(slot)) continue;
        const at = store.itemAt(slotBlock(slot));
        const header = readItemHeader(region, at);
        const { type, keyLength } = header;
        if (type !== ItemType.BYTES && type !== ItemType.COUNTER && type !== ItemType.LOCK) continue;
        if (keyLength === 0 || keyLength > KvLayout.MAX_KEY_BYTES || KvLayout.ITEM_HEADER_BYTES + keyLength > slotUnits(slot) * KvLayout.UNIT_BYTES) continue;
        const key = Buffer.from(region.subarray(at + KvLayout.ITEM_HEADER_BYTES, at + KvLayout.ITEM_HEADER_BYTES + keyLength));
        const hashSlot = keySlot(key);
        if (wanted[hashSlot] !== 1) continue;
        const seal = sealOf(type);
        found.push({ bucket, i, slot, key, type, hashSlot, ...(seal === 0n ? {} : { seal }) });
      }
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return found;
}
