// kvctl drain (issue 18, replicated clusters; docs/cluster.md "Draining a
// member"), on shm:
//  - per provider (shm on the host, rdma in the Soft-RoCE guest):
//    three kv-servers with --replicas 2 (and on the host 1) under 4 writer and 2 reader processes
//    recording histories: `kvctl drain m0 --wait` moves every hash slot of m0
//    to the others (copies by repair, m0 quiesced, then replaced at a new
//    epoch); m0 then holds none, is stopped, and every key written before is
//    read back with its value, the histories linearizable;
//  - on the host: a client dialing the drained primary directly never reads
//    it once its hash slots moved; kvctl's refusals: an unknown member, a drain leaving fewer live members
//    than --replicas (2, and 1); --cancel;
//  - the pure functions: withSynced never puts more than --replicas replicas
//    in a hash slot (the config's table has no room: a drained member's copy
//    waits), drainReady, withDrained (a leaving primary's backup becomes primary).
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { type AliveRecord, type ClusterConfig, type SlotRange, etcdKeys } from '../../protocol/registry.js';
import { readConfig } from '../../server/replication/config-store.js';
import { drainReady, slotReplicaNames, withDrained, withSynced, withSyncing } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { loadPollMode, providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { clusterDir, eventually, nextStatus, startMember, stats } from './helpers.js';
import { Load, REPLICAS_ON, incrAlone, missingOnReplicas, readAlone, replicatedMembers } from './replicated-helpers.js';

const etcdTest = needing(ava, 'etcd');
const etcd = etcdForFile(etcdTest);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const readAlive = async (prefix: string, name: string): Promise<AliveRecord> => JSON.parse((await etcd.client.get(etcdKeys(prefix).aliveKey(name)).string())!) as AliveRecord;

// Every provider at --replicas 2; on the host --replicas 1 too (the drained member's keys exist nowhere else until copied).
const drains = [...providersUnderTest().map((scheme) => [scheme, 2] as const), ...(providersUnderTest().includes('shm') ? [['shm', 1] as const] : [])];
for (const [scheme, replicas] of drains) {
  etcdTest.serial(`${scheme}: kvctl drain under load (--replicas ${replicas}): every hash slot of the member moves to the others, it holds none and is stopped, nothing written is lost, histories linearizable`, async (t) => {
    const prefix = `/test-drain-load-${scheme}-${replicas}`;
    const { members, placed } = await replicatedMembers(t, etcd, prefix, replicas, 3, scheme);
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs(), pollMode: loadPollMode() });
    t.teardown(() => kv.close());
    await nextStatus(kv, 'ready');
    const keys = Array.from({ length: 300 }, (_, i) => `d:${i}`);
    await kv.putMany(keys.map((key) => [key, `v:${key}`]));
    await incrAlone(kv, 'd:counter', 41n);
    const held = slotReplicaNames(placed).names.filter((names) => names.includes('m0')).length;
    t.true(held > 0);

    const load = new Load(t, etcd, `etcd+${etcd.url}${prefix}`, slow(8000));
    await sleep(slow(1000));
    const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
    const drained = await kvctl([...target, '--json', 'drain', 'm0', '--wait']);
    t.is(drained.code, 0, drained.stderr);
    const result = JSON.parse(drained.stdout) as { member: string; phase: string; slotsHeld: number; moved: number };
    t.like(result, { member: 'm0', phase: 'drained', slotsHeld: 0, moved: held });
    t.regex(drained.stderr, /drain m0: copying, \d+ of \d+ hash slots still held, [\d.]+ MB copied/, 'progress lines');
    await load.check(t, prefix);

    const after = (await readConfig(etcd.client, prefix))!;
    t.true(after.epoch > placed.epoch);
    const names = slotReplicaNames(after);
    t.true(names.names.every((list) => list.length === replicas && !list.includes('m0')), `every hash slot has ${replicas} replicas, none m0`);
    t.true(names.syncing.every((list) => list.length === 0));
    t.deepEqual(await missingOnReplicas(members, after, [...keys, 'd:counter']), [], 'every replica of every key holds it, backups too');
    // The client names the member that serves a key now (the config's primary), not the member list's map.
    const fromM0 = keys.find((key) => slotReplicaNames(placed).names[keySlot(Buffer.from(key))]![0] === 'm0')!;
    await eventually(async () => kv.memberFor(fromM0) === names.names[keySlot(Buffer.from(fromM0))]![0], 'memberFor follows the config', slow(10_000));
    const layout = JSON.parse((await kvctl([...target, '--json', 'layout'])).stdout) as { config: { failedOver: string[]; underReplicated: number } };
    t.deepEqual(layout.config.failedOver, ['m0'], 'layout lists m0 as holding none');
    t.is(layout.config.underReplicated, 0);

    // Drained: a cancel is refused (m0 would grant read leases again before it applied the config without it).
    const cancel = await kvctl([...target, 'drain', 'm0', '--cancel']);
    t.is(cancel.code, 1);
    t.regex(cancel.stderr, /m0 is drained already \(it holds no hash slot\): its drain record goes once it is stopped/);
    // m0 freed what it held once it applied the config without it.
    await eventually(async () => (await stats(members[0]!)).items === 0, 'the drained member freed its items', slow(30_000));
    // m0 is stopped: nothing was only there, and its drain record goes.
    await members[0]!.process.stop('SIGTERM');
    await eventually(async () => (await etcd.client.get(etcdKeys(prefix).drainKey('m0')).string()) === null, 'the stopped member\'s drain record is removed', slow(30_000));
    const reader = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
    t.teardown(() => reader.close());
    const values = await reader.getMany(keys);
    t.deepEqual(values.map(String), keys.map((key) => `v:${key}`));
    t.is(await readAlone(() => reader.incr('d:counter', 0n)), 41n, 'a counter moved with its value');
    await reader.put('d:after', 'x');
    t.is(String(await reader.get('d:after')), 'x');
  });
}

