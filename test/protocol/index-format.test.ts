// protocol/index-format.ts against native/kv/layout.h: the TypeScript codec of
// the index words must build and read exactly the words the C++ client core does.
import test from 'ava';
import fc from 'fast-check';

import { nativeBuildItem, nativeIndexWords } from '../../native/index.js';
import { IndexWord, ItemHeader, ItemState, ItemType, KvLayout } from '../../protocol/constants.js';
import { classFor, itemUnits, sizeClasses } from '../../protocol/size-classes.js';
import {
  IndexView,
  counterValue,
  itemSealed,
  lockOwner,
  lockVersion,
  itemStateOffset,
  lockWord,
  packSlot,
  readItemHeader,
  releaseAddend,
  releasedBucketWord,
  slotBlock,
  slotFingerprint,
  slotLengthUnits,
  slotUnits,
} from '../../protocol/index-format.js';

const u32 = fc.integer({ min: 0, max: 0xffffffff });

test('the slot length field: exact 64 B units up to 32,767 of them (2 MiB - 64 B), then 4 KiB granules up to 128 MiB - 4 KiB', (t) => {
  const fine = IndexWord.SLOT_FINE_MAX_UNITS;
  const cases: [units: number, decoded: number][] = [
    [1, 1],
    [fine - 1, fine - 1],
    [fine, fine], // 2 MiB - 64 B: the last exact length
    [fine + 1, 32768], // 2 MiB: the first coarse one, 512 granules
    [32769, 32832], // 2 MiB + 64 B rounds up to 2 MiB + 4 KiB
    [32832, 32832],
    [1 << 20, 1 << 20], // 64 MiB
    [(1 << 20) + 1, (1 << 20) + 64],
    [IndexWord.SLOT_MAX_UNITS, IndexWord.SLOT_MAX_UNITS],
  ];
  for (const [units, decoded] of cases) {
    const slot = packSlot(7, units, 5);
    t.is(slotUnits(slot), decoded, `${units} units`);
    t.is(slotLengthUnits(units), decoded);
    t.is(nativeIndexWords(7, units, 5, 0, 0, 0n)[5], decoded, `native, ${units} units`);
    t.is(slotBlock(slot), 5);
    t.is(slotFingerprint(slot), 7);
  }
  // The largest value an operator may configure still fits, with the longest key.
  t.true(itemUnits(KvLayout.MAX_KEY_BYTES, KvLayout.MAX_VALUE_LIMIT) <= IndexWord.SLOT_MAX_UNITS);
});

test("size classes past the fine range are whole granules, so a slot's rounded length stays inside the block", (t) => {
  const max = itemUnits(KvLayout.MAX_KEY_BYTES, 64 << 20);
  const classes = sizeClasses(max);
  t.true(classes[classes.length - 1]! >= slotLengthUnits(max));
  for (const c of classes) if (c > IndexWord.SLOT_FINE_MAX_UNITS) t.is(c % IndexWord.SLOT_COARSE_UNITS, 0);
  fc.assert(
    fc.property(fc.integer({ min: 1, max }), (units) => {
      const cls = classFor(classes, units);
      t.true(cls >= 0 && classes[cls]! >= slotLengthUnits(units));
      t.is(classFor(classes, slotLengthUnits(units)), cls); // the server's class of a slot is the client's of its item
    }),
    { numRuns: 2000 },
  );
});

test('slots, lock words, release addends and counter words are the native ones', (t) => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 0xffff }),
      fc.oneof(fc.integer({ min: 0, max: 0xffff }), fc.integer({ min: 0, max: IndexWord.SLOT_MAX_UNITS })),
      u32,
      u32,
      u32,
      fc.bigInt({ min: 0n, max: (1n << 63n) - 1n }),
      (fp, units, block, version, owner, counter) => {
        const [slot, word, addend, counterWord, nativeFp, nativeUnits, nativeBlock] = nativeIndexWords(fp, units, block, version, owner, counter);
        t.is(packSlot(fp, units, block), slot);
        t.deepEqual([slotFingerprint(slot), slotUnits(slot), slotBlock(slot)], [nativeFp, nativeUnits, nativeBlock]);
        t.deepEqual([slotFingerprint(slot), slotUnits(slot), slotBlock(slot)], [fp, slotLengthUnits(units), block]);
        // Exact in the fine range; above, rounded up to the next 4 KiB granule, never down.
        const decoded = slotUnits(slot);
        if (units <= IndexWord.SLOT_FINE_MAX_UNITS) t.is(decoded, units);
        else t.true(decoded >= units && decoded - units < IndexWord.SLOT_COARSE_UNITS && decoded % IndexWord.SLOT_COARSE_UNITS === 0);
        t.is(lockWord(version, owner), word);
        t.deepEqual([lockVersion(word), lockOwner(word)], [version, owner]);
        t.is(releaseAddend(owner), addend);
        t.is(counterValue(counterWord), counter);
      },
    ),
    { numRuns: 2000 },
  );
});

