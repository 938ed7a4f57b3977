// Eviction (kv-server --eviction lru|lfu): when the heap's use passes the high
// watermark, or a grant finds no block that fits, the least valuable items
// are removed (remove.ts) until the use is down to the low watermark. Use
// counts a removed item's block as freed from its removal on, though the block
// is reused only after the grace period: a grant that waits for it is served
// then (grants.ts keeps it waiting while eviction can still free memory).
//
// Who goes: each round reads buckets from a random one on until it has seen
// CANDIDATES eligible items (or MAX_SAMPLE_BUCKETS buckets: Redis samples keys the same
// way, rather than keeping an exact LRU list on the hot path), adds the pool the
// last round kept, and removes the ROUND_VICTIMS worst of all (the next POOL_SIZE
// are the next round's pool, as Redis's eviction pool): lru the oldest stamp
// (last read or write, item-use.ts), lfu the fewest reads, then the oldest.
// Never a candidate: counters and locks (only bytes items are evicted, so
// both survive), an item whose notice has not been drained, and an item
// published or read within the last grace period.
import type { Logger } from 'pino';

import { IndexWord, ItemType, KvLayout } from '../../protocol/constants.js';
import { itemType, slotBlock } from '../../protocol/index-format.js';
import type { Fabric } from '../fabric.js';
import type { Chain } from '../recovery/chain.js';
import type { RegionStore } from '../store/region.js';
import type { AccessBits } from './access-bits.js';
import { type ItemUse, TICK_MS } from './item-use.js';
import { type RemoveParts, type Victim, removeItems } from './remove.js';

export type EvictionPolicy = 'none' | 'lru' | 'lfu';
export type EvictionReason = 'watermark' | 'grant';

/**
 * Eligible items a round compares before it picks its victims, and the most buckets it looks at
 * to find them. A fixed number of buckets is not enough: in a sparse index 64 buckets held
 * ~14 items, every one of them went, and lru kept a hot key only while it was read within the
 * grace period (in the Soft-RoCE guest, where a round of reads took longer, 8 hot keys of 200
 * survived against 191-200 on shm). Bounded, as a round runs on the server's event loop: at
 * 4,096 buckets a round, a server sharing its thread with a client (the guest's tests) starved it.
 */
const CANDIDATES = 64;
const MAX_SAMPLE_BUCKETS = 512;
/** Items one round removes at most (one loopback doorbell for the locks, one for the releases). */
const ROUND_VICTIMS = 16;
/** Candidates a round keeps for the next: the pool a new sample is compared with. */
const POOL_SIZE = 64;
/** Rounds in a row that may find nothing to remove before a run gives up (all protected). */
const FRUITLESS_ROUNDS = 16;
/**
 * A run a grant started frees at least this much (the largest grant), even below the low
 * watermark: a heap whose free memory is cut into extents too small for the class asked needs
 * blocks freed, not a lower use. While the grant waits, each reclaim tick may start another.
 */
const GRANT_FLOOR_BYTES = 1 << 20;

export interface EvictorParts extends RemoveParts {
  use: ItemUse;
  policy: 'lru' | 'lfu';
  /** fractions of the heap: start evicting above high, stop at low */
  high: number;
  low: number;
  graceMs: number;
  /** the clients' read hints (access-bits.ts), read on every check */
  accessBits: AccessBits;
  loopbackChain: Chain;
  fabric: () => Fabric | undefined;
  log: Logger | undefined;
  isClosed: () => boolean;
}

export class Evictor {
  private running: Promise<void> | undefined;
  /** the last run ended finding nothing more to remove (counters, locks, items of the grace period) */
  private exhausted = false;
  /** when a run last said it found nothing to evict (said at most once a minute) */
  private stuckLoggedAt = -Infinity;
  private readonly use: ItemUse;
  private readonly store: RegionStore;
  /** the best victims a round found and did not take (re-checked and re-scored by the next) */
  private pool: Candidate[] = [];
  /** pooled[block] === round: the block is in this round's pool (not taken twice) */
  private readonly pooled: Uint32Array;
  private round = 0;
  /** the index as 32-bit halves: [lock lo, lock hi, slot 1 lo (its block), slot 1 hi, ...] */
  private readonly halves: Uint32Array;
  private readonly heapUnits: number;
  /** ticks within which a published or read item is kept */
  private readonly graceTicks: number;

  constructor(private readonly parts: EvictorParts) {
    ({ use: this.use, store: this.store } = parts);
    const { layout, bytes } = this.store;
    this.halves = new Uint32Array(bytes.buffer, bytes.byteOffset + layout.indexOffset, (layout.bucketCount * KvLayout.BUCKET_BYTES) / 4);
    this.heapUnits = layout.heapBytes / KvLayout.UNIT_BYTES;
    this.pooled = new Uint32Array(this.heapUnits);
    this.graceTicks = Math.ceil(parts.graceMs / TICK_MS) + 1;
  }

  /**
   * Can a run still free memory: one is going on, or the last one removed something (it stopped
   * at its target, not for want of items). A waiting grant keeps waiting and starting runs while
   * this holds, however late the reclaim tick that asks comes after a run's end.
   */
  get mayFreeMore(): boolean {
    return this.running !== undefined || !this.exhausted;
  }

  /** Heap bytes counted as in use: granted or live, not those already on their way out. */
  usedBytes(): number {
    const { heap } = this.store;
    return heap.stats().usedBytes - heap.graceBytes;
  }

  /** The periodic check: a run when the use is past the high watermark. */
  check(): void {
    this.parts.accessBits.scan();
    if (this.usedBytes() > this.parts.high * this.store.layout.heapBytes) this.start('watermark');
  }

