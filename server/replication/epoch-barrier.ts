// The epoch barrier (docs/replication-design.md §4.3): when this member's role
// for some hash slots changes at epoch E + 1, no write decided under epoch E
// may commit here afterwards. A writer takes its bucket locks, then READs its
// hash slot's epoch word (fenced behind the locks), and goes on only if the
// word is (E, OPEN). So the barrier
//   1. stores (E + 1, CLOSED) into the hash slots' words;
//   2. reads every bucket lock word of the index once;
//   3. waits until each word that was held has changed, or its owner is gone
//      (no longer a client: its queue pair is destroyed, nothing it posted can
//      land; a departing owner is waited for, since departures release its
//      locks);
//   4. stores (E + 1, OPEN).
// A writer that read the word before step 1 held its lock before step 2's
// read, so step 3 waits for it; a writer that reads after step 1 sees CLOSED
// (or E + 1) and starts over. Step 1's stores are sequentially consistent
// (EpochTable), so step 2's loads are not ordered before them.
//
// It only reads lock words (a 32-bit load of each bucket's owner half); lock
// words belong to the clients' RDMA atomics and are never stored by the CPU.
import { lockOwner } from '../../protocol/index-format.js';
import type { RegionStore } from '../store/region.js';

export interface EpochBarrierParts {
  store: RegionStore;
  /** Ids that may still land a write: connected or connecting clients, and departing ones. */
  liveOwners: () => ReadonlySet<number>;
  /** The server is closing: the barrier gives up (its words stay CLOSED). */
  isClosed: () => boolean;
}

export interface EpochBarrierReport {
  /** Bucket locks held when the index was read. */
  heldAtStart: number;
  /** Of those, the ones whose owner was waited for (still live and still held at first look). */
  waitedFor: number;
  /** Milliseconds reading the index (step 2). */
  scanMs: number;
  /** Milliseconds from the CLOSED store to the OPEN store. */
  totalMs: number;
}

export class EpochBarrierError extends Error {}

const POLL_MS = 1;

/**
 * Runs the barrier for `hashSlots` into `epoch` (E + 1). The region must have an epoch table (format 5).
 * `mayOpen` false at the end (the member self-fenced meanwhile): the words are fenced at `epoch`, not opened.
 */
export async function runEpochBarrier(parts: EpochBarrierParts, hashSlots: readonly number[], epoch: number, mayOpen: () => boolean = () => true): Promise<EpochBarrierReport> {
  const { store, isClosed } = parts;
  const epochs = store.epochs;
  if (!epochs) throw new EpochBarrierError(`the region is of format ${store.layout.format}, which has no epoch table`);
  const start = performance.now();
  epochs.store(hashSlots, epoch, 'closed');

  const { index, layout } = store;
  const held: Array<{ bucket: number; word: bigint }> = [];
  for (let bucket = 0; bucket < layout.bucketCount; bucket++) {
    if (index.lockHolder(bucket) !== 0) held.push({ bucket, word: index.lockWord(bucket) });
  }
  const scanMs = performance.now() - start;
  const heldAtStart = held.length;

  let waiting = stillHeld(held, parts);
  const waitedFor = waiting.length;
  while (waiting.length > 0) {
    if (isClosed()) throw new EpochBarrierError(`the server closed during the epoch barrier into epoch ${epoch}: ${waiting.length} writers were still holding locks`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    waiting = stillHeld(waiting, parts);
  }
  epochs.store(hashSlots, epoch, mayOpen() ? 'open' : 'fenced');
  return { heldAtStart, waitedFor, scanMs, totalMs: performance.now() - start };
}

/** The locks of `held` that still hold the word read, by an owner that may still write. */
function stillHeld(held: ReadonlyArray<{ bucket: number; word: bigint }>, parts: EpochBarrierParts): Array<{ bucket: number; word: bigint }> {
  const live = parts.liveOwners();
  const { index } = parts.store;
  return held.filter(({ bucket, word }) => index.lockWord(bucket) === word && live.has(lockOwner(word)));
}
