// Server-side removal of items: the expiry sweep and eviction both end here.
// The server unlinks an item as a deleting client would (docs/protocol.md,
// "DELETE" and "Writers mark before they unlink"): it takes the bucket's lock
// word by CMP_AND_SWP through its loopback queue pair (lock words change only
// by RDMA atomics), checks under the lock that the slot still names the item
// (a client may have replaced or deleted it since it was chosen: then it is
// left alone), marks the item SUPERSEDED and clears the slot (CPU stores, as
// recovery/locks.ts finishes a departed client's DELETE: no RDMA atomic ever
// changes a slot or a STATE word, and nobody else writes a locked bucket),
// releases the lock by FETCH_AND_ADD, and retires the block for the grace
// period, so a reader that found the item before the unlink still reads it
// whole. Run on the loopback chain (one user of its scratch at a time).
import { Opcode } from '../../native/index.js';
import { ItemHeader, ItemState } from '../../protocol/constants.js';
import { EMPTY_SLOT, itemAtomicWord, itemStateOffset, lockOwner, lockVersion, lockWord, releaseAddend, slotBlock, slotUnits } from '../../protocol/index-format.js';
import type { Fabric } from '../fabric.js';
import { loopbackAtomics } from '../recovery/loopback.js';
import type { ServerStats } from '../stats.js';
import type { RegionStore } from '../store/region.js';
import type { ItemUse } from './item-use.js';

/** An item chosen for removal: the slot word seen, and where. */
export interface Victim {
  bucket: number;
  i: number;
  slot: bigint;
  /** A counter's or lock's seal (sealOf): added to its word under the bucket lock before the unlink, so an atomic through a cached address sees it and starts over. */
  seal?: bigint;
}

export interface RemoveParts {
  store: RegionStore;
  stats: ServerStats;
  /** with eviction on: the stamps of removed blocks are forgotten */
  use: ItemUse | undefined;
  /** The lock owner id the server takes bucket locks as: one of the client table's, never a client's. */
  owner: number;
}

/**
 * Removes the victims whose slot still names them once their bucket's lock is held; returns
 * the bytes of the blocks retired (their heap blocks' sizes) and how many. A bucket whose lock
 * is held by a client, or taken between the read and the CAS, is skipped this time.
 * `stillWanted` is asked again under the lock (the item may have been rewritten since).
 */
export async function removeItems(
  parts: RemoveParts,
  fabric: Fabric,
  victims: readonly Victim[],
  stillWanted: (block: number) => boolean,
): Promise<{ items: number; bytes: number }> {
  const { store, stats, use, owner } = parts;
  const { index } = store;
  const byBucket = new Map<number, Victim[]>();
  for (const victim of victims) {
    const list = byBucket.get(victim.bucket);
    if (list) list.push(victim);
    else byBucket.set(victim.bucket, [victim]);
  }
  // Lock every bucket that looks free: (v, 0) -> (v, owner), as a client's PUT does.
  const buckets = [...byBucket.keys()].filter((bucket) => index.lockHolder(bucket) === 0);
  const expected = buckets.map((bucket) => index.lockWord(bucket));
  const found = await loopbackAtomics(
    fabric,
    buckets.map((bucket, k) => ({ at: index.bucketOffset(bucket), opcode: Opcode.CMP_AND_SWP, compareAdd: expected[k]!, swap: lockWord(lockVersion(expected[k]!), owner) })),
    'locking buckets to remove items',
  );
  const locked = buckets.filter((_, k) => found[k] === expected[k] && lockOwner(expected[k]!) === 0);
  // Only a seal not there yet: adding it twice would carry into the value (or token) and unseal the word. Under the
  // bucket lock no DELETE can seal it meanwhile, and no other atomic touches the seal bit.
  const sealing = locked.flatMap((bucket) =>
    byBucket.get(bucket)!.filter((v) => v.seal !== undefined && index.slot(bucket, v.i) === v.slot && v.slot !== EMPTY_SLOT && (itemAtomicWord(store.bytes, store.itemAt(slotBlock(v.slot))) & v.seal) === 0n),
  );
  if (sealing.length > 0) {
    await loopbackAtomics(
      fabric,
      sealing.map((v) => ({ at: store.itemAt(slotBlock(v.slot)) + ItemHeader.ATOMIC_WORD, opcode: Opcode.FETCH_AND_ADD, compareAdd: v.seal! })),
      'sealing counters and locks to remove them',
    );
  }
  const region = store.bytes;
  let items = 0;
  let bytes = 0;
  for (const bucket of locked) {
    for (const { i, slot } of byBucket.get(bucket)!) {
      if (index.slot(bucket, i) !== slot || slot === EMPTY_SLOT) continue; // replaced or deleted since
      const block = slotBlock(slot);
      if (!stillWanted(block)) continue;
      region.writeBigUInt64LE(BigInt(ItemState.SUPERSEDED), itemStateOffset(store.itemAt(block)));
      index.clearSlot(bucket, i);
      if (!store.retireSlot(slot)) continue; // not a block in use: nothing to free (the slot was damage)
      use?.gone(block);
      store.lockItems.delete(block);
      stats.count.items--;
      items++;
      bytes += store.blockUnits(slotUnits(slot)) * 64;
    }
  }
  // Release: FETCH_AND_ADD 2^32 - owner clears the owner and bumps the version, as clients do.
  await loopbackAtomics(
    fabric,
    locked.map((bucket) => ({ at: index.bucketOffset(bucket), opcode: Opcode.FETCH_AND_ADD, compareAdd: releaseAddend(owner) })),
    'releasing buckets after removing items',
  );
  return { items, bytes };
}
