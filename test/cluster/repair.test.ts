// Repair (issue 17; docs/replication-design.md §5): after a failover, hash
// slots short of a replica get one back by copying.
//  - A primary SIGKILLed, keys written and deleted while it is dead, then
//    restarted on its region file: it syncs into the hash slots it lost (its
//    stale items of them dropped first), its old partners' copiers send it
//    every key (bytes with their TTLs, counters), writes during the copy reach
//    it too, and it becomes a replica again. Then its partner is killed: the
//    returned member alone serves every acknowledged value, no key deleted
//    while it was dead comes back, counters count on.
//  - A member that never returns: after --replace-after its hash slots are
//    copied to a member that holds others; the last original replica is then
//    killed and nothing acknowledged is lost, and a lock's next token is above
//    every one granted before.
//  - The controller alone (no kv-server): after its own failover write, which
//    wakes no watch, it looks again and gives short hash slots members to
//    sync into after --replace-after, with no other event.
//  - The pure functions: withSyncing (zones first, then the emptiest member,
//    ranges kept whole, at most --replicas per hash slot), withSynced (only a
//    copy reported at the hash slot's current epoch counts), withoutReplicas
//    (a dead syncing member leaves).
import ava, { type ExecutionContext } from 'ava';
import { pino } from 'pino';

import { KvClient, KvError } from '../../client/index.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type SlotRange, etcdKeys } from '../../protocol/registry.js';
import { readConfig, writeConfig } from '../../server/replication/config-store.js';
import { ReplicationController } from '../../server/replication/controller.js';
import { nextConfig, slotReplicaNames, withSynced, withSyncing, withoutReplicas } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { type Member, eventually, nextStatus, restartMember, stats } from './helpers.js';
import { REPLICAS_ON, incrAlone, readAlone, replicatedMembers } from './replicated-helpers.js';

const etcdTest = needing(ava, 'etcd');
const etcd = etcdForFile(etcdTest);

const config = (prefix: string): Promise<ClusterConfig | undefined> => readConfig(etcd.client, prefix);

/** Every hash slot has `replicas` replicas and nothing is syncing. */
const repaired = (c: ClusterConfig | undefined): boolean => c !== undefined && c.slots.every((r) => r.replicas.length === c.replicas && r.syncing.length === 0);

const member = (list: Member[], name: string): Member => list[Number(name.slice(1))]!;

