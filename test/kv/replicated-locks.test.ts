// Replicated LOCK and UNLOCK in the client core (docs/replication-design.md,
// scheme A; docs/protocol.md, "Replicated locks"): one core, three bare servers
// as one replica set. A LOCK takes the lock word on every backup first, each
// backup's op holding it until the primary's CAS answers; if the primary (or
// another backup) does not grant it, every word taken is put back as it was
// and the group backs off. A backup's token is never below its primary's: one
// that lacks the lock creates it above the primary's token, one behind jumps
// past it. UNLOCK releases every replica in one round; the primary's answer is
// the op's.
import test from 'ava';

import { EpochWord, KvLayout, KvOp, KvStatus } from '../../native/constants.generated.js';
import { hashKey } from '../../native/index.js';
import { ItemType } from '../../protocol/constants.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { lockWord, slotBlock, slotFingerprint } from '../../protocol/index-format.js';
import { providersUnderTest, slow } from '../helpers/providers.js';
import { BACKUPS, EPOCHS, INDEX, type Replica, collect, heapOf, place, run, setup, submit, word } from '../helpers/replicated-core.js';

const ATOMIC_WORD = 24; // ItemHeader.ATOMIC_WORD

/** A lock item holding `[token | owner]` (`sealed`: as a DELETE leaves it before unlinking), placed as place() places bytes. */
function placeLock(r: Replica, key: string, token: number, owner: number, block: number, sealed = false): void {
  place(r, key, '', block, (9n << 40n) | 5n, ItemType.LOCK);
  const word = lockWord(token, owner) | (sealed ? BigInt(KvLayout.LOCK_SEAL) : 0n);
  r.pair.region.bytes.writeBigUInt64LE(word, heapOf(r) + block * KvLayout.UNIT_BYTES + ATOMIC_WORD);
}

/** The key's lock word on a replica as [token, owner], found through its index; undefined: no such item. */
function lockOn(r: Replica, key: string): [number, number] | undefined {
  const k = Buffer.from(key);
  const { b1, b2, fingerprint } = hashKey(k, r.seed, r.buckets);
  const bytes = r.pair.region.bytes;
  for (const bucket of [b1, b2]) {
    for (let i = 0; i < 7; i++) {
      const slot = bytes.readBigUInt64LE(INDEX + bucket * 64 + 8 + 8 * i);
      if (slot === 0n || slotFingerprint(slot) !== fingerprint) continue;
      const item = heapOf(r) + slotBlock(slot) * KvLayout.UNIT_BYTES;
      if (!bytes.subarray(item + KvLayout.ITEM_HEADER_BYTES, item + KvLayout.ITEM_HEADER_BYTES + k.length).equals(k)) continue;
      const word = bytes.readBigUInt64LE(item + ATOMIC_WORD);
      return [Number(word >> 32n), Number(word & 0xffffffffn)];
    }
  }
  return undefined;
}