test('a release addend clears the owner and bumps the version, as the CAS release does', (t) => {
  fc.assert(
    fc.property(u32, fc.integer({ min: 1, max: 0xffffffff }), (version, owner) => {
      const word = lockWord(version, owner);
      const released = (word + releaseAddend(owner)) & ((1n << 64n) - 1n);
      t.is(released, releasedBucketWord(word));
      t.is(lockOwner(released), 0);
      t.is(lockVersion(released), (version + 1) >>> 0);
    }),
  );
});

test('IndexView reads buckets where the layout puts them', (t) => {
  const indexOffset = 4096;
  const buckets = 4;
  const region = Buffer.alloc(indexOffset + buckets * KvLayout.BUCKET_BYTES);
  const view = new IndexView(region, indexOffset, buckets);
  region.writeBigUInt64LE(lockWord(7, 42), indexOffset + 2 * KvLayout.BUCKET_BYTES);
  region.writeBigUInt64LE(packSlot(9, 3, 1234), indexOffset + 2 * KvLayout.BUCKET_BYTES + 8 * 3);
  t.is(view.lockHolder(2), 42);
  t.is(view.lockWord(2), lockWord(7, 42));
  t.is(view.lockHolder(1), 0);
  t.is(view.slot(2, 2), packSlot(9, 3, 1234));
  t.is(view.slotOffset(2, 2), indexOffset + 2 * KvLayout.BUCKET_BYTES + 8 * 3);
  t.true(view.pointsTo(2, 1234));
  t.false(view.pointsTo(3, 1234));
  view.clearSlot(2, 2);
  t.false(view.pointsTo(2, 1234));
});

test('a DELETE\'s seal: bit 0 of a counter\'s word, bit 31 of a lock\'s owner, nothing on bytes', (t) => {
  const counter = 42n << 1n;
  t.false(itemSealed(ItemType.COUNTER, counter));
  t.true(itemSealed(ItemType.COUNTER, counter | BigInt(KvLayout.COUNTER_SEAL)));
  const lock = lockWord(9, 7);
  t.false(itemSealed(ItemType.LOCK, lock));
  t.true(itemSealed(ItemType.LOCK, lock | BigInt(KvLayout.LOCK_SEAL)));
  t.false(itemSealed(ItemType.BYTES, (1n << 64n) - 1n));
});

test('the v3 item header: 48 bytes, read by readItemHeader exactly as build_item writes it', (t) => {
  t.is(KvLayout.ITEM_HEADER_BYTES, 48);
  t.deepEqual(
    [ItemHeader.TYPE, ItemHeader.KEY_LEN, ItemHeader.VALUE_LEN, ItemHeader.VERSION, ItemHeader.CHECKSUM, ItemHeader.EPOCH, ItemHeader.ATOMIC_WORD, ItemHeader.EXPIRY, ItemHeader.STATE],
    [0, 2, 4, 8, 16, 20, 24, 32, 40],
  );
  fc.assert(
    fc.property(
      fc.constantFrom(ItemType.BYTES, ItemType.COUNTER, ItemType.LOCK),
      fc.uint8Array({ minLength: 1, maxLength: KvLayout.MAX_KEY_BYTES }),
      fc.uint8Array({ maxLength: 3000 }),
      fc.bigInt({ min: 1n, max: (1n << 64n) - 1n }),
      (type, key, value, version) => {
        const item = nativeBuildItem(type, Buffer.from(key), Buffer.from(value), version);
        t.is(item.length, KvLayout.ITEM_HEADER_BYTES + key.length + value.length);
        const h = readItemHeader(item, 0);
        t.deepEqual(
          { type: h.type, keyLength: h.keyLength, valueLength: h.valueLength, version: h.version, epoch: h.epoch, expiry: h.expiry, state: h.state },
          { type, keyLength: key.length, valueLength: value.length, version, epoch: 0, expiry: 0n, state: version },
        );
        t.is(item.readBigUInt64LE(ItemHeader.ATOMIC_WORD), 0n);
        t.deepEqual(item.subarray(KvLayout.ITEM_HEADER_BYTES, KvLayout.ITEM_HEADER_BYTES + key.length), Buffer.from(key));
      },
    ),
    { numRuns: 300 },
  );
  t.is(itemStateOffset(4096), 4096 + 40);
  t.is(ItemState.SUPERSEDED, 0, 'a live STATE is its item\'s version, never 0: a zeroed word reads as superseded');
});
