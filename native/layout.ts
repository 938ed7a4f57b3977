// What the addon was compiled with, for the tests that hold the TypeScript
// side to it (constants, index words), and the key hash of native/kv/layout.h.
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
