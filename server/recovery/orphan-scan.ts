// The orphan-lock scan, after every keepalive sweep: lock words and lock items
// owned by an id that is no live client are released. A leaked lock, or a word
// corrupted to a random owner, would otherwise fail its keys with
// KV_LOCK_CONTENDED forever. It covers the index in bounded windows.
import type { EventEmitter } from 'node:events';

import type { Logger } from 'pino';

import { Opcode } from '../../native/index.js';
import { ItemType } from '../../protocol/constants.js';
import { atomicWordOffset, itemAtomicWord, itemType, lockOwner, lockSealed, releasedBucketWord, releasedLockItemWord } from '../../protocol/index-format.js';
import type { Fabric } from '../fabric.js';
import type { ClientTable } from '../sessions/clients.js';
import type { ServerStats } from '../stats.js';
import type { RegionStore } from '../store/region.js';
import type { Chain } from './chain.js';
import { loopbackAtomics } from './loopback.js';

/** Buckets the orphan-lock scan reads per keepalive interval (a 1 GiB region's index in 16). */
const ORPHAN_SCAN_BUCKETS = 65536;
/** Locks one orphan scan releases at most (the rest wait for the next scan). */
const ORPHAN_RELEASE_BURST = 256;

export interface OrphanScanParts {
  store: RegionStore;
  clients: ClientTable;
  /** ids of departed clients whose locks their departure still releases (departures.ts) */
  departing: ReadonlySet<number>;
  /** the loopback queue pair's chain, shared with departures */
  loopbackChain: Chain;
  /** the fabrics: the scan uses the first with a loopback */
  fabrics: () => Iterable<Fabric>;
  stats: ServerStats;
  log: Logger | undefined;
  /** emits 'orphanScan' ({ released }) after each scan */
  events: EventEmitter;
  isClosed: () => boolean;
}

interface HeldLock {
  /** region offset of the word */
  at: number;
  word: bigint;
  /** the word releasing it writes */
  swap: bigint;
  /** for a bucket lock: its bucket */
  bucket?: number;
}

export class OrphanScan {
  /** the next bucket the scan looks at */
  private cursor = 0;
  private queued = false;

  constructor(private readonly parts: OrphanScanParts) {}

  /**
   * Queues one scan on the loopback chain: it shares the loopback queue pair (and its scratch
   * buffer) with departed clients' lock release, so the two never interleave.
   */
  queue(): void {
    const { isClosed, log } = this.parts;
    if (this.queued || isClosed()) return;
    const fabric = [...this.parts.fabrics()].find((f) => f.loopback);
    if (!fabric) return;
    this.queued = true;
    this.parts.loopbackChain.add(
      async () => void (await this.scan(fabric)),
      (error) => {
        if (!isClosed()) log?.error({ err: error.message }, 'orphan lock release failed'); // closing: the loopback is gone
      },
      () => (this.queued = false),
    );
  }

  /**
   * Lock words and lock items owned by an id that is no live client — not connected or
   * connecting (the client table, where an id is entered when it is assigned) and not departing
   * (departures.ts releases those) — are released. The words are read before the live ids are
   * taken: an owner seen in a word held its id when the word was read, and ids are never
   * reused, so a live holder is never mistaken for an orphan. Each is released with
   * CMP_AND_SWP from the exact word read (bucket: version + 1, owner 0; lock item: token kept,
   * owner 0), never FETCH_AND_ADD: a word that changed since (released, taken again) is left
   * alone. One window of the index per scan, and at most ORPHAN_RELEASE_BURST releases.
   */
  private async scan(fabric: Fabric): Promise<number> {
    const { store, stats, log, isClosed } = this.parts;
    if (isClosed() || !fabric.loopback) return 0;
    const { index, layout } = store;
    const region = store.bytes;
    const window = Math.min(layout.bucketCount, ORPHAN_SCAN_BUCKETS);
    const held: HeldLock[] = [];
    for (let i = 0; i < window; i++) {
      const bucket = (this.cursor + i) % layout.bucketCount;
      if (index.lockHolder(bucket) === 0) continue; // the common case, without a BigInt
      const word = index.lockWord(bucket);
      if (lockOwner(word) === 0) continue;
      held.push({ at: index.bucketOffset(bucket), word, swap: releasedBucketWord(word), bucket });
    }
    for (const block of store.lockItems) {
      const item = store.itemAt(block);
      if (itemType(region, item) !== ItemType.LOCK) continue; // a counter's word is its value
      const word = itemAtomicWord(region, item);
      // A sealed word (owner bit 31) is a deleted lock's: unsealing it would let a cached LOCK take a dead lock.
      if (lockOwner(word) !== 0 && !lockSealed(word)) held.push({ at: atomicWordOffset(item), word, swap: releasedLockItemWord(word) });
    }
    // Now the live ids: see above for why after the words.
    const live = this.parts.clients.liveIds(this.parts.departing);
    const orphans = held.filter(({ word }) => !live.has(lockOwner(word))).slice(0, ORPHAN_RELEASE_BURST);
    // The next scan starts after this window, or after the last bucket released if the burst was cut short.
    const lastBucket = orphans.length === ORPHAN_RELEASE_BURST ? [...orphans].reverse().find((o) => o.bucket !== undefined)?.bucket : undefined;
    this.cursor = lastBucket !== undefined ? (lastBucket + 1) % layout.bucketCount : (this.cursor + window) % layout.bucketCount;
    const found = await loopbackAtomics(
      fabric,
      orphans.map(({ at, word, swap }) => ({ at, opcode: Opcode.CMP_AND_SWP, compareAdd: word, swap })),
      'releasing orphaned locks',
    );
    let buckets = 0;
    let items = 0;
    const owners = new Set<number>();
    orphans.forEach(({ at, word }, k) => {
      if (found[k] !== word) return; // changed since the read: not ours to release
      owners.add(lockOwner(word));
      if (at < layout.heapOffset) buckets++;
      else items++;
    });
    stats.count.orphanLocksReleased += buckets + items;
    if (buckets + items > 0) log?.warn({ bucketLocks: buckets, lockItems: items, owners: [...owners] }, 'released locks held by no live client');
    this.parts.events.emit('orphanScan', { released: buckets + items });
    return buckets + items;
  }
}