// The rest is the same on any provider: on the host only (the guest runs the case above on rdma).
const onHost = providersUnderTest().includes('shm');

if (onHost) etcdTest.serial('a drained primary grants no read lease before its hash slots move: a client that dials it directly (no config to follow) never reads its value once the new primary took a write', async (t) => {
  const prefix = '/test-drain-lease';
  const { placed } = await replicatedMembers(t, etcd, prefix, 2, 3);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const { names } = slotReplicaNames(placed);
  let key = 'lease:0';
  for (let i = 0; names[keySlot(Buffer.from(key))]![0] !== 'm0'; i++) key = `lease:${i}`;
  await kv.put(key, 'before');
  // A client of m0 alone holds a read lease of m0 and renews it (halfway, every second or so).
  const url = (await readAlive(prefix, 'm0')).url;
  const direct = await KvClient.connect({ servers: [url], timeoutMs: testTimeoutMs() });
  t.teardown(() => direct.close());
  t.is(String(await direct.get(key)), 'before');

  const drain = kvctl(['--etcd', etcd.url, '--etcd-prefix', prefix, 'drain', 'm0', '--wait']);
  // The moment the config gives m0's hash slots away, the new primary takes a write and m0 is read directly.
  await eventually(async () => slotReplicaNames((await readConfig(etcd.client, prefix))!).names[keySlot(Buffer.from(key))]![0] !== 'm0', 'the key\'s hash slot moved', slow(30_000));
  await kv.put(key, 'after');
  const stale = await direct.get(key).then(String, (error: unknown) => (error as { code?: string }).code);
  t.is(stale, 'KV_READ_LEASE_LAPSED', 'm0 is read only under a lease, and it granted none since it quiesced');
  t.is((await drain).code, 0);
  t.is(String(await kv.get(key)), 'after');
});

if (onHost) etcdTest.serial('kvctl drain refuses an unknown member, a drain that leaves fewer live members than --replicas (2, and 1); --cancel takes a drain back', async (t) => {
  const prefix = '/test-drain-refusals';
  await replicatedMembers(t, etcd, prefix, 2, 2, 'shm', ['--replace-after', '1h']);
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  const unknown = await kvctl([...target, 'drain', 'nobody']);
  t.is(unknown.code, 1);
  t.regex(unknown.stderr, /no member 'nobody'/);
  const tooFew = await kvctl([...target, 'drain', 'm1']);
  t.is(tooFew.code, 1);
  t.regex(tooFew.stderr, /draining m1 would leave 1 live member \(m0\) for --replicas 2: start another member first/);
  t.is((await etcd.client.get(etcdKeys(prefix).drainKey('m1')).string()), null, 'nothing written');
  const notDraining = await kvctl([...target, 'drain', 'm1', '--cancel']);
  t.is(notDraining.code, 0);
  t.regex(notDraining.stdout, /m1 was not being drained/);

  const single = '/test-drain-single';
  const dir = clusterDir(t);
  const member = await startMember(dir, 0, ['--etcd', etcd.url, '--etcd-prefix', single, '--etcd-ttl', '2s', '--name', 's0'], undefined, REPLICAS_ON);
  t.teardown(() => member.process.stop('SIGTERM'));
  await eventually(async () => (await readConfig(etcd.client, single)) !== undefined, 'the config is written', slow(10_000));
  const one = await kvctl(['--etcd', etcd.url, '--etcd-prefix', single, 'drain', 's0']);
  t.is(one.code, 1);
  t.regex(one.stderr, /draining s0 would leave 0 live members \(none\) for --replicas 1: start another member first/);
  const usage = await kvctl(['drain', 'x']);
  t.is(usage.code, 2);
  t.regex(usage.stderr, /drain works on an etcd cluster/);
});

