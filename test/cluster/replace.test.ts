// Replacing a member that is gone for good (issue 18; docs/cluster.md
// "Replacing a member"), on the host: in a cluster of three with --replicas 2
// a member is SIGKILLed and never returns. A new member, under a new name,
// holds no hash slot, so repair makes it the target of every hash slot left
// short at once (--replace-after is an hour here: no other member takes them)
// and their primaries copy them to it. kvctl forget of the old name says
// nothing is lost; kvctl rebalance then moves the cluster to the placement of
// its three live members. Every key reads back through each step, and the
// new member's own region holds the keys of its hash slots. And when two of
// three die at once, kvctl forget says which hash slots' keys are lost.
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { etcdKeys } from '../../protocol/registry.js';
import { readConfig } from '../../server/replication/config-store.js';
import { nextConfig, slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { eventually, startMember } from './helpers.js';
import { REPLICAS_ON, leaseSeconds, readAlone, replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);

test.serial('a member gone for good is replaced by a new one: it is copied the hash slots left short from their replicas, forget says nothing is lost, rebalance evens the shares; every key reads back', async (t) => {
  const prefix = '/test-replace';
  const keys = etcdKeys(prefix);
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  const { members, dir } = await replicatedMembers(t, etcd, prefix, 2, 3, 'shm', ['--replace-after', '1h']);
  t.is((await kvctl([...target, 'rebalance'])).code, 0, 'balanced: placement frozen');
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  const names = Array.from({ length: 3000 }, (_, i) => `r:${i}`);
  for (let i = 0; i < names.length; i += 500) await kv.putMany(names.slice(i, i + 500).map((key) => [key, `v:${key}`]));
  const readBack = async () => {
    const values = await kv.getMany(names);
    return values.filter((value, i) => String(value) !== `v:${names[i]}`).length;
  };

  await members[1]!.process.stop('SIGKILL');
  await eventually(async () => slotReplicaNames((await readConfig(etcd.client, prefix))!).names.every((list) => !list.includes('m1')), 'm1 failed over', slow(30_000));
  const short = slotReplicaNames((await readConfig(etcd.client, prefix))!).names.filter((list) => list.length < 2).length;
  t.true(short > 0);
  t.is(await readBack(), 0, 'served by the other replicas meanwhile');

  // The replacement, under a new name: it holds nothing, so it is the target of every short hash slot at once.
  const args = ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', `${leaseSeconds()}s`, '--name', 'm3', '--replicas', '2', '--replace-after', '1h'];
  members.push(await startMember(dir, 3, args, undefined, REPLICAS_ON));
  await eventually(async () => (await readConfig(etcd.client, prefix))!.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0), 'm3 was copied every short hash slot', slow(60_000));
  const repaired = slotReplicaNames((await readConfig(etcd.client, prefix))!).names;
  t.is(repaired.filter((list) => list.includes('m3')).length, short, 'm3 holds exactly the hash slots left short');
  t.is(await readBack(), 0);

  const forgot = await kvctl([...target, 'forget', 'm1']);
  t.is(forgot.code, 0, forgot.stderr);
  t.regex(forgot.stdout, /^forgot member m1: with --replicas 2 its keys are on the other replicas of its hash slots: nothing is lost\.\n$/);
  t.is(await etcd.client.get(keys.member('m1')).string(), null);

  const rebalanced = await kvctl([...target, 'rebalance', '--wait']);
  t.is(rebalanced.code, 0, rebalanced.stderr);
  const wanted = slotReplicaNames(nextConfig(undefined, ['m0', 'm2', 'm3'].map((name) => ({ name })), 2)!).names;
  const now = slotReplicaNames((await readConfig(etcd.client, prefix))!).names;
  t.true(now.every((list, slot) => list.join() === wanted[slot]!.join()), 'the placement of m0, m2 and m3');
  t.is(await readBack(), 0, 'every key reads back after the rebalance');
  const direct = await KvClient.connect({ servers: [members[3]!.url], timeoutMs: testTimeoutMs() });
  t.teardown(() => direct.close());
  const sample = names.filter((key) => now[keySlot(Buffer.from(key))]!.includes('m3')).slice(0, 200);
  let held = 0;
  for (const key of sample) if (String(await readAlone(() => direct.get(key))) === `v:${key}`) held++;
  t.is(held, sample.length, 'm3\'s own region holds the keys of its hash slots');
});

test.serial('kvctl forget of a member that was the last live replica of some hash slots says their keys are lost (keysLost)', async (t) => {
  const prefix = '/test-replace-lost';
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  const { members, placed } = await replicatedMembers(t, etcd, prefix, 2, 3, 'shm', ['--replace-after', '1h']);
  // Two of three at once: the hash slots only they held keep one or both as replicas (never given to m0).
  await Promise.all([members[1]!.process.stop('SIGKILL'), members[2]!.process.stop('SIGKILL')]);
  await eventually(async () => slotReplicaNames((await readConfig(etcd.client, prefix))!).names.every((list) => !list.includes('m0') || list.length === 1), 'm1 and m2 failed over where m0 holds a copy', slow(30_000));
  await new Promise((resolve) => setTimeout(resolve, slow(1000))); // the second death's round has run
  const after = slotReplicaNames((await readConfig(etcd.client, prefix))!).names;
  const lostWith = (name: string) => after.filter((list) => list.includes(name) && !list.includes('m0')).length;
  t.true(slotReplicaNames(placed).names.some((list) => !list.includes('m0')) && lostWith('m1') + lostWith('m2') > 0);
  const forgot = await kvctl([...target, '--json', 'forget', 'm1']);
  t.is(forgot.code, 0, forgot.stderr);
  t.like(JSON.parse(forgot.stdout), { forgotten: 'm1', replicas: 2, keysLost: lostWith('m1') > 0, hashSlotsLost: lostWith('m1') });
  const text = await kvctl([...target, 'forget', 'm2']);
  t.is(text.code, 0, text.stderr);
  t.regex(text.stdout, lostWith('m2') > 0 ? new RegExp(`^forgot member m2: ${lostWith('m2')} of its hash slots have no other live replica: their keys are lost unless one of their replicas returns with its region file`) : /nothing is lost/);
});
