// Taking back a departed client's granted blocks: every block it held goes
// back to the heap (through the grace period), except one it published and
// died before announcing — its slot written, its notice never sent. Such a
// lock item joins the server's lock items, as its notice would have put it
// there, so the orphan scan releases the lock it holds. And except one that
// another client holds now: the departed client published it without a notice,
// someone's PUT superseded it (that notice retired it), and after the grace
// period it was granted again. The departed client's record of it is stale;
// retiring it would free a block its new holder writes into.
import type { Logger } from 'pino';

import { hashKey } from '../../native/index.js';
import { ItemType, KvLayout } from '../../protocol/constants.js';
import { itemKey, itemType, lockOwner, readItemHeader } from '../../protocol/index-format.js';
import type { Client } from '../sessions/clients.js';
import type { ServerStats } from '../stats.js';
import type { RegionStore } from '../store/region.js';

/** Attempts per burst at a consistent read of a key's two buckets (a hot bucket is free for microseconds at a time). */
const READ_BURST = 1000;
/** Give up (and keep the block) after this long: keeping a block is safe; freeing a live one is not. */
const READ_TIMEOUT_MS = 10_000;

export class HeldBlocks {
  constructor(private readonly store: RegionStore, private readonly stats: ServerStats, private readonly log: Logger | undefined, private readonly isClosed: () => boolean) {}

  /**
   * A departed client's granted blocks go back to the heap, except one it published: such an
   * item was written before its slot and is read-only since, so it names its key, and a
   * published item sits in one of its key's two buckets (displacement moves entries only
   * between those). A block is kept if either bucket points to it in a consistent read. One that
   * `heldByAnother` (a grant since: see the top) is left to that client. Runs after the client's
   * locks are released, so only live clients' short critical sections are waited for.
   */
  async reclaim(client: Client, heldByAnother: (block: number, except: Client) => boolean): Promise<void> {
    let reclaimed = 0;
    const published: number[] = [];
    const { heap } = this.store;
    for (const [block, cls] of client.held.entries()) {
      if (this.isClosed()) return;
      if (client.held.get(block) !== cls) continue; // published or returned while this awaited
      // Published or not, the index says: not the item's version, which need not carry this client's
      // session (a replicated write's backup item has its primary session's; a repair copy keeps the
      // version it copies, OpFlag.KEEP_VERSION).
      const found = await this.isPublished(block);
      if (found !== false) {
        published.push(block);
        // A lock it created held is held by it still: known as a lock now, it is an orphan's (orphan-scan.ts).
        // Only one the index points to: a block kept unread may hold an earlier item's header.
        if (found === true && itemType(this.store.bytes, this.store.itemAt(block)) === ItemType.LOCK) this.store.lockItems.add(block);
      } else if (heap.isGranted(cls, block) && !heldByAnother(block, client) && heap.retire(cls, block)) reclaimed++; // (checked just before: no await in between)
    }
    client.held.clear();
    this.stats.count.blocksReclaimed += reclaimed;
    if (reclaimed > 0) this.log?.info({ clientId: client.id, blocks: reclaimed }, 'took back the unpublished blocks of a departed client');
    if (published.length > 0) {
      // its notice is lost: the item it replaced, if any, stays allocated until a restart
      this.log?.warn({ clientId: client.id, blocks: published }, 'a departed client published items without notices');
    }
  }

  /** Does a slot in the buckets of the key stored at `block` point to it? (See reclaim.) 'unknown': no consistent read in time, or closing. */
  private async isPublished(block: number): Promise<boolean | 'unknown'> {
    const { store } = this;
    const { index, layout } = store;
    const at = store.itemAt(block);
    const { keyLength } = readItemHeader(store.bytes, at);
    if (keyLength > KvLayout.MAX_KEY_BYTES || at + KvLayout.ITEM_HEADER_BYTES + keyLength > layout.heapOffset + layout.heapBytes) return false; // no item
    const { b1, b2 } = hashKey(itemKey(store.bytes, at, keyLength), store.seed, layout.bucketCount);
    const deadline = performance.now() + READ_TIMEOUT_MS;
    for (;;) {
      if (this.isClosed()) return 'unknown'; // the region may be gone; nothing is freed any more anyway
      for (let attempt = 0; attempt < READ_BURST; attempt++) {
        const lock1 = index.lockWord(b1);
        const lock2 = index.lockWord(b2);
        if (lockOwner(lock1) !== 0 || lockOwner(lock2) !== 0) continue;
        const found = index.pointsTo(b1, block) || index.pointsTo(b2, block);
        // unlocked and unchanged around the read: no PUT, DELETE or displacement in between
        if (index.lockWord(b1) === lock1 && index.lockWord(b2) === lock2) return found;
      }
      if (performance.now() > deadline) return 'unknown';
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
}
