// The access table's server side (native/kv/access.cc is the clients'):
// clients WRITE 1 into the byte of each item they read; on every reclaim tick
// the server reads up to SCAN_BYTES of the table, turns each set byte into a
// read of that block (item-use.ts: a fresh lru stamp, one more lfu count) and
// clears it with a CPU store, which is allowed because no RDMA atomic ever
// touches the table (clients only WRITE it). A byte set again between the
// read and the clear loses one hint: a CLOCK bit, not a counter.
import type { RegionStore } from '../store/region.js';
import type { ItemUse } from './item-use.js';

/** Table bytes read per tick (the whole table of a 256 MiB heap). */
const SCAN_BYTES = 4 << 20;

export class AccessBits {
  private readonly words: Uint32Array;
  private readonly bytes: Uint8Array;
  private cursor = 0;

  constructor(store: RegionStore, private readonly use: ItemUse) {
    const { accessOffset, heapBytes } = store.layout;
    const units = heapBytes / 64;
    const region = store.bytes;
    this.bytes = new Uint8Array(region.buffer, region.byteOffset + accessOffset, units);
    // Word at a time past the zero words (units is a multiple of 4 for any heap of whole 256 B; the tail by bytes).
    this.words = new Uint32Array(region.buffer, region.byteOffset + accessOffset, Math.floor(units / 4));
  }

  /** Reads (and clears) the next SCAN_BYTES of the table; returns the reads found. */
  scan(): number {
    const { words, bytes, use } = this;
    const now = use.now();
    let found = 0;
    const words0 = this.cursor >> 2;
    const end = Math.min(words.length, words0 + (SCAN_BYTES >> 2));
    for (let w = words0; w < end; w++) {
      if (words[w] === 0) continue;
      for (let b = w * 4; b < w * 4 + 4; b++) {
        if (bytes[b] === 0) continue;
        bytes[b] = 0;
        use.read(b, now);
        found++;
      }
    }
    for (let b = words.length * 4; end === words.length && b < bytes.length; b++) {
      if (bytes[b] === 0) continue;
      bytes[b] = 0;
      use.read(b, now);
      found++;
    }
    this.cursor = end >= words.length ? 0 : end * 4;
    return found;
  }
}
