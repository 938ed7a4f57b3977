// Repair's work on this member's own region, through its loopback queue pair
// (lock words change only by RDMA atomics).
//
// dropHashSlots: a member syncing into hash slots it did not serve drops what
// it holds of them first (docs/replication-design.md §5: no stale key of its
// earlier run may survive the copy). The follower calls it while their epoch
// words are fenced, so no client writes them; buckets are shared with other
// hash slots, whose writers may hold a lock for a moment (or move an entry to
// its other bucket): removal skips such an entry and a later pass takes it.
// Keys come from the heap (slot-items.ts), so an entry moving during a pass is
// not missed by the pass that ends the drop. Counters and locks are sealed
// before they are unlinked (remove.ts), so an atomic through an address cached
// before cannot land in a block given to another item.
//
// underBucketLocks: a primary's copier holds a key's bucket locks while it
// creates the key's counter on a target (copier.ts).
import type { Logger } from 'pino';

import { Opcode, hashKey } from '../../native/index.js';
import { lockOwner, lockVersion, lockWord, releaseAddend } from '../../protocol/index-format.js';
import type { Fabric } from '../fabric.js';
import { onChain } from '../eviction/evictor.js';
import { type RemoveParts, removeItems } from '../eviction/remove.js';
import type { Chain } from '../recovery/chain.js';
import { loopbackAtomics } from '../recovery/loopback.js';
import { findLinked, hashSlotMask, keysOfHashSlots } from './slot-items.js';

export interface DropParts extends RemoveParts {
  loopbackChain: Chain;
  fabric: () => Fabric | undefined;
  isClosed: () => boolean;
  log: Logger | undefined;
  /** Is the block granted to a client and its notice not drained yet? Left to a later pass (its writer's departure would retire it again). */
  unannounced: (block: number) => boolean;
}

/** Items removed per loopback batch. */
const BATCH = 64;
/** Passes before giving up on buckets that stay locked (a writer holding a lock that long is fenced and released by then). */
const PASSES = 200;
const PASS_PAUSE_MS = 10;

/** Removes every item of `hashSlots` from the region; resolves how many. Rejects if some stay (the server closed, or locks never freed). */
export async function dropHashSlots(parts: DropParts, hashSlots: readonly number[]): Promise<number> {
  const mask = hashSlotMask(hashSlots);
  let removed = 0;
  for (let pass = 0; pass < PASSES; pass++) {
    const keys = await keysOfHashSlots(parts.store, mask, parts.isClosed);
    const items = keys.flatMap(({ key }) => findLinked(parts.store, key) ?? []);
    if (items.length === 0) return removed;
    if (parts.isClosed()) break;
    const fabric = parts.fabric();
    if (!fabric) throw new Error('dropping hash slots: the server has no loopback connection');
    for (let k = 0; k < items.length && !parts.isClosed(); k += BATCH) {
      const batch = items.slice(k, k + BATCH);
      const done = await onChain(parts.loopbackChain, () => removeItems(parts, fabric, batch, (block) => !parts.unannounced(block)));
      removed += done.items;
    }
    await new Promise((resolve) => setTimeout(resolve, pass === 0 ? 0 : PASS_PAUSE_MS));
  }
  throw new Error(`dropping ${hashSlots.length} hash slots: items remain after ${PASSES} passes (server closing, or bucket locks never released)`);
}

/** How long underBucketLocks waits for a key's buckets to be free. */
const LOCK_WAIT_MS = 5000;

/**
 * Runs `task` while this server holds both bucket locks of `key` in its region (taken as a
 * writer takes them: CMP_AND_SWP (v, 0) → (v, owner) through the loopback queue pair; released by
 * FETCH_AND_ADD). No client can link, unlink or move the key's entry meanwhile: repair's copier
 * creates a counter on a target this way, so no DELETE or creation of it on the primary comes
 * between its look and the creation. Rejects if the locks stay taken for LOCK_WAIT_MS.
 */
export async function underBucketLocks<T>(parts: DropParts, key: Buffer, task: () => Promise<T>): Promise<T> {
  const { store, owner } = parts;
  const { index } = store;
  const { b1, b2 } = hashKey(key, store.seed, index.bucketCount);
  const buckets = b1 === b2 ? [b1] : [Math.min(b1, b2), Math.max(b1, b2)];
  const deadline = performance.now() + LOCK_WAIT_MS;
  for (;;) {
    const fabric = parts.fabric();
    if (!fabric || parts.isClosed()) throw new Error('repair: the server has no loopback connection (closing)');
    const expected = buckets.map((bucket) => index.lockWord(bucket));
    if (expected.every((word) => lockOwner(word) === 0)) {
      const found = await onChain(parts.loopbackChain, () =>
        loopbackAtomics(fabric, buckets.map((bucket, k) => ({ at: index.bucketOffset(bucket), opcode: Opcode.CMP_AND_SWP, compareAdd: expected[k]!, swap: lockWord(lockVersion(expected[k]!), owner) })), 'locking buckets for a repair copy'),
      );
      const held = buckets.filter((_, k) => found[k] === expected[k]);
      if (held.length === buckets.length) {
        try {
          return await task();
        } finally {
          await onChain(parts.loopbackChain, () => loopbackAtomics(fabric, held.map((bucket) => ({ at: index.bucketOffset(bucket), opcode: Opcode.FETCH_AND_ADD, compareAdd: releaseAddend(owner) })), 'releasing buckets after a repair copy'));
        }
      }
      if (held.length > 0) {
        await onChain(parts.loopbackChain, () => loopbackAtomics(fabric, held.map((bucket) => ({ at: index.bucketOffset(bucket), opcode: Opcode.FETCH_AND_ADD, compareAdd: releaseAddend(owner) })), 'releasing buckets after a repair copy'));
      }
    }
    if (performance.now() > deadline) throw new Error(`repair: the buckets of a counter stayed locked for ${LOCK_WAIT_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}