const statuses = (done: { status: number; version?: bigint }[]) => done.map(({ status, version }) => ({ status, version }));

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a replicated LOCK creates the lock held on every replica with one token; UNLOCK frees all three; the next LOCK's token is one more`, async (t) => {
    const { core, replicas } = await setup(t, scheme);
    const first = await run(core, [{ type: KvOp.LOCK, id: 1, key: 'l', block: 100, backups: BACKUPS(200, 300) }]);
    t.deepEqual(statuses(first), [{ status: KvStatus.OK, version: 1n }]);
    // Each replica names this client by its own id there (1, 2 and 3: the core's connections).
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[1, 1], [1, 2], [1, 3]]);
    const contended = await run(core, [{ type: KvOp.LOCK, id: 2, key: 'l', block: 104, backups: BACKUPS(204, 304) }]);
    t.is(contended[0]!.status, KvStatus.LOCK_CONTENDED, 'held (by this client): a second LOCK waits until its deadline');
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[1, 1], [1, 2], [1, 3]], 'and leaves every word as it was');
    t.deepEqual(statuses(await run(core, [{ type: KvOp.UNLOCK, id: 3, key: 'l', token: 1, backups: BACKUPS(0, 0) }])), [{ status: KvStatus.OK, version: 0n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[1, 0], [1, 0], [1, 0]]);
    t.deepEqual(statuses(await run(core, [{ type: KvOp.LOCK, id: 4, key: 'l', block: 108, backups: BACKUPS(208, 308) }])), [{ status: KvStatus.OK, version: 2n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[2, 1], [2, 2], [2, 3]]);
  });

  test(`${scheme}: a primary held by another client: the backups' words are put back exactly; the LOCK lands once the primary is free`, async (t) => {
    const { core, replicas, primary, b1, b2 } = await setup(t, scheme, slow(1500));
    placeLock(primary, 'l', 5, 77, 40);
    placeLock(b1, 'l', 5, 0, 40);
    placeLock(b2, 'l', 5, 0, 40);
    const { done } = submit(core, [{ type: KvOp.LOCK, id: 1, key: 'l', block: 100, backups: BACKUPS(200, 300) }]);
    t.deepEqual(await collect(core, done, 1, 50), [], 'waits while the primary is held');
    placeLock(primary, 'l', 5, 0, 40); // its holder releases it
    t.deepEqual(statuses(await collect(core, done, 1)), [{ status: KvStatus.OK, version: 6n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[6, 1], [6, 2], [6, 3]]);
    // Held for good: LOCK_CONTENDED at the deadline, every backup word as it was.
    placeLock(primary, 'l', 8, 77, 44);
    placeLock(b1, 'l', 7, 0, 44);
    placeLock(b2, 'l', 8, 0, 44);
    t.deepEqual(statuses(await run(core, [{ type: KvOp.LOCK, id: 2, key: 'l', block: 104, backups: BACKUPS(204, 304) }])), [{ status: KvStatus.LOCK_CONTENDED, version: undefined }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[8, 77], [7, 0], [8, 0]]);
  });

  test(`${scheme}: a backup held by another client: the group gives back what it took and backs off; the primary is never taken`, async (t) => {
    const { core, replicas, primary, b1, b2 } = await setup(t, scheme, slow(1500));
    placeLock(primary, 'l', 3, 0, 40);
    placeLock(b1, 'l', 3, 0, 40);
    placeLock(b2, 'l', 3, 77, 40);
    t.deepEqual(statuses(await run(core, [{ type: KvOp.LOCK, id: 1, key: 'l', block: 100, backups: BACKUPS(200, 300) }])), [{ status: KvStatus.LOCK_CONTENDED, version: undefined }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[3, 0], [3, 0], [3, 77]]);
  });

  test(`${scheme}: a backup that lacks the lock creates it above the primary's token, and one behind jumps past it: a backup's token is never below its primary's`, async (t) => {
    const { core, replicas, primary, b2 } = await setup(t, scheme);
    placeLock(primary, 'l', 9, 0, 40);
    placeLock(b2, 'l', 3, 0, 40); // backup 1 lacks it (a member copied before the lock existed)
    t.deepEqual(statuses(await run(core, [{ type: KvOp.LOCK, id: 1, key: 'l', block: 100, backups: BACKUPS(200, 300) }])), [{ status: KvStatus.OK, version: 10n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[10, 1], [10, 2], [10, 3]]);
    // The primary lacks it, a backup has it (its creator died between the two): the backup keeps its lead.
    placeLock(b2, 'm', 20, 0, 48);
    t.deepEqual(statuses(await run(core, [{ type: KvOp.LOCK, id: 2, key: 'm', block: 104, backups: BACKUPS(204, 304) }])), [{ status: KvStatus.OK, version: 1n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'm')), [[1, 1], [1, 2], [21, 3]]);
  });

  test(`${scheme}: UNLOCK releases the primary, then every backup this client holds, whatever its token there; the answer is the primary's; a stale token frees nothing`, async (t) => {
    const { core, replicas, primary, b1, b2 } = await setup(t, scheme);
    placeLock(primary, 'l', 7, 1, 40);
    placeLock(b1, 'l', 9, 2, 40); // held by us with another token (a failure between the CASes of an earlier LOCK)
    placeLock(b2, 'l', 7, 0, 40); // not held there (the server gave it back when it fenced us)
    t.deepEqual(statuses(await run(core, [{ type: KvOp.UNLOCK, id: 1, key: 'l', token: 7, backups: BACKUPS(0, 0) }])), [{ status: KvStatus.OK, version: 0n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[7, 0], [9, 0], [7, 0]]);
    const again = await run(core, [{ type: KvOp.UNLOCK, id: 2, key: 'l', token: 7, backups: BACKUPS(0, 0) }]);
    t.is(again[0]!.status, KvStatus.VERSION_MISMATCH, 'no longer held on the primary');
    // Held on a backup only (the primary fenced this client and released it): the primary answers, the orphan goes.
    placeLock(b2, 'l', 8, 3, 40);
    t.is((await run(core, [{ type: KvOp.UNLOCK, id: 3, key: 'l', token: 7, backups: BACKUPS(0, 0) }]))[0]!.status, KvStatus.VERSION_MISMATCH);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[7, 0], [9, 0], [8, 0]]);
    // A stale token (this client holds 10 now): nothing is released anywhere.
    placeLock(primary, 'l', 10, 1, 40);
    placeLock(b1, 'l', 10, 2, 40);
    t.is((await run(core, [{ type: KvOp.UNLOCK, id: 4, key: 'l', token: 9, backups: BACKUPS(0, 0) }]))[0]!.status, KvStatus.VERSION_MISMATCH);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[10, 1], [10, 2], [8, 0]]);
  });

  test(`${scheme}: a LOCK whose primary's lock was sealed by a DELETE gives back what its backups took and starts over`, async (t) => {
    const { core, replicas, primary, b1, b2 } = await setup(t, scheme);
    placeLock(primary, 'l', 4, 0, 40, true);
    placeLock(b1, 'l', 4, 0, 40);
    placeLock(b2, 'l', 4, 0, 40);
    const { done } = submit(core, [{ type: KvOp.LOCK, id: 1, key: 'l', block: 100, backups: BACKUPS(200, 300) }]);
    t.deepEqual(await collect(core, done, 1, 50), [], 'retries while the primary names a sealed lock');
    t.deepEqual(replicas.slice(1).map((r) => lockOn(r, 'l')), [[4, 0], [4, 0]], 'between attempts the backups are free');
    placeLock(primary, 'l', 4, 0, 40); // here: the DELETE is undone, as if it never came (a live lock again)
    t.deepEqual(statuses(await collect(core, done, 1)), [{ status: KvStatus.OK, version: 5n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[5, 1], [5, 2], [5, 3]]);
  });

  test(`${scheme}: a LOCK READs its hash slot's epoch word after each CAS: at another epoch every word taken is given back and it answers EPOCH_MOVED (nothing held: safe to run again); a closed word makes it wait, and it lands once the word opens`, async (t) => {
    const { core, replicas, primary, b1, b2 } = await setup(t, scheme);
    for (const r of replicas) placeLock(r, 'l', 3, 0, 40);
    const slot = keySlot(Buffer.from('l'));
    const setWord = (r: Replica, value: bigint) => r.pair.region.bytes.writeBigUInt64LE(value, EPOCHS + 8 * slot);
    for (const r of [primary, b1]) setWord(r, word(5, EpochWord.OPEN));
    setWord(b2, word(6, EpochWord.OPEN));
    const moved = await run(core, [{ type: KvOp.LOCK, id: 1, key: 'l', block: 100, epoch: 5, backups: BACKUPS(200, 300) }]);
    t.deepEqual(moved.map(({ status }) => status), [KvStatus.EPOCH_MOVED]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[3, 0], [3, 0], [3, 0]]);
    // The primary alone (a view after a failover), its word at another epoch: its own word given back too.
    setWord(primary, word(7, EpochWord.OPEN));
    t.deepEqual((await run(core, [{ type: KvOp.LOCK, id: 2, key: 'l', epoch: 5 }])).map(({ status }) => status), [KvStatus.EPOCH_MOVED]);
    t.deepEqual(lockOn(primary, 'l'), [3, 0]);
    // A barrier closes the primary's word: the LOCK waits, and lands once it opens.
    setWord(b2, word(5, EpochWord.OPEN));
    setWord(primary, word(5, EpochWord.CLOSED));
    const { done } = submit(core, [{ type: KvOp.LOCK, id: 3, key: 'l', block: 104, epoch: 5, backups: BACKUPS(204, 304) }]);
    t.deepEqual(await collect(core, done, 1, 50), [], 'waits while the word is closed');
    setWord(primary, word(5, EpochWord.OPEN));
    t.deepEqual(statuses(await collect(core, done, 1)), [{ status: KvStatus.OK, version: 4n }]);
    t.deepEqual(replicas.map((r) => lockOn(r, 'l')), [[4, 1], [4, 2], [4, 3]]);
  });
}
