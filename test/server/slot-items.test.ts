// Repair finds a member's keys of some hash slots from its heap, not its index
// (server/replication/slot-items.ts): an index entry moves between its key's
// two buckets when a PUT displaces it, and a walk of the index could pass an
// entry that moves behind it. Here an entry is moved by hand (a CPU store into
// the index of a server no client writes) to its other bucket: the key is still
// found, once, and findLinked finds its slot where it now is. Dropping a hash
// slot (a member entering sync) seals counters once, never twice. And the
// server's own lock owner is live, so no scan releases a lock the copier holds.
import test from 'ava';

import { KvClient } from '../../client/index.js';
import { hashKey } from '../../native/index.js';
import { IndexWord, ItemHeader, ItemType, KvLayout } from '../../protocol/constants.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { EMPTY_SLOT, slotBlock } from '../../protocol/index-format.js';
import { findLinked, hashSlotMask, keysOfHashSlots } from '../../server/replication/slot-items.js';
import { ClientTable } from '../../server/sessions/clients.js';
import { startServer } from '../helpers/kv.js';

test('keys of the wanted hash slots come from the heap: an entry moved to its other bucket is still found, and findLinked finds it there', async (t) => {
  const server = await startServer('shm');
  t.teardown(() => server.close());
  const kv = await KvClient.connect({ url: server.urls[0]!, timeoutMs: 2000 });
  t.teardown(() => kv.close());
  const keys = Array.from({ length: 200 }, (_, i) => `walk:${i}`);
  for (const key of keys) await kv.put(key, `v-${key}`);
  await kv.incr('walk:counter', 3n);
  await kv.close();
  const { store } = server.regionStores()[0]!;
  const wantedSlots = new Set(keys.slice(0, 50).map((key) => keySlot(Buffer.from(key))));
  wantedSlots.add(keySlot(Buffer.from('walk:counter')));
  const expected = [...keys, 'walk:counter'].filter((key) => wantedSlots.has(keySlot(Buffer.from(key)))).sort();

  // Move one wanted key's entry to the free slot of its other bucket.
  const moved = Buffer.from(keys[0]!);
  const before = findLinked(store, moved)!;
  const { b1, b2 } = hashKey(moved, store.seed, store.index.bucketCount);
  const other = before.bucket === b1 ? b2 : b1;
  t.not(other, before.bucket, 'the key has two buckets');
  const free = Array.from({ length: KvLayout.SLOTS_PER_BUCKET }, (_, i) => i).find((i) => store.index.slot(other, i) === EMPTY_SLOT)!;
  t.not(free, undefined);
  const words = store.index.words;
  Atomics.store(words, other * IndexWord.BUCKET_WORDS + 1 + free, before.slot);
  store.index.clearSlot(before.bucket, before.i);

  const found = await keysOfHashSlots(store, hashSlotMask(wantedSlots));
  t.deepEqual(found.map(({ key }) => key.toString()).sort(), expected, 'every key of the wanted hash slots, once');
  t.is(found.find(({ key }) => key.toString() === 'walk:counter')?.type, ItemType.COUNTER);
  const after = findLinked(store, moved)!;
  t.deepEqual([after.bucket, after.i, after.slot], [other, free, before.slot]);
  t.is(findLinked(store, Buffer.from('walk:absent')), undefined);
});

test('dropping a hash slot seals a counter before it unlinks it, and leaves one already sealed sealed (a second seal would carry into its value and unseal it)', async (t) => {
  const server = await startServer('shm');
  t.teardown(() => server.close());
  const kv = await KvClient.connect({ url: server.urls[0]!, timeoutMs: 2000 });
  t.teardown(() => kv.close());
  await kv.incr('{d}sealed', 5n);
  await kv.incr('{d}open', 7n);
  const { store } = server.regionStores()[0]!;
  const wordAt = (key: string) => store.itemAt(slotBlock(findLinked(store, Buffer.from(key))!.slot)) + ItemHeader.ATOMIC_WORD;
  const sealedAt = wordAt('{d}sealed');
  const openAt = wordAt('{d}open');
  // As a DELETE whose client died after its seal leaves it (no client writes this region now).
  store.bytes.writeBigUInt64LE(store.bytes.readBigUInt64LE(sealedAt) | BigInt(KvLayout.COUNTER_SEAL), sealedAt);
  const sealedWord = store.bytes.readBigUInt64LE(sealedAt);
  t.is(await server.dropHashSlots([keySlot(Buffer.from('{d}x'))]), 2);
  t.is(findLinked(store, Buffer.from('{d}sealed')), undefined);
  t.is(findLinked(store, Buffer.from('{d}open')), undefined);
  t.is(store.bytes.readBigUInt64LE(sealedAt), sealedWord, 'the sealed counter kept its word: still sealed');
  t.is(store.bytes.readBigUInt64LE(openAt) & BigInt(KvLayout.COUNTER_SEAL), BigInt(KvLayout.COUNTER_SEAL), 'the other one was sealed before its unlink');
});

test("the server's own lock owner (removals, repair's copier) is live: the orphan-lock scan and the epoch barrier leave its bucket locks alone", (t) => {
  const table = new ClientTable(4);
  const own = table.serverId();
  const other = table.newId();
  const live = table.liveIds(new Set());
  t.true(live.has(own), 'a lock the copier holds across loopback tasks is not an orphan');
  t.false(live.has(other), 'an id no client or server part holds is');
});
