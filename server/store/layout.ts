// Where everything lives in the region (region format 5):
//   [ superblock 4 KiB | rings: maxClients × (64 B header + 256 × 32 B records) | epoch table: 16,384 × 8 B |
//     index: buckets × 64 B | heap | access table ]
// The access table (a byte per heap unit) is there only with eviction on. Formats 3 and 4 (region
// files of earlier releases) have no epoch table: the index follows the rings.
import { EpochWord, KvLayout, Superblock } from '../../protocol/constants.js';
import { sizeClasses } from '../../protocol/size-classes.js';

export interface RegionLayout {
  /** The region format the superblock says (KvLayout.REGION_FORMAT for a new region). */
  format: number;
  regionBytes: number;
  bucketCount: number;
  ringOffset: number;
  ringBytes: number; // per client
  maxClients: number;
  indexOffset: number;
  heapOffset: number;
  heapBytes: number;
  /** The access table (a byte per heap unit, right after the heap) with eviction on; 0: none. */
  accessOffset: number;
  /** The epoch table (a word per hash slot, format 5 on); 0: none (formats 3 and 4). */
  epochOffset: number;
  maxValueBytes: number;
  classes: number[];
}

/** The bytes of the epoch table: one word per hash slot. */
export const EPOCH_TABLE_BYTES = EpochWord.HASH_SLOTS * 8;

export class LayoutError extends Error {}

const floorPow2 = (n: number): number => 2 ** Math.floor(Math.log2(n));
const align = (n: number, to: number): number => Math.ceil(n / to) * to;

/**
 * The layout for a region of `regionBytes`. By default the index takes about a
 * sixteenth of the region (7 slots per 64-byte bucket: one slot per ~146 bytes
 * of region), the rest after the rings is heap.
 */
export function planLayout(options: { regionBytes: number; buckets?: number; maxClients: number; maxValueBytes: number; accessTable?: boolean; format?: number }): RegionLayout {
  const { regionBytes, maxClients, maxValueBytes } = options;
  const format = options.format ?? KvLayout.REGION_FORMAT;
  const ringBytes = KvLayout.RING_HEADER_BYTES + KvLayout.RING_RECORDS * KvLayout.RECORD_BYTES;
  const ringOffset = KvLayout.SUPERBLOCK_BYTES;
  const ringsEnd = align(ringOffset + maxClients * ringBytes, 4096);
  const epochOffset = format >= 5 ? ringsEnd : 0;
  const indexOffset = format >= 5 ? ringsEnd + EPOCH_TABLE_BYTES : ringsEnd;
  const bucketCount = options.buckets ?? Math.max(2, floorPow2(regionBytes / 16 / KvLayout.BUCKET_BYTES));
  if (!Number.isInteger(bucketCount) || bucketCount < 2 || floorPow2(bucketCount) !== bucketCount) {
    throw new LayoutError(`--buckets must be a power of two >= 2 (got ${bucketCount})`);
  }
  const heapOffset = align(indexOffset + bucketCount * KvLayout.BUCKET_BYTES, 4096);
  const maxItemUnits = Math.ceil((KvLayout.ITEM_HEADER_BYTES + KvLayout.MAX_KEY_BYTES + maxValueBytes) / KvLayout.UNIT_BYTES);
  if (maxValueBytes > KvLayout.MAX_VALUE_LIMIT) {
    throw new LayoutError(`the largest value may be at most ${KvLayout.MAX_VALUE_LIMIT} bytes (127 MiB; got ${maxValueBytes} bytes)`);
  }
  // With an access table every 64-byte unit of heap costs 65 bytes of region.
  const perUnit = KvLayout.UNIT_BYTES + (options.accessTable ? 1 : 0);
  const heapBytes = Math.floor((regionBytes - heapOffset) / perUnit) * KvLayout.UNIT_BYTES;
  const accessOffset = options.accessTable ? heapOffset + heapBytes : 0;
  if (heapBytes < 4 * maxItemUnits * KvLayout.UNIT_BYTES) {
    const need = heapOffset + 4 * maxItemUnits * perUnit;
    throw new LayoutError(
      `memory too small: ${regionBytes} bytes leave ${Math.max(0, heapBytes)} bytes of heap after the index and rings; ` +
        `at least ${need} bytes are needed for ${bucketCount} buckets, ${maxClients} clients and ${maxValueBytes}-byte values`,
    );
  }
  if (heapBytes / KvLayout.UNIT_BYTES > 0xffffffff) throw new LayoutError('the heap may not exceed 256 GiB');
  return { format, regionBytes, bucketCount, ringOffset, ringBytes, maxClients, indexOffset, heapOffset, heapBytes, accessOffset, epochOffset, maxValueBytes, classes: sizeClasses(maxItemUnits) };
}

/**
 * Writes the superblock (little-endian u64 fields at the offsets in constants.def), in the
 * layout's format: a region file of an earlier format stays in it.
 */
