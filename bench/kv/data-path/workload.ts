/**
 * The data set every store gets: `keys` keys `key:00000000`…, each with a value of
 * `valueBytes` bytes that starts with its index (so a GET's answer is checked cheaply), and one
 * fixed pseudo-random order of keys for every phase and store. Values are made once, up
 * front: a PUT phase writes each key's own value again, so GETs stay checkable, and the
 * phase's own time is not spent making values.
 */
export class Workload {
  readonly names: string[];
  readonly values: Buffer[];
  /** key indexes in a fixed pseudo-random order (xorshift32), a power of two long */
  private readonly order: Uint32Array;
  private readonly mask: number;

  constructor(readonly keys: number, readonly valueBytes: number) {
    this.names = Array.from({ length: keys }, (_, i) => `key:${String(i).padStart(8, '0')}`);
    // One pattern, each value a window of it (at an offset of its own) behind its index.
    const pattern = Buffer.alloc(valueBytes + 97);
    for (let j = 0; j < pattern.length; j++) pattern[j] = 33 + ((j * 31) % 90);
    const all = Buffer.allocUnsafe(keys * valueBytes);
    this.values = new Array<Buffer>(keys);
    for (let i = 0; i < keys; i++) {
      const v = all.subarray(i * valueBytes, (i + 1) * valueBytes);
      pattern.copy(v, 0, i % 97, (i % 97) + valueBytes);
      v.writeUInt32LE(i, 0);
      this.values[i] = v;
    }
    const n = 1 << 20;
    this.order = new Uint32Array(n);
    this.mask = n - 1;
    let x = 2463534242;
    for (let i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      this.order[i] = (x >>> 0) % keys;
    }
  }

  /** The key index at position `at` of the order (any non-negative integer; it wraps). */
  keyAt(at: number): number {
    return this.order[at & this.mask]!;
  }

  /**
   * Whether `value` is key k's: its length and index always, every byte when `full` (a
   * sample of the answers: comparing all of them would cost more than some GETs).
   */
  isValueOf(k: number, value: Buffer | null | undefined, full: boolean): boolean {
    if (!value || value.length !== this.valueBytes || value.readUInt32LE(0) !== k) return false;
    return !full || value.equals(this.values[k]!);
  }
}
