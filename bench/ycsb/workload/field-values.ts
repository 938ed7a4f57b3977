/**
 * The values of an insert or update, reused from one operation to the next (no per-operation
 * allocation). Like YCSB's RandomByteIterator, random contents are only produced when a binding
 * asks for them, so the no-op basic binding pays nothing for 10 x 100-byte records.
 */
import type { FieldValues } from '../db/db.js';
import { javaStringHashCode } from '../hash.js';
import type { Random } from '../random.js';

export class LazyFieldValues implements FieldValues {
  size = 0;
  private readonly names: string[] = [];
  private readonly lengths: number[] = [];
  private readonly cache: (string | undefined)[] = [];
  private key = '';

  constructor(private readonly rng: Random, private readonly deterministic: boolean) {}

  /** Starts a new set of values for `key`. */
  reset(key: string): void {
    this.size = 0;
    this.key = key;
  }

  add(name: string, length: number): void {
    const i = this.size++;
    this.names[i] = name;
    this.lengths[i] = length;
    this.cache[i] = undefined;
  }

  fieldName(i: number): string {
    return this.names[i]!;
  }

  fieldValue(i: number): string {
    let v = this.cache[i];
    if (v === undefined) {
      v = this.deterministic
        ? buildDeterministicValue(this.key, this.names[i]!, this.lengths[i]!)
        : randomPrintable(this.rng, this.lengths[i]!);
      this.cache[i] = v;
    }
    return v;
  }
}

/**
 * RandomByteIterator's alphabet: each 32-bit random number gives six printable characters with
 * masks 31, 63, 95, 31, 63, 95 over successive bit groups, offset by ' '.
 */
export function randomPrintable(rng: Random, length: number): string {
  const buf = Buffer.allocUnsafe(length);
  for (let base = 0; base < length; base += 6) {
    const bytes = rng.nextInt32();
    const n = Math.min(6, length - base);
    buf[base] = (bytes & 31) + 32;
    if (n > 1) buf[base + 1] = ((bytes >> 5) & 63) + 32;
    if (n > 2) buf[base + 2] = ((bytes >> 10) & 95) + 32;
    if (n > 3) buf[base + 3] = ((bytes >> 15) & 31) + 32;
    if (n > 4) buf[base + 4] = ((bytes >> 20) & 63) + 32;
    if (n > 5) buf[base + 5] = ((bytes >> 25) & 95) + 32;
  }
  return buf.toString('latin1');
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
