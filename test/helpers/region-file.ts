// A region file read and damaged with plain file I/O while no server runs on it
// (the restart and recovery suites): where a key's slot and item are, and writes to them.
// slotOfKeyIn and findSlotIn read a live server's region the same way.
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';

import { ItemHeader, KvLayout } from '../../protocol/constants.js';
import { packSlot, slotBlock, slotUnits } from '../../protocol/index-format.js';
import { hashKey } from '../../native/index.js';
import { type RegionLayout, type SuperblockFields, planLayout, readSuperblock, writeSuperblock } from '../../server/store/layout.js';

export interface SlotOfKey {
  /** File offset of the slot word. */
  slotAt: number;
  slot: bigint;
  bucket: number;
  /** File offset of the item the slot points to. */
  itemAt: number;
  units: number;
  block: number;
}

export function superblockOf(file: string): SuperblockFields {
  return readSuperblock(readFileSync(file));
}

/** The slot that holds `key` in the region file `file` (found as a GET would: fingerprint, then the item's key). */
export function slotOfKey(file: string, key: string): SlotOfKey {
  return slotOfKeyIn(readFileSync(file), key);
}

/** slotOfKey in a region's bytes (offsets are region offsets). */
export function slotOfKeyIn(region: Buffer, key: string): SlotOfKey {
  const found = findSlotIn(region, key);
  if (found === undefined) throw new Error(`no slot holds '${key}'`);
  return found;
}

/** The slot that holds `key` in a region's bytes (a live server's `region` too), or undefined: none does. */
export function findSlotIn(region: Buffer, key: string): SlotOfKey | undefined {
  const sb = readSuperblock(region);
  const { b1, b2, fingerprint } = hashKey(Buffer.from(key), sb.seed, sb.bucketCount);
  for (const bucket of [b1, b2]) {
    for (let i = 1; i <= KvLayout.SLOTS_PER_BUCKET; i++) {
      const slotAt = sb.indexOffset + bucket * KvLayout.BUCKET_BYTES + 8 * i;
      const slot = region.readBigUInt64LE(slotAt);
      if (slot === 0n || Number(slot >> 48n) !== fingerprint) continue;
      const block = slotBlock(slot);
      const itemAt = sb.heapOffset + block * KvLayout.UNIT_BYTES;
      const keyLength = region.readUInt16LE(itemAt + ItemHeader.KEY_LEN);
      const keyAt = itemAt + KvLayout.ITEM_HEADER_BYTES;
      if (region.subarray(keyAt, keyAt + keyLength).toString() !== key) continue;
      return { slotAt, slot, bucket, itemAt, units: slotUnits(slot), block };
    }
  }
  return undefined;
}

/** Overwrites bytes of the file at `at`. */
export function writeAt(file: string, at: number, bytes: Buffer): void {
  const fd = openSync(file, 'r+');
  try {
    writeSync(fd, bytes, 0, bytes.length, at);
  } finally {
    closeSync(fd);
  }
}

/**
 * Rewrites `file` as what an earlier release wrote for the same options: an empty region of
 * region format `format` (3 or 4: no epoch table, the index right after the rings) with the
 * given layout's sizes and `seed`. Returns that format's layout.
 */
export function writeEmptyRegionOfFormat(file: string, layout: RegionLayout, seed: bigint, format: number): RegionLayout {
  const old = planLayout({ regionBytes: layout.regionBytes, buckets: layout.bucketCount, maxClients: layout.maxClients, maxValueBytes: layout.maxValueBytes, format });
  const bytes = Buffer.alloc(layout.regionBytes);
  writeSuperblock(bytes, old, seed, 1n, 0n);
  writeAt(file, 0, bytes);
  return old;
}

export function writeU64At(file: string, at: number, value: bigint): void {
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64LE(value);
  writeAt(file, at, bytes);
}

export function readAt(file: string, at: number, length: number): Buffer {
  return readFileSync(file).subarray(at, at + length);
}

/** A slot word: [fingerprint:16 | length:16 | block:32] (protocol/index-format.ts encodes the length). */
export function makeSlot(fingerprint: number, units: number, block: number): bigint {
  return packSlot(fingerprint, units, block);
}
