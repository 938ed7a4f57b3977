// A member syncing into hash slots it did not serve drops what it holds of them
// first (docs/replication-design.md §5: no stale key of its earlier run may
// survive the copy). The follower calls this while their epoch words are
// fenced, so no client writes them; buckets are shared with other hash slots,
// whose writers may hold a lock for a moment: removal skips such a bucket and a
// later pass takes it. Counters and locks are sealed before they are unlinked
// (remove.ts), so an atomic through an address cached before cannot land in a
// block given to another item.
import type { Logger } from 'pino';

import type { Fabric } from '../fabric.js';
import { onChain } from '../eviction/evictor.js';
import { type RemoveParts, removeItems } from '../eviction/remove.js';
import type { Chain } from '../recovery/chain.js';
import { hashSlotMask, itemsOfHashSlots } from './slot-items.js';

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
    const items = await itemsOfHashSlots(parts.store, mask, parts.isClosed);
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
