// Heap size classes: the block sizes (in 64-byte units) the server grants,
// and the class an item of a given key and value length needs. "Class" in
// rdma-kv means this and nothing else.
import { KvLayout } from './constants.js';

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

/** Block sizes in units: 1, 2, 3, … growing by 1.25× (memcached's slab factor) up to maxUnits. */
export function sizeClasses(maxUnits: number): number[] {
  const classes: number[] = [];
  for (let size = 1; ; size = Math.max(size + 1, Math.ceil(size * 1.25))) {
    if (size >= maxUnits) {
      classes.push(maxUnits);
      return classes;
    }
    classes.push(size);
  }
}

export function itemUnits(keyLen: number, valueLen: number): number {
  return Math.ceil((KvLayout.ITEM_HEADER_BYTES + keyLen + valueLen) / KvLayout.UNIT_BYTES);
}
