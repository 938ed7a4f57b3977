/**
 * YCSB's Utils.fnvhash64: FNV-1a over the 8 little-endian bytes of a Java long, then Math.abs of
 * the signed 64-bit result (so Long.MIN_VALUE stays negative, as in Java).
 *
 * The hot path (key names, scrambled zipfian) must not allocate BigInts, so the 64-bit state is
 * kept as two 32-bit halves, in int32 arithmetic only (the earlier float division per byte
 * cost as much as the rest of the hash). FNV's prime is 2^40 + 0x1b3, so h * prime =
 * (h << 40) + h * 0x1b3, and the 32x9-bit product lo * 0x1b3 is done in 16-bit limbs to carry
 * into the high half. `fnvhash64BigInt` is the plain BigInt version for cold paths and
 * cross-checks.
 */

const TWO_POW_32 = 4294967296;
const OFFSET_HI = 0xcbf29ce4 | 0;
const OFFSET_LO = 0x84222325 | 0;
const PRIME_LOW_BITS = 0x1b3;

/** Result halves of the last `fnvhash64Halves` call (after Java's Math.abs). */
export const lastHash = { hi: 0, lo: 0, /** true only for Long.MIN_VALUE, which Math.abs leaves negative */ negative: false };

/** Hashes an integer keynum (|val| < 2^53) and leaves |hash| in `lastHash`. */
export function fnvhash64Halves(val: number): void {
  const lo = val >>> 0; // ToUint32 is modulo 2^32, so this is also the low word of a negative value
  const hi = Math.floor(val / TWO_POW_32) | 0; // floor keeps two's complement for negative values
  let hhi = OFFSET_HI;
  let hlo = OFFSET_LO;
  for (let i = 0; i < 8; i++) {
    hlo ^= ((i < 4 ? lo : hi) >>> ((i & 3) << 3)) & 0xff;
    // Math.imul keeps V8 in int32 (a plain `*` of a uint32 goes through doubles); both
    // products are exact: 16 x 9 bits
    const a = Math.imul(hlo & 0xffff, PRIME_LOW_BITS);
    const b = Math.imul(hlo >>> 16, PRIME_LOW_BITS) + (a >>> 16); // < 2^26: bits 16.. of lo * 0x1b3
    hhi = (Math.imul(hhi, PRIME_LOW_BITS) + (b >>> 16) + (hlo << 8)) | 0;
    hlo = (b << 16) | (a & 0xffff);
  }
  if (hhi < 0) {
    // Java Math.abs: negate the two's complement value
    hlo = (~hlo + 1) | 0;
    hhi = (~hhi + (hlo === 0 ? 1 : 0)) | 0;
  }
  lastHash.hi = hhi >>> 0;
  lastHash.lo = hlo >>> 0;
  lastHash.negative = hhi < 0; // only Long.MIN_VALUE survives negation with the sign bit
}

/** Reference implementation with BigInt, exactly as Utils.fnvhash64(long). */
export function fnvhash64BigInt(val: bigint): bigint {
  let v = BigInt.asIntN(64, val);
  let hash = BigInt.asIntN(64, 0xcbf29ce484222325n);
  for (let i = 0; i < 8; i++) {
    const octet = v & 0xffn;
    v = v >> 8n; // arithmetic shift, like Java's >>
    hash = BigInt.asIntN(64, (hash ^ octet) * 1099511628211n);
  }
  return hash < 0n ? BigInt.asIntN(64, -hash) : hash;
}

/** Long.toString(Utils.fnvhash64(val)) without BigInt. */
export function fnvhash64String(val: number): string {
  fnvhash64Halves(val);
  if (lastHash.negative) return fnvhash64BigInt(BigInt(val)).toString();
  return uint64HalvesToDecimal(lastHash.hi, lastHash.lo);
}

/** Decimal text of hi * 2^32 + lo for hi < 2^31, using only exact double arithmetic. */
export function uint64HalvesToDecimal(hi: number, lo: number): string {
  if (hi < 0x200000) return String(hi * TWO_POW_32 + lo); // below 2^53: exact as a double
  const q = Math.floor(hi / 1e6); // < 2148
  const low = (hi - q * 1e6) * TWO_POW_32 + lo; // < 1e6 * 2^32 < 2^53
  const lowHigh = Math.floor(low / 1e6);
  const lowRest = low - lowHigh * 1e6;
  // value = q * 2^32 * 1e6 + low = (q * 2^32 + lowHigh) * 1e6 + lowRest
  const head = q * TWO_POW_32 + lowHigh; // < 2^44
  const tail = String(lowRest);
  return head === 0 ? tail : String(head) + '000000'.slice(tail.length) + tail;
}

/** Java's `Utils.fnvhash64(val) % modulus` (a remainder that keeps the dividend's sign). */
export function fnvhash64Mod(val: number, modulus: number): number {
  fnvhash64Halves(val);
  if (lastHash.negative || modulus >= 137438953472 /* 2^37 */) {
    return Number(fnvhash64BigInt(BigInt(val)) % BigInt(modulus));
  }
  // (hi * 2^32 + lo) mod m with every dividend below 2^53, so each `%` is exact. hi < 2^31.
  const hi = lastHash.hi;
  const lo = lastHash.lo;
  if (modulus <= 2097152 /* 2^21 */) return ((hi % modulus) * TWO_POW_32 + lo) % modulus; // < 2^21 * 2^32
  let x = hi % modulus;
  x = (x * 65536) % modulus; // x < 2^37
  x = (x * 65536) % modulus;
  return (x + lo) % modulus;
}

/** Java's String.hashCode(): s[0]*31^(n-1) + ... + s[n-1], in 32-bit arithmetic. */
export function javaStringHashCode(s: string): number {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (Math.imul(h, 31) + s.charCodeAt(i)) | 0;
  return h;
}
