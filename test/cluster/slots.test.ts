// The slot map: Redis-compatible key slots, and a member assignment that every
// client computes alike and that moves as few slots as possible.
import test from 'ava';

import { SLOT_COUNT, assignSlots, keySlot, slotRanges } from '../../protocol/hash-slots.js';

test('keys hash to the slots Redis Cluster gives them (CRC16-XMODEM mod 16384)', (t) => {
  // CRC16-XMODEM("123456789") is 0x31C3, the algorithm's check value.
  t.is(keySlot(Buffer.from('123456789')), 0x31c3 & 0x3fff);
  // Redis Cluster's documentation: "foo" is in slot 12182, "bar" in 5061.
  t.is(keySlot(Buffer.from('foo')), 12182);
  t.is(keySlot(Buffer.from('bar')), 5061);
  t.is(keySlot(Buffer.alloc(0)), 0);
});

test('keys with the same {hash tag} share a slot; an empty tag is no tag', (t) => {
  const a = keySlot(Buffer.from('{user1000}.following'));
  t.is(keySlot(Buffer.from('{user1000}.followers')), a);
  t.is(a, keySlot(Buffer.from('user1000')));
  t.is(keySlot(Buffer.from('foo{}{bar}')), keySlot(Buffer.from('foo{}{bar}')));
  t.not(keySlot(Buffer.from('foo{}{bar}')), keySlot(Buffer.from('bar')));
});

test('every client builds the same map from the same members, in any order', (t) => {
  const a = assignSlots(['shm:///a.sock', 'shm:///b.sock', 'shm:///c.sock']);
  const b = assignSlots(['shm:///c.sock', 'shm:///a.sock', 'shm:///b.sock', 'shm:///a.sock']);
  t.deepEqual(b.members, a.members);
  t.deepEqual(b.owner, a.owner);
});

test('each of N members owns close to 1/N of the slots', (t) => {
  for (const n of [2, 3, 5, 16]) {
    const { owner } = assignSlots(Array.from({ length: n }, (_, i) => `kv-${i}`));
    const counts = new Array<number>(n).fill(0);
    for (const m of owner) counts[m]!++;
    t.is(counts.reduce((x, y) => x + y), SLOT_COUNT);
    for (const count of counts) {
      const share = (count * n) / SLOT_COUNT;
      t.true(share > 0.9 && share < 1.1, `${n} members: one owns ${count} slots (${share.toFixed(3)} of a fair share)`);
    }
  }
});

test('adding a member moves slots only to it; removing one moves only its slots', (t) => {
  const three = assignSlots(['kv-0', 'kv-1', 'kv-2']);
  const four = assignSlots(['kv-0', 'kv-1', 'kv-2', 'kv-3']);
  let moved = 0;
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const before = three.members[three.owner[slot]!];
    const after = four.members[four.owner[slot]!];
    if (before !== after) {
      t.is(after, 'kv-3', `slot ${slot} moved from ${before} to ${after}`);
      moved++;
    }
  }
  // The new member takes about a quarter, all of it from the others.
  t.true(moved > SLOT_COUNT * 0.2 && moved < SLOT_COUNT * 0.3, `${moved} slots moved`);
});

test('slotRanges compresses a member\'s slots into ranges covering exactly them', (t) => {
  const { owner } = assignSlots(['x', 'y']);
  let covered = 0;
  for (const [first, last] of slotRanges(owner, 0)) {
    t.true(first <= last);
    for (let s = first; s <= last; s++) t.is(owner[s], 0);
    covered += last - first + 1;
  }
  t.is(covered, owner.filter((m) => m === 0).length);
});