  /** A grant found no block that fits: a run whatever the watermark. */
  shortOfMemory(): void {
    this.start('grant');
  }

  private start(reason: EvictionReason): void {
    if (this.running || this.parts.isClosed()) return;
    this.running = this.run(reason)
      .catch((error: Error) => this.parts.log?.error({ err: error.message }, 'eviction failed'))
      .finally(() => {
        this.running = undefined;
      });
  }

  private async run(reason: EvictionReason): Promise<void> {
    const { parts, store } = this;
    const target = parts.low * store.layout.heapBytes;
    let fruitless = 0;
    let removed = 0;
    let freed = 0;
    const wanted = () => this.usedBytes() > target || (reason === 'grant' && freed < GRANT_FLOOR_BYTES);
    while (!parts.isClosed() && wanted() && fruitless < FRUITLESS_ROUNDS) {
      const fabric = parts.fabric();
      if (!fabric) break;
      const victims = this.sample();
      const done = victims.length === 0 ? { items: 0, bytes: 0 } : await onChain(parts.loopbackChain, () => removeItems(parts, fabric, victims, (block) => this.eligible(block, this.use.now())));
      if (done.items === 0) fruitless++;
      else {
        fruitless = 0;
        removed += done.items;
        freed += done.bytes;
        parts.stats.count.evictions[reason] += done.items;
        parts.stats.count.removedBytes[reason] += done.bytes;
      }
      await new Promise<void>((resolve) => setImmediate(resolve)); // never hog the event loop
    }
    this.exhausted = fruitless >= FRUITLESS_ROUNDS;
    if (this.exhausted && performance.now() - this.stuckLoggedAt > 60_000) {
      this.stuckLoggedAt = performance.now();
      parts.log?.warn({ reason, removed, usedBytes: this.usedBytes() }, 'eviction found nothing more to evict (counters, locks and items of the last grace period are kept)');
    } else if (removed > 0) parts.log?.debug({ reason, removed, freed }, 'evicted');
  }

  /** A block that may go: a published bytes item not used within the grace period. */
  private eligible(block: number, now: number): boolean {
    return this.fresh(block, now) && itemType(this.store.bytes, this.store.itemAt(block)) === ItemType.BYTES;
  }

  /** Published, and neither published nor read within the grace period (eligible() but the type). */
  private fresh(block: number, now: number): boolean {
    const stamp = this.use.stamp[block]!;
    return stamp !== 0 && now - stamp > this.graceTicks;
  }

  /**
   * The worst ROUND_VICTIMS of this round's sample and the pool, and at most half of those:
   * the rest of the worst, up to POOL_SIZE, are kept for the next round (Redis's eviction pool),
   * so a victim is the worst of many rounds' samples, not of one round's 64.
   */
  private sample(): Victim[] {
    const { index } = this.store;
    const { halves, heapUnits, pooled, graceTicks } = this;
    const { stamp } = this.use;
    const now = this.use.now();
    const round = ++this.round;
    const seen: Candidate[] = [];
    for (const kept of this.pool) {
      // Still there and not used since: scored again. (Its type was checked when it was sampled; removeItems
      // compares the whole slot word and asks eligible() again under the lock.)
      if (halves[kept.at] !== kept.block || !this.fresh(kept.block, now)) continue;
      kept.score = this.score(kept.block);
      seen.push(kept);
      pooled[kept.block] = round;
    }
    const buckets = index.bucketCount;
    // From a random bucket on, in order: keys hash to buckets at random, and no bucket is seen twice.
    // Slots are read as 32-bit halves (the low one is the block): an empty or too fresh one makes no BigInt.
    const first = Math.floor(Math.random() * buckets);
    let fresh = 0;
    for (let n = 0; n < Math.min(MAX_SAMPLE_BUCKETS, buckets) && fresh < CANDIDATES; n++) {
      const bucket = (first + n) % buckets;
      for (let i = 0, at = bucket * 2 * IndexWord.BUCKET_WORDS + 2; i < KvLayout.SLOTS_PER_BUCKET; i++, at += 2) {
        const block = halves[at]!;
        if ((block | halves[at + 1]!) === 0 || block >= heapUnits) continue;
        const used = stamp[block]!; // fresh(), inline: in a sparse index this loop reads ~80 slots per victim
        if (used === 0 || now - used <= graceTicks || pooled[block] === round) continue;
        const slot = index.slot(bucket, i);
        if (!this.store.slotInHeap(slot) || slotBlock(slot) !== block || !this.eligible(block, now)) continue;
        seen.push({ bucket, i, slot, at, block, score: this.score(block) });
        fresh++;
      }
    }
    // The worse half at most: a victim is always chosen against as many items kept, so a round that
    // found few candidates (a sparse index, most items too fresh) does not take them all.
    seen.sort((x, y) => x.score - y.score);
    const victims = Math.min(ROUND_VICTIMS, Math.max(1, seen.length >> 1));
    this.pool = seen.slice(victims, victims + POOL_SIZE);
    return seen.slice(0, victims);
  }

  /** lfu: fewest reads first, the oldest among equals; lru: the oldest. */
  private score(block: number): number {
    const { stamp, hits } = this.use;
    return hits ? hits[block]! * 2 ** 32 + stamp[block]! : stamp[block]!;
  }
}

/** A sampled item and its score (lower goes first). */
interface Candidate extends Victim {
  /** its slot's low half in the index's Uint32Array view */
  at: number;
  block: number;
  score: number;
}

/** Runs `task` as one task of the loopback chain and resolves with its result. */
export function onChain<T>(chain: Chain, task: () => Promise<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => chain.add(async () => resolve(await task()), reject));
}
