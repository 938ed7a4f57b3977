/**
 * The values of an insert or update, reused from one operation to the next (no per-operation
 * allocation). Like YCSB's RandomByteIterator, random contents are only produced when a binding
 * asks for them, so the no-op basic binding pays nothing for 10 x 100-byte records. A value's
 * bytes are made into one buffer the object owns; a string is made only when a binding asks for
 * one (fieldValue), so a binding that writes bytes (writeValue) allocates nothing.
 */
import type { FieldValues } from '../db/db.js';
import { javaStringHashCode } from '../hash.js';
import type { Random } from '../random.js';

export class LazyFieldValues implements FieldValues {
  size = 0;
  private readonly names: string[] = [];
  private readonly lengths: number[] = [];
  /** where field i's bytes go in `bytes` */
  private readonly offsets: number[] = [];
  /** field i's bytes are made (in `bytes`) */
  private readonly made: boolean[] = [];
  private readonly cache: (string | undefined)[] = [];
  private bytes = Buffer.allocUnsafe(1024);
  /** viewOf's views, by field. */
  private readonly views: (Buffer | undefined)[] = [];
  private used = 0;
  private key = '';

  constructor(private readonly rng: Random, private readonly deterministic: boolean) {}

  /** Starts a new set of values for `key`. */
  reset(key: string): void {
    this.size = 0;
    this.used = 0;
    this.key = key;
  }

  add(name: string, length: number): void {
    const i = this.size++;
    this.names[i] = name;
    this.lengths[i] = length;
    this.offsets[i] = this.used;
    this.made[i] = false;
    this.cache[i] = undefined;
    this.used += length;
    if (this.used > this.bytes.length) {
      // Before any value of this set is made (bindings read values after the set is built),
      // but copy anyway: the buffer only grows, rarely.
      const grown = Buffer.allocUnsafe(Math.max(this.used, 2 * this.bytes.length));
      this.bytes.copy(grown);
      this.bytes = grown;
    }
  }

  fieldName(i: number): string {
    return this.names[i]!;
  }

  fieldValue(i: number): string {
    let v = this.cache[i];
    if (v === undefined) {
      this.make(i);
      const at = this.offsets[i]!;
      v = this.cache[i] ??= this.bytes.toString('latin1', at, at + this.lengths[i]!);
    }
    return v;
  }

  /** -1 when the value is not ASCII (a deterministic value of a non-ASCII field name): use fieldValue. */
  valueLength(i: number): number {
    if (this.deterministic) {
      this.make(i); // draws nothing from the generator: when it is made does not matter
      if (!/^[\x00-\x7f]*$/.test(this.cache[i]!)) return -1;
    }
    return this.lengths[i]!;
  }

  writeValue(i: number, target: Buffer, offset: number): number {
    this.make(i);
    this.viewOf(i).copy(target, offset);
    return this.lengths[i]!;
  }

  /**
   * Field i's bytes as a view of `bytes`, kept while its place stays the same (a run's sets have
   * one layout). Buffer.copy of a whole view copies as it is; of a range it makes a new view of
   * that range first, garbage on every write.
   */
  private viewOf(i: number): Buffer {
    const at = this.offsets[i]!;
    const length = this.lengths[i]!;
    const view = this.views[i];
    if (view !== undefined && view.buffer === this.bytes.buffer && view.byteOffset === this.bytes.byteOffset + at && view.length === length) return view;
    return (this.views[i] = this.bytes.subarray(at, at + length));
  }

  /** Draws field i's value (once per set, in the order fields are first asked for, as YCSB does). */
  private make(i: number): void {
    if (this.made[i]) return;
    this.made[i] = true;
    const at = this.offsets[i]!;
    const length = this.lengths[i]!;
    if (this.deterministic) {
      const v = buildDeterministicValue(this.key, this.names[i]!, length);
      this.cache[i] = v;
      this.bytes.write(v, at, length, 'latin1');
    } else {
      fillRandomPrintable(this.rng, this.bytes, at, length);
    }
  }
}

/**
 * RandomByteIterator's alphabet: each 32-bit random number gives six printable characters with
 * masks 31, 63, 95, 31, 63, 95 over successive bit groups, offset by ' '.
 */
export function randomPrintable(rng: Random, length: number): string {
  const buf = Buffer.allocUnsafe(length);
  fillRandomPrintable(rng, buf, 0, length);
  return buf.toString('latin1');
}

/** randomPrintable's characters written to buf[at, at + length). */
export function fillRandomPrintable(rng: Random, buf: Buffer, at: number, length: number): void {
  for (let base = 0; base < length; base += 6) {
    const bytes = rng.nextInt32();
    const n = Math.min(6, length - base);
    const o = at + base;
    buf[o] = (bytes & 31) + 32;
    if (n > 1) buf[o + 1] = ((bytes >> 5) & 63) + 32;
    if (n > 2) buf[o + 2] = ((bytes >> 10) & 95) + 32;
    if (n > 3) buf[o + 3] = ((bytes >> 15) & 31) + 32;
    if (n > 4) buf[o + 4] = ((bytes >> 20) & 63) + 32;
    if (n > 5) buf[o + 5] = ((bytes >> 25) & 95) + 32;
  }
}

/** CoreWorkload.buildDeterministicValue (dataintegrity=true): key:field:hash:hash... cut to size. */
export function buildDeterministicValue(key: string, fieldKey: string, size: number): string {
  let sb = `${key}:${fieldKey}`;
  while (sb.length < size) {
    sb += ':';
    sb += String(javaStringHashCode(sb)); // YCSB hashes the builder after appending ':'
  }
  return sb.slice(0, size);
}
