/**
 * A record read back, field name -> value: what YCSB's bindings fill into a
 * HashMap<String, ByteIterator>. A binding sets a value as text (set) or as the
 * range of a buffer it read (setBytes), which is decoded only when someone asks
 * for it, as YCSB's ByteIterator is read only by a caller that wants the bytes.
 * So a read whose values are not checked (dataintegrity off, the default) makes
 * no string per field, and the lane keeps one result for all its reads, emptied
 * by clear().
 *
 * Not a Map: a Map emptied with clear() keeps its old table pointing to its
 * successor (for live iterators), so a long-lived map cleared per read kept
 * every read's table and strings alive through the scavenges (docs/benchmarks.md,
 * "What survived the scavenges"). Here clear() resets a count; the arrays keep
 * their storage (emptying a V8 array gives it back, and refilling it allocates).
 */
const NO_BYTES = Buffer.alloc(0);
/** recordBuffer()'s first size: YCSB's default record (ten fields of 100 B) fits, with room. */
const MIN_RECORD_BUFFER = 4096;

export class ReadResult {
  private count = 0;
  private readonly names: string[] = [];
  /** The value as text, or undefined while it is still bytes (sources/starts/ends). */
  private readonly texts: (string | undefined)[] = [];
  private readonly sources: (Buffer | undefined)[] = [];
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  /** Per field: its bytes are latin1 (every byte one unit: ASCII), else UTF-8. */
  private readonly latin1: boolean[] = [];
  /** recordBuffer()'s bytes. */
  private own: Buffer = NO_BYTES;

  /** The number of fields. */
  get size(): number {
    return this.count;
  }

  /**
   * The result's own buffer, at least `bytes` long (a new one when it is shorter), for a binding that
   * reads a record into it and sets fields as ranges of it (setBytes): kept from read to read, so a
   * read allocates nothing for its bytes. The next read into it changes them: a result is its lane's,
   * read by one operation at a time.
   */
  recordBuffer(bytes: number): Buffer {
    if (this.own.length < bytes || this.own === NO_BYTES) this.own = Buffer.allocUnsafeSlow(Math.max(bytes, 2 * this.own.length, MIN_RECORD_BUFFER));
    return this.own;
  }

  /** Empties the result (for the lane's next read). */
  clear(): void {
    for (let i = 0; i < this.count; i++) this.sources[i] = undefined; // not kept alive by a finished read
    this.count = 0;
  }

  /** Sets a field's value (replacing one of the same name, as HashMap.put). */
  set(name: string, value: string): this {
    const i = this.slotFor(name);
    this.texts[i] = value;
    this.sources[i] = undefined;
    return this;
  }

  /**
   * Sets a field's value to `bytes[start, end)`, decoded at the first get: as latin1 when every
   * byte is ASCII (`latin1` true), else as UTF-8. The caller leaves those bytes unchanged until the
   * result is cleared.
   */
  setBytes(name: string, bytes: Buffer, start: number, end: number, latin1: boolean): this {
    const i = this.slotFor(name);
    this.texts[i] = undefined;
    this.sources[i] = bytes;
    this.starts[i] = start;
    this.ends[i] = end;
    this.latin1[i] = latin1;
    return this;
  }

  has(name: string): boolean {
    return this.indexOf(name) >= 0;
  }

  /** The field's value, or undefined when the result has no such field. */
  get(name: string): string | undefined {
    const i = this.indexOf(name);
    return i < 0 ? undefined : this.valueAt(i);
  }

  /** The i-th field's name (0 <= i < size, in the order they were first set). */
  nameAt(i: number): string {
    return this.names[i]!;
  }

  /** The i-th field's value (decoded now if it was set as bytes). */
  valueAt(i: number): string {
    const text = this.texts[i];
    if (text !== undefined) return text;
    const source = this.sources[i]!;
    const value = source.toString(this.latin1[i] ? 'latin1' : 'utf8', this.starts[i], this.ends[i]);
    this.texts[i] = value;
    return value;
  }

  /** The fields as [name, value] pairs, values decoded (for tests and printing). */
  *[Symbol.iterator](): IterableIterator<[string, string]> {
    for (let i = 0; i < this.count; i++) yield [this.names[i]!, this.valueAt(i)];
  }

  /** A plain object of the fields (for tests and printing). */
  toObject(): { [field: string]: string } {
    const out: { [field: string]: string } = {};
    for (let i = 0; i < this.count; i++) out[this.names[i]!] = this.valueAt(i);
    return out;
  }

  private indexOf(name: string): number {
    for (let i = 0; i < this.count; i++) if (this.names[i] === name) return i;
    return -1;
  }

  private slotFor(name: string): number {
    const at = this.indexOf(name);
    if (at >= 0) return at;
    this.names[this.count] = name;
    return this.count++;
  }
}
