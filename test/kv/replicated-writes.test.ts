// Replicated writes in the client core (docs/replication-design.md, scheme A):
// one core, three bare servers (a primary and two backups, each region with
// its own bucket count and seed). A PUT, DELETE or CAS naming backups lands
// on every replica with one version, or on none: the primary's images decide
// (a CAS's version, a DELETE's NOT_FOUND); a backup that cannot take the write
// (its epoch moved, its table full, its connection lost) fails the op with
// nothing committed on the primary; a backup whose lock is held makes the
// whole group give its locks back and retry; every lock is given back; the
// answer says which backup blocks went unused. A replicated INCR adds its
// delta on every replica (creating the counter where it is missing), the
// backups first.
import test from 'ava';

import { EpochWord, KvLayout, KvOp, KvStatus } from '../../native/constants.generated.js';
import { hashKey } from '../../native/index.js';
import { ItemType } from '../../protocol/constants.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { packSlot } from '../../protocol/index-format.js';
import type { CoreOp } from '../helpers/core-ops.js';
import { providersUnderTest, slow } from '../helpers/providers.js';
import { BACKUPS, collect, countersOf, EPOCHS, everywhere, HEAP_BYTES, heapOf, INDEX, lockOwners, place, placeCounter, type Replica, run, setup, submit, valueOn, word } from '../helpers/replicated-core.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a replicated PUT lands on the primary and both backups with one version; overwrite and DELETE follow on all three`, async (t) => {
    const { core, replicas } = await setup(t, scheme);
    const put = await run(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v1', block: 100, backups: BACKUPS(200, 300) }]);
    t.is(put[0]!.status, KvStatus.OK);
    t.falsy(put[0]!.blockUnused);
    t.falsy(put[0]!.backupsUnused, 'both backup blocks were published');
    const first = await everywhere(core, 'k');
    t.deepEqual(first, [0, 1, 2].map(() => ({ value: 'v1', version: put[0]!.version! })));
    const again = await run(core, [{ type: KvOp.PUT, id: 2, key: 'k', value: 'v2', block: 104, backups: BACKUPS(204, 304) }]);
    t.deepEqual((await everywhere(core, 'k')).map((e) => e?.value), ['v2', 'v2', 'v2']);
    t.true(again[0]!.version! > put[0]!.version!);
    for (const r of replicas) t.deepEqual(lockOwners(r, 'k'), [0, 0]);
    t.deepEqual(await run(core, [{ type: KvOp.DELETE, id: 3, key: 'k', backups: BACKUPS(0, 0) }]), [{ id: 3, status: KvStatus.OK, version: 0n }]);
    t.deepEqual(await everywhere(core, 'k'), [undefined, undefined, undefined]);
    // A key the primary lacks: NOT_FOUND, whatever a backup holds (the primary decides).
    t.deepEqual((await run(core, [{ type: KvOp.DELETE, id: 4, key: 'k', backups: BACKUPS(0, 0) }]))[0]!.status, KvStatus.NOT_FOUND);
  });

  test(`${scheme}: a replicated CAS is judged on the primary's version; a backup's item is replaced whatever it held (another version, a counter)`, async (t) => {
    const { core, primary, b1, b2 } = await setup(t, scheme);
    place(primary, 'k', 'old', 40, (9n << 40n) | 1n);
    place(b1, 'k', 'stale', 40, (9n << 40n) | 7n);  // a backup ahead by an unacknowledged write
    place(b2, 'k', '', 40, (9n << 40n) | 2n, ItemType.COUNTER);
    const wrong = await run(core, [
      { type: KvOp.CAS, id: 1, key: 'k', value: 'new', block: 100, expectedVersion: (9n << 40n) | 7n, backups: BACKUPS(200, 300) },
    ]);
    t.deepEqual(wrong, [{ id: 1, status: KvStatus.VERSION_MISMATCH, blockUnused: true, backupsUnused: 0b11 }]);
    // Nothing changed (backup 2 holds a counter, which GET does not read as bytes).
    const untouched = await run(core, [0, 1].map((connection) => ({ type: KvOp.GET, id: 10 + connection, key: 'k', connection })));
    t.deepEqual(untouched.map((d) => d.value), ['old', 'stale']);
    const right = await run(core, [
      { type: KvOp.CAS, id: 2, key: 'k', value: 'new', block: 104, expectedVersion: (9n << 40n) | 1n, backups: BACKUPS(204, 304) },
    ]);
    t.is(right[0]!.status, KvStatus.OK);
    t.falsy(right[0]!.backupsUnused);
    t.deepEqual(await everywhere(core, 'k'), [0, 1, 2].map(() => ({ value: 'new', version: right[0]!.version! })));
    // The counter the backup held was sealed before it was unlinked (atomics through a cached address start over).
    const counterWord = b2.pair.region.bytes.readBigUInt64LE(heapOf(b2) + 40 * KvLayout.UNIT_BYTES + 24);
    t.not(counterWord & BigInt(KvLayout.COUNTER_SEAL), 0n);
    for (const r of [primary, b1, b2]) t.deepEqual(lockOwners(r, 'k'), [0, 0]);
  });

  test(`${scheme}: a backup that cannot take the write fails it with nothing committed on the primary: its epoch moved, its table full`, async (t) => {
    const { core, primary, b1, b2 } = await setup(t, scheme);
    t.is((await run(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v1', block: 100, backups: BACKUPS(200, 300) }]))[0]!.status, KvStatus.OK);
    // Backup 2's word says epoch 6; the writer's configuration says 5 (the primary and backup 1 agree).
    const slot = keySlot(Buffer.from('k'));
    for (const r of [primary, b1]) r.pair.region.bytes.writeBigUInt64LE(word(5, EpochWord.OPEN), EPOCHS + 8 * slot);
    b2.pair.region.bytes.writeBigUInt64LE(word(6, EpochWord.OPEN), EPOCHS + 8 * slot);
    const moved = await run(core, [{ type: KvOp.PUT, id: 2, key: 'k', value: 'v2', block: 104, epoch: 5, backups: BACKUPS(204, 304) }]);
    t.deepEqual(moved.map(({ id, status, blockUnused, backupsUnused }) => ({ id, status, blockUnused, backupsUnused })), [
      { id: 2, status: KvStatus.EPOCH_MOVED, blockUnused: true, backupsUnused: 0b11 },
    ]);
    t.deepEqual((await everywhere(core, 'k')).map((e) => e?.value), ['v1', 'v1', 'v1'], 'nothing written anywhere');
    for (const r of [primary, b1, b2]) t.deepEqual(lockOwners(r, 'k'), [0, 0]);
    // Backup 1's table is full where the key goes: both of its buckets full and every entry's other bucket too.
    b2.pair.region.bytes.writeBigUInt64LE(word(5, EpochWord.OPEN), EPOCHS + 8 * slot);
    for (let bucket = 0; bucket < b1.buckets; bucket++) {
      for (let i = 0; i < 7; i++) b1.pair.region.bytes.writeBigUInt64LE(packSlot(1 + ((bucket + i) % 4000), 4, 2000 + i), INDEX + bucket * 64 + 8 + 8 * i);
    }
    const full = await run(core, [{ type: KvOp.PUT, id: 3, key: 'fresh', value: 'f', block: 108, backups: BACKUPS(208, 308) }]);
    t.is(full[0]!.status, KvStatus.TABLE_FULL);
    t.is(await valueOn(core, 'fresh', 0), undefined, 'the primary never committed');
    t.is(await valueOn(core, 'fresh', 2), undefined, 'nor backup 2');
    t.true(full[0]!.blockUnused);
    for (const r of [primary, b2]) t.deepEqual(lockOwners(r, 'fresh'), [0, 0]);
  });

  test(`${scheme}: a backup's held bucket lock makes the whole group give its locks back and retry; it lands once the lock is free, or times out`, async (t) => {
    const { core, primary, b1 } = await setup(t, scheme, slow(1500));
    const { b1: bucket } = hashKey(Buffer.from('k'), b1.seed, b1.buckets);
    const lockAt = INDEX + bucket * 64;
    b1.pair.region.bytes.writeBigUInt64LE(77n, lockAt); // held by client 77
    const { done } = submit(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v1', block: 100, backups: BACKUPS(200, 300) }]);
    t.deepEqual(await collect(core, done, 1, 50), [], 'the write waits');
    t.deepEqual(lockOwners(primary, 'k'), [0, 0], 'the primary holds no lock while it waits');
    // Not on the primary (a GET on backup 1 would wait for its held lock too).
    t.is(await valueOn(core, 'k', 0), undefined);
    b1.pair.region.bytes.writeBigUInt64LE(1n << 32n, lockAt); // released
    const landed = await collect(core, done, 1);
    t.is(landed[0]!.status, KvStatus.OK);
    t.deepEqual((await everywhere(core, 'k')).map((e) => e?.value), ['v1', 'v1', 'v1']);
    // Held for good: the op gives up at its deadline, every block unused, nothing written.
    b1.pair.region.bytes.writeBigUInt64LE(77n, lockAt);
    const stuck = await run(core, [{ type: KvOp.PUT, id: 2, key: 'k', value: 'v2', block: 104, backups: BACKUPS(204, 304) }]);
    t.deepEqual(stuck.map(({ status, blockUnused, backupsUnused }) => ({ status, blockUnused, backupsUnused })), [
      { status: KvStatus.LOCK_CONTENDED, blockUnused: true, backupsUnused: 0b11 },
    ]);
    t.is(await valueOn(core, 'k', 0), 'v1');
    t.is(await valueOn(core, 'k', 2), 'v1');
    t.deepEqual(lockOwners(primary, 'k'), [0, 0]);
  });

  test(`${scheme}: a replicated write takes an op per replica; bad backups are refused with every block unused`, async (t) => {
    const { core } = await setup(t, scheme);
    // 64 ops: 21 writes of three replicas fit, the 22nd stays with the caller.
    const ops: CoreOp[] = Array.from({ length: 22 }, (_, i) => ({
      type: KvOp.PUT, id: i + 1, key: `k${i}`, value: 'v', block: 100 + 4 * i, backups: BACKUPS(100 + 4 * i, 100 + 4 * i),
    }));
    const { taken, done } = submit(core, ops);
    t.is(taken, 21);
    const landed = await collect(core, done, 21);
    t.true(landed.every((d) => d.status === KvStatus.OK));
    t.deepEqual((await everywhere(core, 'k20')).map((e) => e?.value), ['v', 'v', 'v']);
    const refused = await run(core, [
      { type: KvOp.PUT, id: 1, key: 'a', value: 'v', block: 400, backups: [{ connection: 0, block: 400 }] }, // the primary again
      { type: KvOp.PUT, id: 2, key: 'b', value: 'v', block: 404, backups: [{ connection: 1, block: 404 }, { connection: 1, block: 408 }] },
      { type: KvOp.GET, id: 3, key: 'c', block: 412, backups: BACKUPS(412, 412) }, // a read names no backups
      { type: KvOp.PUT, id: 4, key: 'd', value: 'v', block: 416, backups: [{ connection: 5, block: 416 }] }, // no such connection
      { type: KvOp.PUT, id: 5, key: 'e', value: 'v', block: 420, backups: [{ connection: 1, block: (HEAP_BYTES / KvLayout.UNIT_BYTES) - 1 }] },
    ]);
    t.deepEqual(refused.map(({ id, status, backupsUnused }) => ({ id, status, backupsUnused })), [
      { id: 1, status: KvStatus.PROTOCOL, backupsUnused: 0b1 },
      { id: 2, status: KvStatus.PROTOCOL, backupsUnused: 0b11 },
      { id: 3, status: KvStatus.PROTOCOL, backupsUnused: 0b11 },
      { id: 4, status: KvStatus.PROTOCOL, backupsUnused: 0b1 },
      { id: 5, status: KvStatus.PROTOCOL, backupsUnused: 0b1 },
    ]);
    t.deepEqual((await everywhere(core, 'a'))[1], undefined);
  });

  test(`${scheme}: a backup's lost connection fails the write with nothing written on the primary and its locks given back`, async (t) => {
    const { core, primary, b2 } = await setup(t, scheme);
    b2.pair.serverConn.disconnect();
    const lost = await run(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v1', block: 100, backups: BACKUPS(200, 300) }]);
    t.true([KvStatus.DISCONNECTED, KvStatus.RDMA_ERROR].includes(lost[0]!.status as never), JSON.stringify(lost));
    t.true(lost[0]!.blockUnused);
    t.is(await valueOn(core, 'k', 0), undefined);
    t.deepEqual(lockOwners(primary, 'k'), [0, 0]);
  });
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a replicated DELETE whose backup lacks the key keeps that backup's locks until the group commits: a value landing there meanwhile is deleted too`, async (t) => {
    const { core, primary, b1, b2 } = await setup(t, scheme);
    place(primary, 'k', 'v', 40, (9n << 40n) | 1n);
    place(b2, 'k', 'v', 40, (9n << 40n) | 1n);
    // The primary's lock is held: the group retries; backup 1 lacks the key for now.
    const { b1: bucket } = hashKey(Buffer.from('k'), primary.seed, primary.buckets);
    primary.pair.region.bytes.writeBigUInt64LE(77n, INDEX + bucket * 64);
    const { done } = submit(core, [{ type: KvOp.DELETE, id: 1, key: 'k', backups: BACKUPS(0, 0) }]);
    t.deepEqual(await collect(core, done, 1, 50), [], 'the DELETE waits for the primary');
    // Another writer's value lands on backup 1 (as its backup commit would) while the DELETE waits.
    place(b1, 'k', 'v', 40, (9n << 40n) | 1n);
    primary.pair.region.bytes.writeBigUInt64LE(1n << 32n, INDEX + bucket * 64);
    t.is((await collect(core, done, 1))[0]!.status, KvStatus.OK);
    t.deepEqual(await everywhere(core, 'k'), [undefined, undefined, undefined], 'gone from every replica');
    for (const r of [primary, b1, b2]) t.deepEqual(lockOwners(r, 'k'), [0, 0]);
  });

  test(`${scheme}: a replicated INCR creates the counter on every replica, then adds on every replica; the answer is the primary's`, async (t) => {
    const { core } = await setup(t, scheme);
    const first = await run(core, [{ type: KvOp.INCR, id: 1, key: 'c', block: 100, backups: BACKUPS(200, 300), delta: 5n }]);
    t.deepEqual(first.map(({ status, version, blockUnused, backupsUnused }) => ({ status, version, blockUnused, backupsUnused })), [
      { status: KvStatus.OK, version: 5n, blockUnused: undefined, backupsUnused: undefined },
    ]);
    const second = await run(core, [{ type: KvOp.INCR, id: 2, key: 'c', block: 104, backups: BACKUPS(204, 304), delta: 3n }]);
    t.deepEqual(second.map(({ status, version, blockUnused, backupsUnused }) => ({ status, version, blockUnused, backupsUnused })), [
      { status: KvStatus.OK, version: 8n, blockUnused: true, backupsUnused: 0b11 },
    ]);
    t.deepEqual(await countersOf(core, 'c'), [8n, 8n, 8n]);
  });

  test(`${scheme}: a replicated INCR on replicas that differ: a backup ahead (it has the counter, the primary not) stays ahead by the same amount`, async (t) => {
    const { core, b1 } = await setup(t, scheme);
    placeCounter(b1, 'c', 100n, 40);
    const done = await run(core, [{ type: KvOp.INCR, id: 1, key: 'c', block: 100, backups: BACKUPS(200, 300), delta: 1n }]);
    t.is(done[0]!.status, KvStatus.OK);
    t.is(done[0]!.version, 1n, "the primary's value");
    t.deepEqual(await countersOf(core, 'c'), [1n, 101n, 1n]);
  });

  test(`${scheme}: a replicated INCR racing a DELETE that has sealed the backups' counters starts over as a group, and creates the counter afresh on every replica once the DELETE is done`, async (t) => {
    const { core, primary, b1, b2 } = await setup(t, scheme);
    placeCounter(primary, 'c', 10n, 40);
    placeCounter(b1, 'c', 10n, 40, true); // the DELETE has sealed the backups (it commits there first)
    placeCounter(b2, 'c', 10n, 40, true);
    const { done } = submit(core, [{ type: KvOp.INCR, id: 1, key: 'c', block: 100, backups: BACKUPS(200, 300), delta: 2n }]);
    t.deepEqual(await collect(core, done, 1, 50), [], 'the INCR starts over while the backups name sealed counters');
    // The DELETE finishes: unlinked on the backups, then sealed and unlinked on the primary.
    const unlink = (r: Replica) => {
      const { b1: x, b2: y } = hashKey(Buffer.from('c'), r.seed, r.buckets);
      for (const bucket of [x, y]) for (let i = 0; i < 7; i++) r.pair.region.bytes.writeBigUInt64LE(0n, INDEX + bucket * 64 + 8 + 8 * i);
    };
    unlink(b1);
    unlink(b2);
    placeCounter(primary, 'c', 10n, 40, true);
    unlink(primary);
    const landed = await collect(core, done, 1);
    t.deepEqual(landed.map(({ status, version }) => ({ status, version })), [{ status: KvStatus.OK, version: 2n }], 'after the DELETE, as a new counter');
    t.deepEqual(await countersOf(core, 'c'), [2n, 2n, 2n]);
  });

  test(`${scheme}: a replicated INCR whose primary has the counter while a backup lacks it (a DELETE between them) waits until the replicas agree`, async (t) => {
    const { core, primary, b2 } = await setup(t, scheme);
    placeCounter(primary, 'c', 10n, 40);
    placeCounter(b2, 'c', 10n, 40); // backup 1 lacks it: the DELETE has passed it
    const { done } = submit(core, [{ type: KvOp.INCR, id: 1, key: 'c', block: 100, backups: BACKUPS(200, 300), delta: 2n }]);
    t.deepEqual(await collect(core, done, 1, 50), [], 'neither adds on the primary nor creates on backup 1 meanwhile');
    // The DELETE reaches backup 2 and the primary.
    for (const r of [b2, primary]) {
      placeCounter(r, 'c', 10n, 40, true);
      const { b1: x, b2: y } = hashKey(Buffer.from('c'), r.seed, r.buckets);
      for (const bucket of [x, y]) for (let i = 0; i < 7; i++) r.pair.region.bytes.writeBigUInt64LE(0n, INDEX + bucket * 64 + 8 + 8 * i);
    }
    t.deepEqual((await collect(core, done, 1)).map(({ status, version }) => ({ status, version })), [{ status: KvStatus.OK, version: 2n }]);
    t.deepEqual(await countersOf(core, 'c'), [2n, 2n, 2n]);
  });

  test(`${scheme}: a replicated INCR READs its hash slot's epoch word after each add: a backup at another epoch ends it as one that may have taken effect (TIMEOUT) before the primary adds; a primary alone whose word is fenced, likewise`, async (t) => {
    const { core, primary, b1, b2 } = await setup(t, scheme);
    for (const r of [primary, b1, b2]) placeCounter(r, 'c', 10n, 40);
    const slot = keySlot(Buffer.from('c'));
    for (const r of [primary, b1]) r.pair.region.bytes.writeBigUInt64LE(word(5, EpochWord.OPEN), EPOCHS + 8 * slot);
    b2.pair.region.bytes.writeBigUInt64LE(word(6, EpochWord.OPEN), EPOCHS + 8 * slot);
    const moved = await run(core, [{ type: KvOp.INCR, id: 1, key: 'c', block: 100, epoch: 5, backups: BACKUPS(200, 300), delta: 2n }]);
    t.deepEqual(moved.map(({ status }) => status), [KvStatus.TIMEOUT]);
    t.deepEqual(await countersOf(core, 'c'), [10n, 12n, 12n], 'the backups added (backup 2 met the word after its add), the primary did not');
    b2.pair.region.bytes.writeBigUInt64LE(word(5, EpochWord.OPEN), EPOCHS + 8 * slot);
    const agreed = await run(core, [{ type: KvOp.INCR, id: 2, key: 'c', block: 104, epoch: 5, backups: BACKUPS(204, 304), delta: 1n }]);
    t.deepEqual(agreed.map(({ status, version }) => ({ status, version })), [{ status: KvStatus.OK, version: 11n }]);
    // The primary alone (a view after a failover), its member fenced (cut off from etcd): the add landed there.
    primary.pair.region.bytes.writeBigUInt64LE(word(5, EpochWord.FENCED), EPOCHS + 8 * slot);
    const fenced = await run(core, [{ type: KvOp.INCR, id: 3, key: 'c', epoch: 5, delta: 1n }]);
    t.deepEqual(fenced.map(({ status }) => status), [KvStatus.TIMEOUT]);
    t.deepEqual(await countersOf(core, 'c'), [12n, 13n, 13n]);
  });

  test(`${scheme}: a replicated INCR whose add met a seal after another backup had added ends as one that may have taken effect (TIMEOUT), never adding twice`, async (t) => {
    const { core, primary, b1, b2 } = await setup(t, scheme);
    // One backup's counter sealed, the other's live: backup 2 adds, backup 1 meets the seal.
    placeCounter(primary, 'c', 10n, 40);
    placeCounter(b1, 'c', 10n, 40, true);
    placeCounter(b2, 'c', 10n, 40);
    const first = await collect(core, submit(core, [{ type: KvOp.INCR, id: 1, key: 'c', block: 100, backups: BACKUPS(200, 300), delta: 2n }]).done, 1, 50);
    t.deepEqual(first.map(({ status }) => status), [KvStatus.TIMEOUT]);
    // The primary's counter sealed after both backups added (its DELETE came between the rounds).
    placeCounter(b1, 'c', 10n, 40);
    placeCounter(primary, 'c', 10n, 40, true);
    const second = await collect(core, submit(core, [{ type: KvOp.INCR, id: 2, key: 'c', block: 104, backups: BACKUPS(204, 304), delta: 3n }]).done, 1, 50);
    t.deepEqual(second.map(({ status }) => status), [KvStatus.TIMEOUT], 'not found again and added on the primary alone');
    // Backup 2 got each delta once (12, then 15); backup 1 the second once (13).
    const read = async (connection: number) => (await run(core, [{ type: KvOp.INCR, id: 60, key: 'c', connection, block: 950 }]))[0]!.version;
    t.is(await read(2), 15n);
    t.is(await read(1), 13n);
  });
}