/** Ranges from [from, to, replicas, syncing, epoch] tuples. */
function ranges(...list: Array<[number, number, number[], number[], number]>): SlotRange[] {
  return list.map(([from, to, replicas, syncing, epoch]) => ({ from, to, replicas, syncing, epoch }));
}

if (onHost) ava('a drained member counts as holding nothing: its hash slots get members syncing into them; their copies replace it only through withDrained, never as a replica over --replicas', (t) => {
  // a (0) is drained; b (1), c (2) stay.
  const config: ClusterConfig = { epoch: 5, replicas: 2, members: ['a', 'b', 'c'], slots: ranges([0, 99, [0, 1], [], 5], [100, 199, [1, 0], [], 5], [200, SLOT_COUNT - 1, [1, 2], [], 5]) };
  const leaving = new Set(['a']);
  const syncing = withSyncing(config, [{ name: 'b' }, { name: 'c' }], leaving)!;
  const at = (c: ClusterConfig, slot: number) => c.slots.find((r) => r.from <= slot && slot <= r.to)!;
  t.deepEqual(at(syncing, 0), { from: 0, to: 99, replicas: [0, 1], syncing: [2], epoch: 6 });
  t.deepEqual(at(syncing, 150), { from: 100, to: 199, replicas: [1, 0], syncing: [2], epoch: 6 });
  t.deepEqual(at(syncing, 500), { from: 200, to: SLOT_COUNT - 1, replicas: [1, 2], syncing: [], epoch: 5 }, 'a hash slot without a drained member is left alone');
  t.is(withSyncing(syncing, [{ name: 'b' }, { name: 'c' }], leaving), undefined, 'nothing more to sync');

  const half = new Map([['c', [{ from: 0, to: 99, epoch: 6 }]]]);
  const all = new Map([['c', [{ from: 0, to: 199, epoch: 6 }]]]);
  t.is(withSynced(syncing, all, leaving), undefined, 'a copy done does not make a third replica');
  t.false(drainReady(syncing, half, 'a'), 'one range copied of two');
  t.true(drainReady(syncing, all, 'a'));
  t.is(withDrained(syncing, all, new Set()), undefined, 'not quiet yet: nothing moves');
  const drained = withDrained(syncing, all, new Set(['a']))!;
  t.is(drained.epoch, 7);
  t.deepEqual(at(drained, 0), { from: 0, to: 199, replicas: [1, 2], syncing: [], epoch: 7 }, 'the drained primary\'s backup is primary, the copy its backup (ranges alike joined)');
  t.deepEqual(at(drained, 500), { from: 200, to: SLOT_COUNT - 1, replicas: [1, 2], syncing: [], epoch: 5 });
  t.deepEqual(withDrained(syncing, half, new Set(['a']))!.slots.filter((r) => r.replicas.includes(0)).map((r) => [r.from, r.to]), [[100, 199]], 'a range not copied keeps the drained member');
});

if (onHost) ava('a drain cancelled while copying: the surplus syncing member is dropped; a member being drained is never made a replica, nor put in as a copy', (t) => {
  // [a, b] with c syncing (a's drain was cancelled): c's copy done or not, it is dropped at a new epoch.
  const config: ClusterConfig = { epoch: 6, replicas: 2, members: ['a', 'b', 'c', 'd'], slots: ranges([0, 99, [0, 1], [2], 6], [100, SLOT_COUNT - 1, [1], [2, 3], 6]) };
  const done = new Map([['c', [{ from: 0, to: SLOT_COUNT - 1, epoch: 6 }]], ['d', [{ from: 0, to: SLOT_COUNT - 1, epoch: 6 }]]]);
  const dropped = withSynced(config, new Map())!;
  t.deepEqual(dropped.slots.find((r) => r.from === 0), { from: 0, to: 99, replicas: [0, 1], syncing: [], epoch: 7 });
  t.deepEqual(dropped.slots.find((r) => r.from === 100), { from: 100, to: SLOT_COUNT - 1, replicas: [1], syncing: [2], epoch: 7 }, 'room for one of two syncing: the first stays');
  t.deepEqual(withSynced(config, new Map(), new Set(['a']))!.slots.find((r) => r.from === 0), config.slots[0], 'while a is drained, c stays syncing (it is a\'s copy)');
  // c drained too: d, not c, becomes the replica where both copies are done.
  const promoted = withSynced(config, done, new Set(['a', 'c']))!;
  t.deepEqual(promoted.slots.find((r) => r.from === 100), { from: 100, to: SLOT_COUNT - 1, replicas: [1, 3], syncing: [2], epoch: 7 });
  // a quiet, c being drained: c's copy does not replace a.
  t.is(withDrained({ ...config, slots: ranges([0, SLOT_COUNT - 1, [0, 1], [2], 6]) }, done, new Set(['a']), new Set(['a', 'c'])), undefined);
});
