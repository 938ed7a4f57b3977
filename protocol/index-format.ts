// The region's index and item words as TypeScript reads and writes them: one
// codec, the twin of native/kv/layout.h (bit positions from constants.def's
// IndexWord; test/protocol/index-format.test.ts holds the two together).
//
// Vocabulary: a *bucket* is one 64-byte line of the index: word 0 its lock
// word, words 1-7 its *slots*. A slot is [fingerprint:16 | length:16 | block:32]
// (0 = empty): the item's length (64-byte units, exact, up to 32,767 of them;
// above, top bit set, 4 KiB granules rounded up: slotUnits decodes both) and its
// heap offset in 64-byte units.
// Who may write which word is docs/protocol.md's "atomics rule": lock words
// and items' atomic words change only by RDMA atomics, slots only by the
// holder of their bucket's lock (or by the server while no client is served).
import { IndexWord, ItemHeader, ItemType, KvLayout } from './constants.js';

const FP_SHIFT = BigInt(IndexWord.SLOT_FINGERPRINT_SHIFT);
const UNITS_SHIFT = BigInt(IndexWord.SLOT_UNITS_SHIFT);
const UNITS_MASK = BigInt(IndexWord.SLOT_UNITS_MASK);
const VERSION_SHIFT = BigInt(IndexWord.LOCK_VERSION_SHIFT);
const LOW32 = (1n << VERSION_SHIFT) - 1n;
const SESSION_SHIFT = BigInt(KvLayout.SESSION_VERSION_BITS);

// ---- slots ----

export const EMPTY_SLOT = 0n;

/** The 16-bit length field of an item of `units` (at most IndexWord.SLOT_MAX_UNITS): exact when fine, granules when coarse. */
export function slotLengthField(units: number): number {
  return units <= IndexWord.SLOT_FINE_MAX_UNITS ? units : IndexWord.SLOT_COARSE_FLAG | Math.ceil(units / IndexWord.SLOT_COARSE_UNITS);
}
const fieldUnits = (field: number): number =>
  (field & IndexWord.SLOT_COARSE_FLAG) === 0 ? field : (field & IndexWord.SLOT_FINE_MAX_UNITS) * IndexWord.SLOT_COARSE_UNITS;
/** The length a slot gives an item of `units`: the same when fine, rounded up to a 4 KiB granule when coarse. */
export const slotLengthUnits = (units: number): number => fieldUnits(slotLengthField(units));

export function packSlot(fingerprint: number, units: number, block: number): bigint {
  return (BigInt(fingerprint) << FP_SHIFT) | (BigInt(slotLengthField(units)) << UNITS_SHIFT) | BigInt(block >>> 0);
}
export const slotFingerprint = (slot: bigint): number => Number(slot >> FP_SHIFT);
/** The item's length in units as the slot gives it (the one decoder: coarse lengths come rounded up to a granule). */
export const slotUnits = (slot: bigint): number => fieldUnits(Number((slot >> UNITS_SHIFT) & UNITS_MASK));
/** The item's heap block: its offset from the heap's start, in units. */
export const slotBlock = (slot: bigint): number => Number(slot & LOW32);

// ---- lock words (buckets: [version | owner]; lock items: [token | owner]) ----

export function lockWord(version: number, owner: number): bigint {
  return (BigInt(version >>> 0) << VERSION_SHIFT) | BigInt(owner >>> 0);
}
export const lockOwner = (word: bigint): number => Number(word & LOW32);
export const lockVersion = (word: bigint): number => Number(word >> VERSION_SHIFT);
/** The FETCH_AND_ADD operand that clears `owner` and bumps the version in one atomic. */
export const releaseAddend = (owner: number): bigint => (1n << VERSION_SHIFT) - BigInt(owner >>> 0);
/** The word a CMP_AND_SWP releasing a bucket's `word` writes: version + 1, owner 0. */
export const releasedBucketWord = (word: bigint): bigint => ((BigInt(lockVersion(word)) + 1n) & LOW32) << VERSION_SHIFT;
/** The word a CMP_AND_SWP releasing a lock item's `word` writes: its token kept, owner 0. */
export const releasedLockItemWord = (word: bigint): bigint => word & ~LOW32;
/** A DELETE sealed this lock item's word (owner bit 31) before unlinking it. */
export const lockSealed = (word: bigint): boolean => (word & BigInt(KvLayout.LOCK_SEAL)) !== 0n;

// ---- counters and versions ----

/** A counter item's word holds value << 1; bit 0 is a DELETE's seal. Counters count modulo 2^63. */
export const counterValue = (word: bigint): bigint => (word >> 1n) & ((1n << 63n) - 1n);
export const counterSealed = (word: bigint): boolean => (word & BigInt(KvLayout.COUNTER_SEAL)) !== 0n;
/** The seal a DELETE adds to an item of this type's atomic word (0n: bytes, nothing to seal). */
export function sealOf(type: number): bigint {
  return type === ItemType.COUNTER ? BigInt(KvLayout.COUNTER_SEAL) : type === ItemType.LOCK ? BigInt(KvLayout.LOCK_SEAL) : 0n;
}
/** A DELETE sealed this item's atomic word (a counter's or a lock's; a bytes item has none). */
export const itemSealed = (type: number, word: bigint): boolean => (word & sealOf(type)) !== 0n;
/** The session that wrote an item (a version is session << SESSION_VERSION_BITS | sequence). */
export const versionSession = (version: bigint): bigint => version >> SESSION_SHIFT;
export const sessionVersionBase = (session: bigint): bigint => session << SESSION_SHIFT;

