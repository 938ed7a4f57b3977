// What the addon was compiled with, for the tests that hold the TypeScript
// side to it (constants, index words, item headers, CRC32C), and the key hash
// and item checksum of native/kv/layout.h.
import { addon } from './addon.js';

/** The constants as the addon was compiled with them (a test proves they equal `constants`). */
export const nativeConstants = addon.constants;

/**
 * A key's two buckets and its fingerprint, as clients compute them (native/kv/layout.h's
 * hash_key): the server uses it to look up a departed client's items.
 */
export function hashKey(key: Buffer, seed: bigint, bucketCount: number): { b1: number; b2: number; fingerprint: number } {
  const [b1, b2, fingerprint] = addon.hashKey(key, seed, bucketCount);
  return { b1, b2, fingerprint };
}

/**
 * The index words native/kv/layout.h builds, for the test that holds protocol/index-format.ts to
 * them: [slot, lock word, release addend, counter word, slot fingerprint, slot units, slot block].
 * @internal
 */
export function nativeIndexWords(fp: number, units: number, block: number, version: number, owner: number, counter: bigint) {
  return addon.indexWords(fp, units, block, version, owner, counter);
}

/** Which CRC32C implementation: the data path's choice, the portable one, the SSE4.2 one. */
export type Crc32cPath = 'auto' | 'software' | 'hardware';
const CRC_PATHS = { auto: 0, software: 1, hardware: 2 } as const;

/** Whether this CPU has the CRC32C instruction the data path uses (else the software path serves). */
export const crc32cHardware: boolean = addon.crc32cHardware;

/**
 * CRC32C (Castagnoli) of `bytes`, continuing `crc` (0 to start), as native/kv/crc32c.cc computes
 * it; 'hardware' throws ERR_UNSUPPORTED where crc32cHardware is false.
 */
export function crc32c(bytes: Buffer, path: Crc32cPath = 'auto', crc = 0): number {
  return addon.crc32c(bytes, CRC_PATHS[path], crc);
}

/** An item's checksum as readers check it (native/kv/layout.h's item_checksum; lengths from its header). */
export function itemChecksum(item: Buffer): number {
  return addon.itemChecksum(item);
}

/**
 * The item native/kv/layout.h's build_item writes, for the test that holds protocol/index-format.ts's
 * item header to it.
 * @internal
 */
export function nativeBuildItem(type: number, key: Buffer, value: Buffer, version: bigint): Buffer {
  return addon.buildItem(type, key, value, version);
}
