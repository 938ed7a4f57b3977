// A map from a unit offset to a u32, in two typed arrays: open addressing with
// linear probing and backward-shift deletion (no tombstones), so get, set and
// delete allocate nothing and a delete never leaves work for later. The heap's
// free extents (heap.ts) and each client's granted blocks (grants.ts) change
// an entry or more per PUT; as Maps, their hashing, growth and rehashing were a
// third of the server's JavaScript per PUT.
//
// Keys are unit offsets below 2^32 - 1 (that value marks an empty slot); a key
// that is not such an integer is never in the table (get answers undefined),
// so untrusted input (a client's `return` message) may be looked up as is.

const EMPTY = 0xffffffff;
const FIRST_CAPACITY = 64;

export class UnitTable {
  private keys = new Uint32Array(FIRST_CAPACITY).fill(EMPTY);
  private values = new Uint32Array(FIRST_CAPACITY);
  private mask = FIRST_CAPACITY - 1;
  /** 32 - log2(capacity): a key's home slot is the top bits of its hash. */
  private shift = 32 - Math.log2(FIRST_CAPACITY);
  size = 0;

  get(key: number): number | undefined {
    if (!isKey(key)) return undefined;
    const i = this.find(key);
    return i < 0 ? undefined : this.values[i]!;
  }

  has(key: number): boolean {
    return isKey(key) && this.find(key) >= 0;
  }

  /** `value` is a u32. */
  set(key: number, value: number): void {
    if (!isKey(key)) throw new RangeError(`unit table key ${key} is not a u32 below 2^32 - 1`);
    if ((this.size + 1) * 2 > this.keys.length) this.grow();
    const { keys, mask } = this;
    let i = this.home(key);
    while (keys[i] !== EMPTY && keys[i] !== key) i = (i + 1) & mask;
    if (keys[i] === EMPTY) {
      keys[i] = key;
      this.size++;
    }
    this.values[i] = value;
  }

  /** True if `key` was in the table. */
  delete(key: number): boolean {
    if (!isKey(key)) return false;
    let hole = this.find(key);
    if (hole < 0) return false;
    const { keys, values, mask } = this;
    // Entries after the hole in its probe run move back into it unless their home is in (hole, j].
    for (let j = (hole + 1) & mask; keys[j] !== EMPTY; j = (j + 1) & mask) {
      const home = this.home(keys[j]!);
      const stays = hole <= j ? hole < home && home <= j : hole < home || home <= j;
      if (stays) continue;
      keys[hole] = keys[j]!;
      values[hole] = values[j]!;
      hole = j;
    }
    keys[hole] = EMPTY;
    this.size--;
    return true;
  }

  clear(): void {
    this.keys = new Uint32Array(FIRST_CAPACITY).fill(EMPTY);
    this.values = new Uint32Array(FIRST_CAPACITY);
    this.mask = FIRST_CAPACITY - 1;
    this.shift = 32 - Math.log2(FIRST_CAPACITY);
    this.size = 0;
  }

  /** The entries as they are now: a copy, so the table may change while the caller goes through them. */
  entries(): Array<[number, number]> {
    const out: Array<[number, number]> = [];
    for (let i = 0; i < this.keys.length; i++) if (this.keys[i] !== EMPTY) out.push([this.keys[i]!, this.values[i]!]);
    return out;
  }

  private home(key: number): number {
    return Math.imul(key, 0x9e3779b1) >>> this.shift;
  }

  private find(key: number): number {
    const { keys, mask } = this;
    for (let i = this.home(key); keys[i] !== EMPTY; i = (i + 1) & mask) if (keys[i] === key) return i;
    return -1;
  }

  private grow(): void {
    const { keys, values } = this;
    this.keys = new Uint32Array(keys.length * 2).fill(EMPTY);
    this.values = new Uint32Array(keys.length * 2);
    this.mask = keys.length * 2 - 1;
    this.shift--;
    this.size = 0;
    for (let i = 0; i < keys.length; i++) if (keys[i] !== EMPTY) this.set(keys[i]!, values[i]!);
  }
}

function isKey(key: number): boolean {
  return key >>> 0 === key && key !== EMPTY;
}