etcdTest.serial('a primary killed, written around and restarted on its region file syncs back in, is copied every key, and alone then serves every acknowledged value', async (t) => {
  const prefix = '/test-repair-return';
  const { members: list } = await replicatedMembers(t, etcd, prefix, 2, 3);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const placed = (await config(prefix))!;
  const replicasOf = (key: string) => slotReplicaNames(placed).names[keySlot(Buffer.from(key))]!;
  const victim = replicasOf('r:0')[0]!;
  const keys = Array.from({ length: 300 }, (_, i) => `r:${i}`);
  const mine = keys.filter((key) => replicasOf(key).includes(victim));
  t.true(mine.length > 50, `${mine.length} keys on ${victim}`);
  const expected = new Map<string, string | undefined>();
  for (const key of keys) {
    await kv.put(key, `before-${key}`);
    expected.set(key, `before-${key}`);
  }
  await kv.put('r:ttl', 'expiring', { ttlMs: 600_000 });
  await incrAlone(kv, 'r:counter', 40n);

  await member(list, victim).process.stop('SIGKILL');
  await eventually(async () => !(await config(prefix))!.slots.some((r) => r.replicas.includes(placed.members.indexOf(victim))), `${victim} failed over`);
  // While it is dead: overwrite some of its keys, delete others (its region still holds them).
  for (const [i, key] of mine.entries()) {
    if (i % 3 === 0) {
      await kv.put(key, `dead-${key}`);
      expected.set(key, `dead-${key}`);
    } else if (i % 3 === 1) {
      t.true(await kv.delete(key));
      expected.set(key, undefined);
    }
  }
  await incrAlone(kv, 'r:counter', 2n, 40n);

  await restartMember(member(list, victim), REPLICAS_ON);
  // Writes while it syncs and is copied: they reach it too.
  const writing = (async () => {
    for (let round = 0; !repaired(await config(prefix)); round++) {
      const key = mine[(round * 7) % mine.length]!;
      await kv.put(key, `during-${round}`);
      expected.set(key, `during-${round}`);
      // An INCR answered after its replica's read lease (a renewal refused while this client's config lags the
      // replica's, as configs change during repair), or whose add met its hash slot's epoch word closed by a
      // barrier, fails as one that may have added (KV_TIMEOUT): the read below counts it.
      await kv.incr('r:counter', 1n).catch((error: unknown) => {
        if (!(error instanceof KvError && (error.code === 'KV_READ_LEASE_LAPSED' || error.code === 'KV_TIMEOUT'))) throw error;
      });
    }
  })();
  await eventually(async () => repaired(await config(prefix)) && (await config(prefix))!.slots.some((r) => r.replicas.includes(placed.members.indexOf(victim))), `${victim} is a replica again`, slow(30_000));
  await writing;
  // Metrics: the partners count what they copied; every member sees nothing short any more.
  const all = await Promise.all(list.map((m) => stats(m) as Promise<unknown> as Promise<{ repairCopiedItems: number; repairCopiedBytes: number; replication: { shortHashSlots: number; syncingHashSlots: number; failovers: number } }>));
  t.true(all.reduce((n, s) => n + s.repairCopiedItems, 0) >= mine.length / 3, `copied ${all.map((s) => s.repairCopiedItems).join(', ')} items`);
  t.true(all.every((s) => s.replication.shortHashSlots === 0 && s.replication.syncingHashSlots === 0));
  // At least the victim's; under a loaded machine's stalls a 2 s lease can lapse once more (the full shm suite counted
  // 2 once, every other assertion holding): another failover is the system working, not this test's subject.
  const failovers = all.reduce((n, s) => n + s.replication.failovers, 0);
  t.true(failovers >= 1, `the failover was counted by the controller (${failovers})`);
  const counter = await readAlone(() => kv.incr('r:counter', 0n)); // an INCR of 0 changes nothing: run again after a lapse
  t.true(counter >= 42n);

  // Now its partner for the probe key dies: the returned member serves alone.
  const after = (await config(prefix))!;
  const partner = slotReplicaNames(after).names[keySlot(Buffer.from('r:0'))]!.find((name) => name !== victim)!;
  t.true(slotReplicaNames(after).names[keySlot(Buffer.from('r:0'))]!.includes(victim));
  await member(list, partner).process.stop('SIGKILL');
  await eventually(async () => slotReplicaNames((await config(prefix))!).names[keySlot(Buffer.from('r:0'))]!.join() === victim, `${partner} failed over, ${victim} alone holds r:0`);
  const onVictim = slotReplicaNames((await config(prefix))!).names;
  let checked = 0;
  for (const key of mine) {
    if (onVictim[keySlot(Buffer.from(key))]!.join() !== victim) continue;
    checked++;
    t.is((await kv.get(key))?.toString(), expected.get(key), key);
  }
  t.true(checked > 20, `${checked} keys checked on ${victim} alone`);
  if (onVictim[keySlot(Buffer.from('r:counter'))]!.join() === victim) t.is(await kv.incr('r:counter', 0n), counter);
  if (onVictim[keySlot(Buffer.from('r:ttl'))]!.join() === victim) {
    t.is((await kv.get('r:ttl'))?.toString(), 'expiring');
    t.true(Number.isFinite(await kv.ttl('r:ttl')), 'the TTL came with the copy');
  }
});

