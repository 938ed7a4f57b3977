// Restart on an existing region file: the slots the server can trust give the
// live items, the heap's free extents are rebuilt around them, the session
// counter continues above them, and every lock still owned (by clients of the
// previous run) is released through the loopback queue pair. No client is
// served until this has finished (sessions/accept.ts holds their requests).
import type { Logger } from 'pino';

import { hashKey } from '../../native/index.js';
import { ItemType, KvLayout } from '../../protocol/constants.js';
import { EMPTY_SLOT, itemKey, itemType, readItemHeader, slotBlock, slotFingerprint, slotLengthUnits, slotUnits } from '../../protocol/index-format.js';
import { itemUnits } from '../../protocol/size-classes.js';
import type { Fabric } from '../fabric.js';
import type { SessionNumbers } from '../sessions/session-numbers.js';
import type { ServerStats } from '../stats.js';
import type { RegionStore } from '../store/region.js';
import type { LockRelease } from './locks.js';

export interface RestartParts {
  store: RegionStore;
  sessions: SessionNumbers;
  locks: LockRelease;
  stats: ServerStats;
  log: Logger | undefined;
  /** Tests only: waited for first (KvServerOptions.beforeRecovery). */
  beforeRecovery?: () => Promise<void>;
}

/** Recovers the region file's data; `fabric`'s loopback releases the locks. */
export async function recoverRegionFile(parts: RestartParts, fabric: Fabric): Promise<void> {
  const { store, stats } = parts;
  await parts.beforeRecovery?.();
  const region = store.bytes;
  const live = liveSlots(parts);
  parts.sessions.continueAbove((function* () {
    for (const block of live.keys()) yield readItemHeader(region, store.itemAt(block)).version;
  })());
  for (const block of live.keys()) {
    if (itemType(region, store.itemAt(block)) === ItemType.LOCK) store.lockItems.add(block);
  }
  store.heap.rebuild([...live].map(([block, units]) => ({ block, units })));
  stats.count.items = live.size;
  const released = await parts.locks.release(fabric, 'any');
  parts.log?.info({ items: live.size, locksReleased: released, slotsSkipped: stats.count.recoveredSlotsSkipped }, 'recovered the region file');
}

/**
 * The live blocks (block -> units) of a region file's index. A slot is trusted only when its
 * block lies inside the heap, its units are those of a possible item, its item's header fits
 * the slot exactly (units = the item's length, as clients write them), and the item's key
 * hashes to the slot's fingerprint and bucket. (The item's checksum is not checked here: a
 * damaged value stays linked and its readers answer KV_CORRUPT, loudly, rather than the key
 * vanishing at a restart.) Of two trusted slots
 * whose blocks overlap, the lower block wins. Every other slot is skipped, counted, and
 * cleared: slots are written by RDMA WRITE, never touched by atomics, and no client is
 * served during recovery, so this CPU store races with nobody — and a slot left pointing
 * past the heap would fail every client READ of its bucket's key with a remote access error.
 */
function liveSlots({ store, stats, log }: RestartParts): Map<number, number> {
  const { index } = store;
  const candidates: Array<{ bucket: number; i: number; block: number; units: number }> = [];
  const untrusted: Array<{ bucket: number; i: number }> = [];
  const reasons: Record<string, number> = {};
  const skip = (bucket: number, i: number, why: string) => {
    untrusted.push({ bucket, i });
    reasons[why] = (reasons[why] ?? 0) + 1;
  };
  for (let bucket = 0; bucket < index.bucketCount; bucket++) {
    for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
      const slot = index.slot(bucket, i);
      if (slot === EMPTY_SLOT) continue;
      const why = untrustedSlot(store, slot, bucket);
      if (why) skip(bucket, i, why);
      else candidates.push({ bucket, i, block: slotBlock(slot), units: slotUnits(slot) });
    }
  }
  const live = new Map<number, number>();
  candidates.sort((x, y) => x.block - y.block);
  let end = 0; // first unit after the last accepted block
  let last = -1;
  for (const { bucket, i, block, units } of candidates) {
    if (block === last) continue; // a moved entry may stand twice (same slot word: units follow from the item)
    if (block < end) {
      skip(bucket, i, 'block overlaps another item');
      continue;
    }
    live.set(block, units);
    last = block;
    end = block + store.blockUnits(units);
  }
  for (const { bucket, i } of untrusted) index.clearSlot(bucket, i);
  stats.count.recoveredSlotsSkipped += untrusted.length;
  if (untrusted.length > 0) log?.warn({ slots: untrusted.length, reasons }, 'recovery skipped slots it cannot trust');
  return live;
}

/** Why the slot `slot` of bucket `bucket` cannot be trusted; undefined if it can (see liveSlots). */
function untrustedSlot(store: RegionStore, slot: bigint, bucket: number): string | undefined {
  const { layout } = store;
  const units = slotUnits(slot);
  const block = slotBlock(slot);
  const largest = layout.classes[layout.classes.length - 1]!;
  if (units === 0) return 'zero units';
  if (units > largest) return 'more units than the largest item';
  if ((block + store.blockUnits(units)) * KvLayout.UNIT_BYTES > layout.heapBytes) return 'block past the heap';
  const at = store.itemAt(block);
  const { type, keyLength, valueLength } = readItemHeader(store.bytes, at);
  if (type !== ItemType.BYTES && type !== ItemType.COUNTER && type !== ItemType.LOCK) return 'no item type';
  if (keyLength > KvLayout.MAX_KEY_BYTES || valueLength > layout.maxValueBytes) return 'item lengths out of range';
  if (slotLengthUnits(itemUnits(keyLength, valueLength)) !== units) return 'item length does not match the slot';
  const { b1, b2, fingerprint } = hashKey(itemKey(store.bytes, at, keyLength), store.seed, layout.bucketCount);
  if (fingerprint !== slotFingerprint(slot) || (bucket !== b1 && bucket !== b2)) return 'item key does not hash to the slot';
  return undefined;
}
