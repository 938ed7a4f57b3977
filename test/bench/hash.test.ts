import test from 'ava';
import { fnvhash64BigInt, fnvhash64Mod, fnvhash64String, javaStringHashCode, uint64HalvesToDecimal } from '../../bench/ycsb/hash.js';
import { buildKeyName, KeyNameCache } from '../../bench/ycsb/workload/keys.js';

/**
 * FNV-1a 64 written from its definition (offset basis 14695981039346656037, prime
 * 1099511628211), applied to the 8 little-endian bytes of a two's-complement 64-bit value,
 * then Java's Math.abs on the signed result.
 */
function referenceUnsigned(keynum: bigint): bigint {
  const mask = (1n << 64n) - 1n;
  let hash = 14695981039346656037n;
  const bytes = keynum & mask;
  for (let i = 0n; i < 8n; i++) {
    hash ^= (bytes >> (8n * i)) & 0xffn;
    hash = (hash * 1099511628211n) & mask;
  }
  return hash;
}
function referenceJava(keynum: bigint): bigint {
  const unsigned = referenceUnsigned(keynum);
  const signed = unsigned >= 1n << 63n ? unsigned - (1n << 64n) : unsigned;
  if (signed === -(1n << 63n)) return signed; // Math.abs(Long.MIN_VALUE) stays negative
  return signed < 0n ? -signed : signed;
}

const KEYNUMS = [0, 1, 2, 3, 7, 42, 255, 256, 1000, 999_999, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 5, 10_000_000_000, 2 ** 53 - 1];

test('the reference FNV-1a definition hits both signs among the tested keynums', (t) => {
  const negatives = KEYNUMS.filter((k) => referenceUnsigned(BigInt(k)) >= 1n << 63n);
  const positives = KEYNUMS.filter((k) => referenceUnsigned(BigInt(k)) < 1n << 63n);
  t.true(negatives.length >= 3, `negative signed hashes for ${negatives.join(',')}`);
  t.true(positives.length >= 3);
});

test('fnvhash64 matches FNV-1a with Java sign handling, fast and BigInt paths', (t) => {
  for (const k of KEYNUMS) {
    const expected = referenceJava(BigInt(k));
    t.is(fnvhash64BigInt(BigInt(k)), expected, `BigInt path, keynum ${k}`);
    t.is(fnvhash64String(k), expected.toString(), `fast path, keynum ${k}`);
  }
});

test('fnvhash64 of negative longs uses the two-complement bytes', (t) => {
  for (const k of [-1, -2, -1000, -(2 ** 40)]) {
    t.is(fnvhash64String(k), referenceJava(BigInt(k)).toString(), `keynum ${k}`);
  }
});

test('fnvhash64 on many keynums: fast path equals the reference', (t) => {
  for (let k = 0; k < 20000; k += 7) t.is(fnvhash64String(k), referenceJava(BigInt(k)).toString());
});

test('fnvhash64Mod is Java % (sign of the dividend) for moduli around 2^21 and 2^37', (t) => {
  for (const m of [1, 7, 1000, 2 ** 21 - 1, 2 ** 21, 2 ** 21 + 3, 123_456_789, 2 ** 37 - 1, 2 ** 37 + 1, 10_000_000_001]) {
    for (const k of [0, 1, 5, 99, 12345, 65536, 9_999_999_999, 10_000_000_000]) {
      t.is(fnvhash64Mod(k, m), Number(referenceJava(BigInt(k)) % BigInt(m)), `keynum ${k} mod ${m}`);
    }
  }
});

test('fnvhash64Mod equals the reference over scrambled-zipfian ranks (up to 10^10) and record counts', (t) => {
  let x = 12345;
  for (let i = 0; i < 5000; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0; // an LCG: spread, reproducible ranks
    const rank = Math.floor((x / 2 ** 32) * 10_000_000_001);
    for (const m of [1000, 2 ** 21, 10_000_000, 2 ** 31 - 1]) {
      t.is(fnvhash64Mod(rank, m), Number(referenceJava(BigInt(rank)) % BigInt(m)), `rank ${rank} mod ${m}`);
    }
  }
});

test('uint64HalvesToDecimal prints 63-bit values exactly', (t) => {
  for (const [hi, lo] of [[0, 0], [0, 1], [0x1fffff, 0xffffffff], [0x200000, 0], [0x7fffffff, 0xffffffff], [0x12345678, 0x9abcdef0], [1000000, 1]]) {
    t.is(uint64HalvesToDecimal(hi!, lo!), ((BigInt(hi!) << 32n) + BigInt(lo!)).toString());
  }
});

test('buildKeyName: "user" + hashed keynum, zero padded; ordered keys unhashed', (t) => {
  t.is(buildKeyName(0, 1, false), `user${referenceJava(0n)}`);
  t.is(buildKeyName(42, 1, true), 'user42');
  t.is(buildKeyName(42, 6, true), 'user000042');
  const hashed = referenceJava(7n).toString();
  t.is(buildKeyName(7, 25, false), `user${'0'.repeat(25 - hashed.length)}${hashed}`);
  t.is(buildKeyName(7, 3, false), `user${hashed}`); // padding never truncates
});

test('KeyNameCache returns the same names as buildKeyName, including after slot collisions', (t) => {
  const cache = new KeyNameCache(1, false, 16);
  for (const k of [0, 16, 32, 0, 5, 21, 5, 1_000_000_007]) t.is(cache.name(k), buildKeyName(k, 1, false));
});

test('javaStringHashCode matches String.hashCode', (t) => {
  t.is(javaStringHashCode(''), 0);
  t.is(javaStringHashCode('hello'), 99162322);
  t.is(javaStringHashCode('user6284781860667377211'), Number(BigInt.asIntN(32, [...'user6284781860667377211'].reduce((h, c) => h * 31n + BigInt(c.charCodeAt(0)), 0n))));
});
