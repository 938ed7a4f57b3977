// Releasing the locks a dead client left (or, at a restart, every lock):
// bucket locks by FETCH_AND_ADD of the release addend, lock items (kv.lock())
// by CMP_AND_SWP to their word with the owner cleared, both through the
// loopback queue pair (loopback.ts). While its bucket locks are still held,
// the DELETEs it left between seal and unlink are finished.
import type { Logger } from 'pino';

import { Opcode } from '../../native/index.js';
import { ItemState, ItemType, KvLayout } from '../../protocol/constants.js';
import {
  EMPTY_SLOT,
  atomicWordOffset,
  itemAtomicWord,
  itemSealed,
  itemStateOffset,
  itemType,
  lockOwner,
  lockSealed,
  releaseAddend,
  releasedLockItemWord,
  slotBlock,
} from '../../protocol/index-format.js';
import type { Fabric } from '../fabric.js';
import type { ServerStats } from '../stats.js';
import type { RegionStore } from '../store/region.js';
import { type RegionAtomic, loopbackAtomics } from './loopback.js';

export class LockRelease {
  constructor(private readonly store: RegionStore, private readonly stats: ServerStats, private readonly log: Logger | undefined, private readonly isClosed: () => boolean) {}

  /**
   * Releases the bucket locks and lock items `owner` holds ('any': every held one), reading the
   * words with the CPU (reads are safe) and changing them with RDMA atomics; returns how many.
   * Run on the loopback chain, after the owner's fence is complete.
   */
  async release(fabric: Fabric, owner: number | 'any'): Promise<number> {
    if (this.isClosed()) return 0;
    if (!fabric.loopback) {
      this.log?.error({ clientId: owner }, 'cannot release the locks of a departed client: no loopback connection');
      return 0;
    }
    const { index } = this.store;
    const held: Array<{ bucket: number; holder: number }> = [];
    for (let bucket = 0; bucket < index.bucketCount; bucket++) {
      const holder = index.lockHolder(bucket);
      if (holder !== 0 && (owner === 'any' || holder === owner)) held.push({ bucket, holder });
    }
    this.finishSealedDeletes(held.map(({ bucket }) => bucket));
    await loopbackAtomics(
      fabric,
      held.map(({ bucket, holder }) => ({ at: index.bucketOffset(bucket), opcode: Opcode.FETCH_AND_ADD, compareAdd: releaseAddend(holder) })),
      'releasing locks',
    );
    // Lock items (kv.lock()) it holds: CAS (token, id) -> (token, 0), the token kept.
    const region = this.store.bytes;
    const items: RegionAtomic[] = [];
    for (const block of this.store.lockItems) {
      const item = this.store.itemAt(block);
      // The index is what writers' notices said (RecordKind.PUT_LOCK): only a lock's word is a lock word.
      if (itemType(region, item) !== ItemType.LOCK) continue;
      const word = itemAtomicWord(region, item);
      const holder = lockOwner(word);
      if (holder === 0 || (owner !== 'any' && holder !== owner) || lockSealed(word)) continue; // sealed: deleted
      items.push({ at: atomicWordOffset(item), opcode: Opcode.CMP_AND_SWP, compareAdd: word, swap: releasedLockItemWord(word) });
    }
    const found = await loopbackAtomics(fabric, items, 'releasing a lock item');
    const released = found.filter((word, k) => word === items[k]!.compareAdd).length;
    if (held.length + released > 0) {
      this.stats.count.lockRecoveries += held.length + released;
      this.log?.warn({ clientId: owner, bucketLocks: held.length, lockItems: released }, 'released the locks of a departed client');
    }
    return held.length + released;
  }

  /**
   * A DELETE of a counter or lock item seals the item's word, then unlinks it, under the key's
   * bucket locks. A holder that died between the two left a sealed item linked, on which every
   * atomic would start over until its timeout. While the dead holder's locks are still held
   * (nobody else writes these buckets), finish its DELETE: mark the item SUPERSEDED, then clear
   * the slot — CPU stores, safe because no RDMA atomic ever changes a slot or a STATE word; the
   * mark first, as a client's commit does, so no location-cache hit takes the item for current
   * (docs/protocol.md, "GET on a cache hit") — and retire the block as its notice would have.
   */
  private finishSealedDeletes(buckets: number[]): void {
    const { store } = this;
    const region = store.bytes;
    let finished = 0;
    for (const bucket of buckets) {
      for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
        const slot = store.index.slot(bucket, i);
        if (slot === EMPTY_SLOT || !store.slotInHeap(slot)) continue;
        const block = slotBlock(slot);
        const item = store.itemAt(block);
        if (!itemSealed(itemType(region, item), itemAtomicWord(region, item))) continue;
        region.writeBigUInt64LE(BigInt(ItemState.SUPERSEDED), itemStateOffset(item));
        store.index.clearSlot(bucket, i);
        store.retireSlot(slot);
        store.lockItems.delete(block);
        this.stats.count.items--;
        finished++;
      }
    }
    if (finished > 0) this.log?.warn({ items: finished }, 'finished the deletes of a departed client');
  }
}
