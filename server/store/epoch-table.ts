// The epoch table (region format 5; docs/replication-design.md §4.2): one word
// per hash slot, [epoch:32 | state:32]. Writers READ their hash slot's word
// after taking their bucket locks and go on only if it is (E, OPEN) for the
// epoch E of their configuration; a barrier (server/replication/epoch-barrier.ts)
// closes a hash slot's word, waits out the writers that read it open, and
// opens it at the next epoch.
//
// Ownership: only this server's CPU stores these words, and no RDMA atomic
// ever touches them (clients only READ), so plain CPU stores are safe. Every
// store is Atomics.store, sequentially consistent: the barrier's loads of the
// lock words that follow a store cannot be ordered before it (x86 reorders a
// plain store after a later load).
import { EpochWord } from '../../protocol/constants.js';

export type EpochState = 'open' | 'closed' | 'fenced' | 'damaged';

const STATES: Record<number, EpochState> = { [EpochWord.OPEN]: 'open', [EpochWord.CLOSED]: 'closed', [EpochWord.FENCED]: 'fenced' };
const CODES = { open: EpochWord.OPEN, closed: EpochWord.CLOSED, fenced: EpochWord.FENCED } as const;
const SHIFT = BigInt(EpochWord.EPOCH_SHIFT);

/** The word a hash slot holds at `epoch` in `state`. */
export function epochWord(epoch: number, state: Exclude<EpochState, 'damaged'>): bigint {
  if (!Number.isInteger(epoch) || epoch < 0 || epoch > 0xffffffff) throw new RangeError(`an epoch is a 32-bit unsigned integer (got ${epoch})`);
  return (BigInt(epoch) << SHIFT) | BigInt(CODES[state]);
}

/** A word as read from the region: a state other than the three is damage, never trusted as open. */
export function parseEpochWord(word: bigint): { epoch: number; state: EpochState } {
  return { epoch: Number(word >> SHIFT), state: STATES[Number(word & 0xffffffffn)] ?? 'damaged' };
}

export class EpochTable {
  private readonly words: BigUint64Array;

  constructor(region: Buffer, offset: number) {
    if ((region.byteOffset + offset) % 8 !== 0) throw new Error(`the epoch table at ${offset} is not 8-byte aligned`);
    this.words = new BigUint64Array(region.buffer, region.byteOffset + offset, EpochWord.HASH_SLOTS);
  }

  /** The word of `hashSlot` as it is now (what a client's READ would see). */
  word(hashSlot: number): bigint {
    return Atomics.load(this.words, this.check(hashSlot));
  }

  read(hashSlot: number): { epoch: number; state: EpochState } {
    return parseEpochWord(this.word(hashSlot));
  }

  /** Stores (epoch, state) into each of `hashSlots`' words. */
  store(hashSlots: Iterable<number>, epoch: number, state: Exclude<EpochState, 'damaged'>): void {
    const word = epochWord(epoch, state);
    for (const hashSlot of hashSlots) Atomics.store(this.words, this.check(hashSlot), word);
  }

  /** Every hash slot open at `epoch` (a new region: epoch 0). */
  openAll(epoch: number): void {
    this.store(allHashSlots(), epoch, 'open');
  }

  /**
   * Every hash slot fenced at the epoch it holds: a replica starting up serves no write until
   * the config says which hash slots are its (replication/epoch-follower.ts opens those).
   */
  fenceAll(): void {
    for (const hashSlot of allHashSlots()) {
      const { epoch, state } = this.read(hashSlot);
      Atomics.store(this.words, hashSlot, epochWord(state === 'damaged' ? 0 : epoch, 'fenced'));
    }
  }

  /** How many hash slots are in each state (a damaged word counts as damaged). */
  states(): Record<EpochState, number> {
    const counts: Record<EpochState, number> = { open: 0, closed: 0, fenced: 0, damaged: 0 };
    for (let i = 0; i < EpochWord.HASH_SLOTS; i++) counts[parseEpochWord(Atomics.load(this.words, i)).state]++;
    return counts;
  }

  private check(hashSlot: number): number {
    if (!Number.isInteger(hashSlot) || hashSlot < 0 || hashSlot >= EpochWord.HASH_SLOTS) throw new RangeError(`a hash slot is 0-${EpochWord.HASH_SLOTS - 1} (got ${hashSlot})`);
    return hashSlot;
  }
}

/** 0 … 16,383. */
export function* allHashSlots(): Generator<number> {
  for (let i = 0; i < EpochWord.HASH_SLOTS; i++) yield i;
}