export function writeSuperblock(region: Buffer, layout: RegionLayout, seed: bigint, generation: bigint, regionId: bigint): void {
  const put = (at: number, value: bigint | number) => region.writeBigUInt64LE(BigInt(value), at);
  put(Superblock.MAGIC, KvLayout.MAGIC);
  put(Superblock.VERSION, layout.format);
  put(Superblock.BUCKET_COUNT, layout.bucketCount);
  put(Superblock.INDEX_OFFSET, layout.indexOffset);
  put(Superblock.HEAP_OFFSET, layout.heapOffset);
  put(Superblock.HEAP_BYTES, layout.heapBytes);
  put(Superblock.SEED, seed);
  put(Superblock.GENERATION, generation);
  put(Superblock.RING_OFFSET, layout.ringOffset);
  put(Superblock.MAX_CLIENTS, layout.maxClients);
  put(Superblock.MAX_VALUE_BYTES, layout.maxValueBytes);
  put(Superblock.ACCESS_OFFSET, layout.accessOffset);
  if (layout.format >= 5) {
    put(Superblock.EPOCH_OFFSET, layout.epochOffset);
    put(Superblock.REGION_ID, regionId);
  }
}

/**
 * The next session number (the high bits of every version a session writes).
 * Written by the server's CPU before each hello that hands one out; no RDMA
 * operation touches the superblock. 0 in a new region, and in a region file
 * written before sessions were persisted (the caller then scans the items).
 */
export function readNextSession(region: Buffer): bigint {
  return region.readBigUInt64LE(Superblock.NEXT_SESSION);
}

export function writeNextSession(region: Buffer, session: bigint): void {
  region.writeBigUInt64LE(session, Superblock.NEXT_SESSION);
}

export interface SuperblockFields {
  magic: number;
  version: number;
  bucketCount: number;
  indexOffset: number;
  heapOffset: number;
  heapBytes: number;
  seed: bigint;
  ringOffset: number;
  maxClients: number;
  maxValueBytes: number;
  accessOffset: number;
  /** Format 5 on (0 before: those words were never written). */
  epochOffset: number;
  regionId: bigint;
}

export function readSuperblock(region: Buffer): SuperblockFields {
  const get = (at: number) => region.readBigUInt64LE(at);
  return {
    magic: Number(get(Superblock.MAGIC)),
    version: Number(get(Superblock.VERSION)),
    bucketCount: Number(get(Superblock.BUCKET_COUNT)),
    indexOffset: Number(get(Superblock.INDEX_OFFSET)),
    heapOffset: Number(get(Superblock.HEAP_OFFSET)),
    heapBytes: Number(get(Superblock.HEAP_BYTES)),
    seed: get(Superblock.SEED),
    ringOffset: Number(get(Superblock.RING_OFFSET)),
    maxClients: Number(get(Superblock.MAX_CLIENTS)),
    maxValueBytes: Number(get(Superblock.MAX_VALUE_BYTES)),
    accessOffset: Number(get(Superblock.ACCESS_OFFSET)),
    epochOffset: Number(get(Superblock.EPOCH_OFFSET)),
    regionId: get(Superblock.REGION_ID),
  };
}

/**
 * The region formats this kv-server serves: its own (5), format 4, which is format 5 without the
 * epoch table (the index follows the rings) and without a region id, and format 3, which is
 * format 4 without an access table (its ACCESS_OFFSET word was never written: 0), served as with
 * `--eviction none`. A file written by an earlier release keeps its data and its format; it just
 * cannot be a replica (docs/replication-design.md).
 */
export const READABLE_FORMATS: readonly number[] = [3, 4, KvLayout.REGION_FORMAT];
const formatList = `${READABLE_FORMATS.slice(0, -1).join(', ')} and ${READABLE_FORMATS.at(-1)}`;

/**
 * Why a region file of another region format cannot be served ("" when it is of this one): no
 * option makes it readable, so this is said apart from compareLayout's option mismatches.
 */
export function formatMismatch(found: SuperblockFields): string {
  if (found.magic !== KvLayout.MAGIC || READABLE_FORMATS.includes(found.version)) return '';
  return (
    `holds region format ${found.version}; this kv-server reads region formats ${formatList} only ` +
    '(there is no converter): serve it with the release that wrote it, or start on a new file and load the data again'
  );
}

/** How an existing region's superblock differs from the planned layout ("" when it does not). */
export function compareLayout(found: SuperblockFields, planned: RegionLayout): string {
  if (found.magic !== KvLayout.MAGIC) return 'no rdma-kv superblock (not a region file)';
  if (!READABLE_FORMATS.includes(found.version)) return `region format ${found.version} (this kv-server reads formats ${formatList})`;
  const fields: Array<[keyof SuperblockFields & keyof RegionLayout, string]> = [
    ['bucketCount', '--buckets'], ['maxClients', '--max-clients'], ['maxValueBytes', '--max-value'], ['accessOffset', '--eviction none or not'],
    ['indexOffset', 'another layout'], ['heapOffset', 'another layout'], ['heapBytes', 'another layout'], ['ringOffset', 'another layout'],
    ['epochOffset', 'another layout'],
  ];
  for (const [field, option] of fields) {
    if (found[field] !== planned[field]) return `${field} ${found[field]} (${option}), not ${planned[field]}`;
  }
  return '';
}
