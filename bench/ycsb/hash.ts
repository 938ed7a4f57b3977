/**
 * YCSB's Utils.fnvhash64: FNV-1a over the 8 little-endian bytes of a Java long, then Math.abs of
 * the signed 64-bit result (so Long.MIN_VALUE stays negative, as in Java).
 *
 * The hot path (key names, scrambled zipfian) must not allocate BigInts, so the 64-bit state is
 * kept as two uint32 halves. FNV's prime is 2^40 + 0x1b3, so h * prime = (h << 40) + h * 0x1b3
 * needs only a 32x9-bit multiply and a shift. `fnvhash64BigInt` is the plain BigInt version for
 * cold paths and cross-checks.
 */

const TWO_POW_32 = 4294967296;
const OFFSET_HI = 0xcbf29ce4;
const OFFSET_LO = 0x84222325;
const PRIME_LOW_BITS = 0x1b3;

/** Result halves of the last `fnvhash64Halves` call (after Java's Math.abs). */
export const lastHash = { hi: 0, lo: 0, /** true only for Long.MIN_VALUE, which Math.abs leaves negative */ negative: false };

/** Hashes a non-negative integer keynum (< 2^53) and leaves |hash| in `lastHash`. */
export function fnvhash64Halves(val: number): void {
  let lo = val >>> 0;
  let hi = Math.floor(val / TWO_POW_32) >>> 0;
  if (val < 0) {
    // two's complement of a negative safe integer
    const mag = -val;
    const mlo = mag >>> 0;
    const mhi = Math.floor(mag / TWO_POW_32) >>> 0;
    lo = (~mlo + 1) >>> 0;
    hi = (~mhi + (lo === 0 ? 1 : 0)) >>> 0;
  }
  let hhi = OFFSET_HI;
  let hlo = OFFSET_LO;
  for (let i = 0; i < 8; i++) {
    const octet = i < 4 ? (lo >>> (8 * i)) & 0xff : (hi >>> (8 * (i - 4))) & 0xff;
    hlo = (hlo ^ octet) >>> 0;
    const t = hlo * PRIME_LOW_BITS; // < 2^41, exact
    const carry = Math.floor(t / TWO_POW_32);
    hhi = (Math.imul(hhi, PRIME_LOW_BITS) + carry + (hlo << 8)) >>> 0;
    hlo = t >>> 0;
  }
  if (hhi >= 0x80000000) {
    // Java Math.abs: negate the two's complement value
    hlo = (~hlo + 1) >>> 0;
    hhi = (~hhi + (hlo === 0 ? 1 : 0)) >>> 0;
  }
  lastHash.hi = hhi;
  lastHash.lo = hlo;
  lastHash.negative = hhi >= 0x80000000; // only Long.MIN_VALUE survives negation with the sign bit
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
  // (hi * 2^32 + lo) mod m in steps that stay below 2^53
  let x = lastHash.hi % modulus;
  x = (x * 65536) % modulus;
  x = (x * 65536) % modulus;
  return (x + lastHash.lo) % modulus;
}

/** Java's String.hashCode(): s[0]*31^(n-1) + ... + s[n-1], in 32-bit arithmetic. */
export function javaStringHashCode(s: string): number {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (Math.imul(h, 31) + s.charCodeAt(i)) | 0;
  return h;
}
