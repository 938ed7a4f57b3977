// This member's keys of some hash slots: what a member syncing into a hash
// slot drops first (own-region.ts), and the keys a primary's copier writes onto its
// syncing members (copier.ts). They are found from the heap, not the index:
// every linked item sits in a granted block, and blocks never move, while an
// index entry does (a PUT's displacement moves it between its key's two
// buckets), so a walk of the index can pass an entry that moves behind it and
// miss the key. The CPU only reads here, and every header is checked before
// its key is trusted; a block that holds no plausible item (being written, or
// damaged) is skipped, and a key found in a superseded block is harmless (its
// users go by key: the copier rewrites whatever is current, the drop looks the
// key up).
import { hashKey } from '../../native/index.js';
import { ItemType, KvLayout } from '../../protocol/constants.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { EMPTY_SLOT, readItemHeader, sealOf, slotBlock, slotUnits } from '../../protocol/index-format.js';
import type { Victim } from '../eviction/remove.js';
import type { RegionStore } from '../store/region.js';

/** A key of a wanted hash slot, and the type of the item it was found in. */
export interface SlotKey {
  key: Buffer;
  type: number;
  hashSlot: number;
}

/** A key's linked item: where its slot is (for removal), its type, and the seal a counter or lock needs. */
export interface LinkedItem extends Victim {
  type: number;
}

/** Bitmap words read between two turns of the event loop (32 heap units each). */
const CHUNK_WORDS = 1 << 16;

/** A hash slot set as a mask. */
export function hashSlotMask(hashSlots: Iterable<number>): Uint8Array {
  const mask = new Uint8Array(SLOT_COUNT);
  for (const slot of hashSlots) mask[slot] = 1;
  return mask;
}

/** Every key of the hash slots in `wanted` held in a granted heap block, once each (yielding to the event loop as it goes). */
export async function keysOfHashSlots(store: RegionStore, wanted: Uint8Array, isClosed: () => boolean = () => false): Promise<SlotKey[]> {
  const { granted } = store.heap.bitmaps();
  const region = store.bytes;
  const heapEnd = store.layout.heapOffset + store.layout.heapBytes;
  const seen = new Map<string, SlotKey>();
  for (let start = 0; start < granted.length && !isClosed(); start += CHUNK_WORDS) {
    for (let w = start; w < Math.min(granted.length, start + CHUNK_WORDS); w++) {
      let bits = granted[w]!;
      while (bits !== 0) {
        const low = bits & -bits;
        bits ^= low;
        const at = store.itemAt(w * 32 + 31 - Math.clz32(low));
        if (at + KvLayout.ITEM_HEADER_BYTES > heapEnd) continue;
        const { type, keyLength } = readItemHeader(region, at);
        if (type !== ItemType.BYTES && type !== ItemType.COUNTER && type !== ItemType.LOCK) continue;
        if (keyLength === 0 || keyLength > KvLayout.MAX_KEY_BYTES || at + KvLayout.ITEM_HEADER_BYTES + keyLength > heapEnd) continue;
        const key = region.subarray(at + KvLayout.ITEM_HEADER_BYTES, at + KvLayout.ITEM_HEADER_BYTES + keyLength);
        const hashSlot = keySlot(key);
        if (wanted[hashSlot] !== 1) continue;
        const id = key.toString('latin1');
        if (!seen.has(id)) seen.set(id, { key: Buffer.from(key), type, hashSlot });
      }
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return [...seen.values()];
}

/**
 * The slot that links `key` now, or undefined. Its two buckets are read as b1, b2, b1: an entry
 * that moves between them while they are read (a displacement) is still seen.
 */
export function findLinked(store: RegionStore, key: Buffer): LinkedItem | undefined {
  const { index } = store;
  const { b1, b2 } = hashKey(key, store.seed, index.bucketCount);
  for (const bucket of [b1, b2, b1]) {
    for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
      const slot = index.slot(bucket, i);
      if (slot === EMPTY_SLOT || !store.slotInHeap(slot)) continue;
      const at = store.itemAt(slotBlock(slot));
      const { type, keyLength } = readItemHeader(store.bytes, at);
      if (keyLength !== key.length || KvLayout.ITEM_HEADER_BYTES + keyLength > slotUnits(slot) * KvLayout.UNIT_BYTES) continue;
      if (!store.bytes.subarray(at + KvLayout.ITEM_HEADER_BYTES, at + KvLayout.ITEM_HEADER_BYTES + keyLength).equals(key)) continue;
      const seal = sealOf(type);
      return { bucket, i, slot, type, ...(seal === 0n ? {} : { seal }) };
    }
  }
  return undefined;
}
