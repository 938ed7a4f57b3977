// The item checksum (native/kv/crc32c.cc, layout.h's item_checksum): CRC32C
// by its standard check value, the SSE4.2 and software paths bit for bit on
// inputs of every length that matters to the loops, and what an item's
// checksum covers and leaves out.
import { randomBytes } from 'node:crypto';

import test from 'ava';
import fc from 'fast-check';

import { crc32c, crc32cHardware, itemChecksum, nativeBuildItem } from '../../native/index.js';
import { ItemHeader, ItemType, KvLayout } from '../../protocol/constants.js';
import { readItemHeader } from '../../protocol/index-format.js';

test('CRC32C known answers: "123456789" is 0xe3069283, on both paths', (t) => {
  const paths = crc32cHardware ? (['auto', 'software', 'hardware'] as const) : (['auto', 'software'] as const);
  for (const path of paths) {
    t.is(crc32c(Buffer.from('123456789'), path), 0xe3069283, path);
    t.is(crc32c(Buffer.alloc(0), path), 0, path);
    // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xff, ascending, descending.
    t.is(crc32c(Buffer.alloc(32, 0), path), 0x8a9136aa, path);
    t.is(crc32c(Buffer.alloc(32, 0xff), path), 0x62a8ab43, path);
    t.is(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => i)), path), 0x46dd794e, path);
    t.is(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => 31 - i)), path), 0x113fdb5c, path);
  }
});

test('CRC32C: the hardware path equals the software path on random inputs of many lengths and alignments', (t) => {
  if (!crc32cHardware) {
    t.pass('this CPU has no CRC32C instruction: the software path is the only one');
    return;
  }
  // Around the lane sizes of crc32c.cc's three-lane loop (3 x 240 and 3 x 4096 bytes) too.
  const lanes = [719, 720, 721, 727, 728, 1439, 1440, 1441, 12287, 12288, 12289, 12295, 24576, 24583];
  const lengths = [...Array.from({ length: 300 }, (_, i) => i), ...lanes, 1023, 1024, 1025, 1048, 1096, 4095, 4096, 4097, 65536, 65536 + 7, 1 << 20];
  const pool = randomBytes((1 << 20) + 64);
  for (const length of lengths) {
    for (const shift of [0, 1, 3, 7]) {
      const bytes = pool.subarray(shift, shift + length);
      const seed = pool.readUInt32LE(length % 60);
      t.is(crc32c(bytes, 'hardware', seed), crc32c(bytes, 'software', seed), `length ${length}, offset ${shift}`);
    }
  }
});

test('CRC32C continues: the CRC of a then b is the CRC of a || b', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 300 }), fc.uint8Array({ maxLength: 300 }), (a, b) => {
      const whole = crc32c(Buffer.concat([a, b]));
      t.is(crc32c(Buffer.from(b), 'software', crc32c(Buffer.from(a), 'software')), whole);
      t.is(crc32c(Buffer.from(b), 'auto', crc32c(Buffer.from(a), 'auto')), whole);
    }),
    { numRuns: 500 },
  );
});

test('an item\'s checksum is the CRC32C of its header (checksum, atomic word, state as 0), key and value', (t) => {
  const key = Buffer.from('the key');
  const value = randomBytes(1000);
  const item = nativeBuildItem(ItemType.BYTES, key, value, 0x0123_4567_89ab_cdefn);
  const header = Buffer.from(item.subarray(0, KvLayout.ITEM_HEADER_BYTES));
  header.writeUInt32LE(0, ItemHeader.CHECKSUM);
  header.fill(0, ItemHeader.ATOMIC_WORD, ItemHeader.ATOMIC_WORD + 8);
  header.fill(0, ItemHeader.STATE, ItemHeader.STATE + 8);
  const expected = crc32c(Buffer.concat([header, key, value]), 'software');
  t.is(readItemHeader(item, 0).checksum, expected);
  t.is(itemChecksum(item), expected);
});

test('an item\'s checksum leaves out the atomic word and the state, and covers every other header byte, the key and the value', (t) => {
  const item = nativeBuildItem(ItemType.COUNTER, Buffer.from('counter'), Buffer.from('vv'), 77n);
  const sum = itemChecksum(item);
  const changed = (at: number): boolean => {
    const copy = Buffer.from(item);
    copy[at]! ^= 0x10;
    return itemChecksum(copy) !== sum;
  };
  for (let at = 0; at < item.length; at++) {
    const ignored =
      (at >= ItemHeader.CHECKSUM && at < ItemHeader.CHECKSUM + 4) ||
      (at >= ItemHeader.ATOMIC_WORD && at < ItemHeader.ATOMIC_WORD + 8) ||
      (at >= ItemHeader.STATE && at < ItemHeader.STATE + 8);
    if (at >= ItemHeader.KEY_LEN && at < ItemHeader.VERSION) continue; // lengths: below (a longer one runs past the item)
    t.is(changed(at), !ignored, `byte ${at}`);
  }
  const shorter = Buffer.from(item);
  shorter.writeUInt32LE(1, ItemHeader.VALUE_LEN);
  t.not(itemChecksum(shorter), sum, 'a shorter value length');
  shorter.writeUInt32LE(2, ItemHeader.VALUE_LEN);
  shorter.writeUInt16LE(6, ItemHeader.KEY_LEN);
  t.not(itemChecksum(shorter), sum, 'a shorter key length');
});