// ---- the index in a region ----

/**
 * The index of a region in this process's memory: bucket and slot words read whole
 * (Atomics.load on 64-bit words, so the compiler never reuses or tears a read), the owner half
 * of a lock word through a 32-bit view (a scan of idle buckets makes no BigInt).
 */
export class IndexView {
  readonly words: BigUint64Array;
  private readonly halves: Uint32Array;

  constructor(
    region: Buffer,
    /** Region offset of bucket 0. */
    readonly indexOffset: number,
    readonly bucketCount: number,
  ) {
    this.words = new BigUint64Array(region.buffer, region.byteOffset + indexOffset, bucketCount * IndexWord.BUCKET_WORDS);
    this.halves = new Uint32Array(region.buffer, region.byteOffset + indexOffset, bucketCount * IndexWord.BUCKET_WORDS * 2);
  }

  /** Region offset of a bucket, which is also that of its lock word. */
  bucketOffset(bucket: number): number {
    return this.indexOffset + bucket * KvLayout.BUCKET_BYTES;
  }
  lockWord(bucket: number): bigint {
    return Atomics.load(this.words, bucket * IndexWord.BUCKET_WORDS);
  }
  /** The owner of a bucket's lock (0: free), without a BigInt. Little-endian: the low half comes first. */
  lockHolder(bucket: number): number {
    return this.halves[bucket * IndexWord.BUCKET_WORDS * 2]!;
  }
  /** Slot `i` (0 to SLOTS_PER_BUCKET - 1) of a bucket. */
  slot(bucket: number, i: number): bigint {
    return Atomics.load(this.words, bucket * IndexWord.BUCKET_WORDS + 1 + i);
  }
  slotOffset(bucket: number, i: number): number {
    return this.bucketOffset(bucket) + 8 * (1 + i);
  }
  /**
   * Empties a slot with a CPU store. Only for slots (no RDMA atomic ever changes one), and only
   * where no client can be writing the bucket: it is unserved, or its lock is held by a fenced client.
   */
  clearSlot(bucket: number, i: number): void {
    Atomics.store(this.words, bucket * IndexWord.BUCKET_WORDS + 1 + i, EMPTY_SLOT);
  }
  /** Does a slot of `bucket` hold heap block `block`? */
  pointsTo(bucket: number, block: number): boolean {
    for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
      const slot = this.slot(bucket, i);
      if (slot !== EMPTY_SLOT && slotBlock(slot) === block) return true;
    }
    return false;
  }
}

// ---- item headers ----

export interface ItemHeaderFields {
  type: number;
  keyLength: number;
  valueLength: number;
  version: bigint;
  /** CRC32C of the header (checksum, atomic word and state as 0), key and value: native/kv/layout.h's item_checksum. */
  checksum: number;
  /** The replication configuration epoch the item was written in (0: no replication yet). */
  epoch: number;
  /** Absolute Unix time in ms after which the item is gone, 0 = never (recorded, not enforced yet). */
  expiry: bigint;
  /** The item's own version while it is linked; ItemState.SUPERSEDED (0) once a later write replaced or deleted it. */
  state: bigint;
}

/** The header of the item at region offset `at` (the caller checks `at` lies in the heap). */
export function readItemHeader(region: Buffer, at: number): ItemHeaderFields {
  return {
    type: region.readUInt16LE(at + ItemHeader.TYPE),
    keyLength: region.readUInt16LE(at + ItemHeader.KEY_LEN),
    valueLength: region.readUInt32LE(at + ItemHeader.VALUE_LEN),
    version: region.readBigUInt64LE(at + ItemHeader.VERSION),
    checksum: region.readUInt32LE(at + ItemHeader.CHECKSUM),
    epoch: region.readUInt32LE(at + ItemHeader.EPOCH),
    expiry: region.readBigUInt64LE(at + ItemHeader.EXPIRY),
    state: region.readBigUInt64LE(at + ItemHeader.STATE),
  };
}
export const itemType = (region: Buffer, at: number): number => region.readUInt16LE(at + ItemHeader.TYPE);
/** An item's atomic word (counter value, lock [token | owner]): read by the CPU, changed only by RDMA atomics. */
export const itemAtomicWord = (region: Buffer, at: number): bigint => region.readBigUInt64LE(at + ItemHeader.ATOMIC_WORD);
/** Region offset of an item's atomic word. */
export const atomicWordOffset = (at: number): number => at + ItemHeader.ATOMIC_WORD;
/** Region offset of an item's state word (ItemState; written by RDMA WRITE, never by atomics). */
export const itemStateOffset = (at: number): number => at + ItemHeader.STATE;
/** The item's key, as a view of the region. */
export function itemKey(region: Buffer, at: number, keyLength: number): Buffer {
  const keyAt = at + KvLayout.ITEM_HEADER_BYTES;
  return region.subarray(keyAt, keyAt + keyLength);
}
