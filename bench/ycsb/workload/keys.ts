/**
 * Record keys as YCSB's CoreWorkload.buildKeyName builds them: "user" + the keynum (hashed with
 * Utils.fnvhash64 unless insertorder=ordered), left-padded with zeros to `zeropadding` digits.
 */
import { fnvhash64String } from '../hash.js';

export function buildKeyName(keynum: number, zeroPadding: number, orderedInserts: boolean): string {
  const value = orderedInserts ? String(keynum) : fnvhash64String(keynum);
  const fill = zeroPadding - value.length;
  return fill > 0 ? 'user' + '0'.repeat(fill) + value : 'user' + value;
}

/**
 * Key names are a pure function of the keynum, so they are cached. The cache is direct-mapped
 * (slot = keynum mod size): constant memory whatever the record count, and under skewed
 * request distributions the hot keys stay resident.
 */
export class KeyNameCache {
  private readonly keynums: Float64Array;
  private readonly names: string[];
  private readonly mask: number;

  constructor(private readonly zeroPadding: number, private readonly orderedInserts: boolean, sizePowerOfTwo = 1 << 16) {
    if ((sizePowerOfTwo & (sizePowerOfTwo - 1)) !== 0) throw new Error('key cache size must be a power of two');
    this.keynums = new Float64Array(sizePowerOfTwo).fill(-1);
    this.names = new Array<string>(sizePowerOfTwo).fill('');
    this.mask = sizePowerOfTwo - 1;
  }

  name(keynum: number): string {
    const slot = (keynum >= 0 && keynum <= 0x7fffffff ? keynum : keynum >>> 0) & this.mask;
    if (this.keynums[slot] === keynum) return this.names[slot]!;
    const name = buildKeyName(keynum, this.zeroPadding, this.orderedInserts);
    this.keynums[slot] = keynum;
    this.names[slot] = name;
    return name;
  }
}