etcdTest.serial('a member that never returns: after --replace-after its hash slots are copied to a member holding others; nothing is lost when the last original replica dies', async (t) => {
  const prefix = '/test-repair-replace';
  const { members: list } = await replicatedMembers(t, etcd, prefix, 2, 3, 'shm', ['--replace-after', '1s']);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const placed = (await config(prefix))!;
  const keys = Array.from({ length: 200 }, (_, i) => `x:${i}`);
  for (const key of keys) await kv.put(key, `v-${key}`);
  const [victim, other] = slotReplicaNames(placed).names[keySlot(Buffer.from('x:0'))]!;
  // A lock of the same two replicas, taken and released three times: tokens 1 to 3.
  const lockName = Array.from({ length: 2000 }, (_, i) => `x:lock:${i}`).find((name) => slotReplicaNames(placed).names[keySlot(Buffer.from(name))]!.join() === [victim, other].join())!;
  for (let i = 0; i < 3; i++) await (await kv.lock(lockName)).release();
  await member(list, victim!).process.stop('SIGKILL');
  const victimIndex = placed.members.indexOf(victim!);
  await eventually(async () => !(await config(prefix))!.slots.some((r) => r.replicas.includes(victimIndex)), `${victim} failed over`);
  await eventually(async () => repaired(await config(prefix)), 'the hash slots short of a replica were copied to the third member', slow(30_000));
  const fixed = (await config(prefix))!;
  for (const r of slotReplicaNames(fixed).names) if (r.includes(victim!)) t.fail(`${victim} holds ${r}`);
  const records = await etcd.client.getAll().prefix(etcdKeys(prefix).repair).strings();
  t.true(Object.keys(records).length > 0, 'the copiers reported their copies');
  await member(list, other!).process.stop('SIGKILL');
  await eventually(async () => !(await config(prefix))!.slots.some((r) => r.replicas.includes(fixed.members.indexOf(other!))), `${other} failed over`);
  const last = slotReplicaNames((await config(prefix))!).names;
  for (const key of keys) {
    if (last[keySlot(Buffer.from(key))]!.length === 0) continue;
    t.is((await kv.get(key))?.toString(), `v-${key}`, key);
  }
  // The lock was copied above its token: the member now holding it alone grants a larger one (never 1 again).
  const again = await kv.lock(lockName);
  t.true(again.token > 3n, `token ${again.token} after the copy`);
  await again.release();
});

etcdTest.serial('the controller looks again after its own failover write (which wakes no watch): short hash slots get a member to sync into once --replace-after has passed, with no other event', async (t) => {
  const prefix = '/test-repair-controller';
  const keys = etcdKeys(prefix);
  const lease = etcd.client.lease(30, { autoKeepAlive: true });
  const leaseId = await lease.grant();
  t.teardown(() => lease.revoke().catch(() => undefined));
  for (const name of ['m0', 'm1', 'm2']) await etcd.client.put(keys.member(name)).value(JSON.stringify({ name, joined: new Date().toISOString(), replicas: 2 }));
  // m2 has no alive key: it is dead (a member not seen since the controller started, past the TTL given below).
  for (const name of ['m0', 'm1']) await etcd.client.put(keys.aliveKey(name)).value(JSON.stringify({ url: `shm:///nowhere/${name}` })).lease(leaseId);
  const placed = nextConfig(undefined, [{ name: 'm0' }, { name: 'm1' }, { name: 'm2' }], 2)!;
  t.true(await writeConfig(etcd.client, keys, placed, undefined));
  const controller = await ReplicationController.start({ client: etcd.client, prefix, name: 'm0', replicas: 2, leaseId: () => leaseId, ttlMs: 100, replaceAfterMs: 300, logger: pino({ level: 'silent' }) });
  t.teardown(() => controller.close());
  await eventually(async () => (await config(prefix))!.slots.every((r) => !r.replicas.includes(2)), 'm2 was failed over');
  await eventually(async () => (await config(prefix))!.slots.some((r) => r.syncing.length > 0), 'short hash slots got a member syncing into them', 5000);
  const now = (await config(prefix))!;
  for (const r of now.slots) if (r.replicas.length + r.syncing.length !== 2 || r.syncing.includes(2)) t.fail(`range ${r.from}-${r.to}: ${r.replicas} + ${r.syncing}`);
});

// ---- the pure functions ------------------------------------------------------------------

const test = ava;

