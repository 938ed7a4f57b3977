// Heap size classes: the block sizes (in 64-byte units) the server grants,
// and the class an item of a given key and value length needs. "Class" in
// rdma-kv means this and nothing else.
import { IndexWord, KvLayout } from './constants.js';

/** The smallest class whose blocks hold `units`, or -1. */
export function classFor(classes: readonly number[], units: number): number {
  let lo = 0;
  let hi = classes.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (classes[mid]! >= units) hi = mid;
    else lo = mid + 1;
  }
  return lo < classes.length ? lo : -1;
}

/**
 * Block sizes in units: 1, 2, 3, … growing by 1.25× (memcached's slab factor) up to maxUnits.
 * Past a slot's fine length range (IndexWord.SLOT_FINE_MAX_UNITS) every class is whole 4 KiB
 * granules, so the rounded length a slot gives a large item never runs past its block.
 */
export function sizeClasses(maxUnits: number): number[] {
  const classes: number[] = [];
  const granule = IndexWord.SLOT_COARSE_UNITS;
  const fit = (units: number): number => (units <= IndexWord.SLOT_FINE_MAX_UNITS ? units : Math.ceil(units / granule) * granule);
  for (let size = 1; ; size = Math.max(size + 1, Math.ceil(size * 1.25))) {
    if (fit(size) >= fit(maxUnits)) {
      classes.push(fit(maxUnits));
      return classes;
    }
    classes.push(fit(size));
  }
}

export function itemUnits(keyLen: number, valueLen: number): number {
  return Math.ceil((KvLayout.ITEM_HEADER_BYTES + keyLen + valueLen) / KvLayout.UNIT_BYTES);
}