function ranges(...list: Array<[number, number, number[], number[], number]>): SlotRange[] {
  return list.map(([from, to, replicas, syncing, epoch]) => ({ from, to, replicas, syncing, epoch }));
}

test('withSyncing gives a short hash slot a member of another zone first, then the emptiest; ranges stay whole; at most --replicas', (t) => {
  const config: ClusterConfig = { epoch: 7, replicas: 2, members: ['a', 'b', 'c'], slots: ranges([0, 99, [0], [], 7], [100, 8000, [1, 2], [], 5], [8001, SLOT_COUNT - 1, [2], [], 6]) };
  const next = withSyncing(config, [{ name: 'b', zone: 'east' }, { name: 'c', zone: 'west' }, { name: 'e', zone: 'west' }, { name: 'd', zone: 'west' }])!;
  t.is(next.epoch, 8);
  t.deepEqual(next.members, ['a', 'b', 'c', 'd'], 'd, new and chosen, joins the list; e, not chosen, does not');
  const at = (slot: number) => next.slots.find((r) => r.from <= slot && slot <= r.to)!;
  // 0-99 (a, zone unknown): d and e hold nothing; d comes first by name.
  t.deepEqual(at(0), { from: 0, to: 99, replicas: [0], syncing: [3], epoch: 8 });
  t.deepEqual(at(5000), { from: 100, to: 8000, replicas: [1, 2], syncing: [], epoch: 5 }, 'a full hash slot is left alone');
  // 8001-: c is west; b (east) is the only other zone.
  t.deepEqual(at(9000), { from: 8001, to: SLOT_COUNT - 1, replicas: [2], syncing: [1], epoch: 8 });
  t.is(withSyncing(next, [{ name: 'e' }]), undefined, 'nothing short any more');
  t.is(withSyncing(config, []), undefined, 'no candidate');
});

test('withSynced promotes a target only where its copy was reported at the hash slot\'s current epoch; withoutReplicas drops a dead syncing member', (t) => {
  const config: ClusterConfig = { epoch: 9, replicas: 2, members: ['a', 'b', 'c'], slots: ranges([0, 99, [0], [2], 9], [100, 199, [1], [2], 8], [200, SLOT_COUNT - 1, [0, 1], [], 3]) };
  t.is(withSynced(config, new Map([['c', [{ from: 0, to: 99, epoch: 8 }]]])), undefined, 'a copy at an older epoch counts for nothing');
  const next = withSynced(config, new Map([['c', [{ from: 0, to: 150, epoch: 9 }, { from: 100, to: 199, epoch: 8 }]]]))!;
  t.is(next.epoch, 10);
  t.deepEqual(next.slots.find((r) => r.from === 0), { from: 0, to: 99, replicas: [0, 2], syncing: [], epoch: 10 });
  t.deepEqual(next.slots.find((r) => r.from === 100), { from: 100, to: 199, replicas: [1, 2], syncing: [], epoch: 10 });
  t.is(withSynced(config, new Map([['nobody', [{ from: 0, to: SLOT_COUNT - 1, epoch: 9 }]]])), undefined);
  // Two targets of one range (--replicas 3) done at the same epoch: both become replicas in one step.
  const three: ClusterConfig = { epoch: 4, replicas: 3, members: ['a', 'b', 'c'], slots: ranges([0, SLOT_COUNT - 1, [0], [1, 2], 4]) };
  t.deepEqual(withSynced(three, new Map([['b', [{ from: 0, to: SLOT_COUNT - 1, epoch: 4 }]], ['c', [{ from: 0, to: SLOT_COUNT - 1, epoch: 4 }]]]))!.slots, ranges([0, SLOT_COUNT - 1, [0, 1, 2], [], 5]));
  const failed = withoutReplicas(config, new Set(['c']))!;
  t.is(failed.epoch, 10);
  t.deepEqual(failed.slots.find((r) => r.from === 0), { from: 0, to: 99, replicas: [0], syncing: [], epoch: 10 });
  t.deepEqual(failed.slots.find((r) => r.to === 199), { from: 100, to: 199, replicas: [1], syncing: [], epoch: 10 });
});
