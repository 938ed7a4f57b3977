// Failover on a replicated cluster (issue 17 step 6, first cut;
// docs/replication-design.md §4): kv-server processes with --replicas 2 or 3
// and a 2 s etcd lease.
//  - One primary SIGKILLed under load, failed over, restarted and copied back:
//    replicated-kill.test.ts (per provider: it also runs in the Soft-RoCE guest).
//  - Five rounds under a load of 4 writer and 2 reader processes recording
//    histories: a primary killed (another each round),
//    restarted, copied back (repair) before the next; the histories stay
//    linearizable, each victim's key is written again (the time logged; the
//    bound is bench/kv/failover.ts's to measure), and at
//    the end each replica holds every key's last value, cold keys written once
//    before the rounds included (only copies bring those to a returned member).
//  - --replicas 3 on four members, two killed at once under the same load:
//    every hash slot keeps a replica and the histories stay linearizable.
//  - Two of three members (--replicas 2) killed at once: the hash slots only
//    they held keep them (unavailable) instead of moving to the survivor,
//    which lacks their data; the rest fail over.
//  - A member killed and restarted at once (within its lease) waits to be
//    failed over before it registers.
//  - Writes carry their hash slot's epoch (two in-process servers placed by
//    hand, their words moved by the test): a replica at another epoch refuses
//    them with nothing written, and KvClient goes on once config and words agree.
import ava, { type ExecutionContext } from 'ava';

import { KvClient } from '../../client/index.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import type { ClusterConfig } from '../../protocol/registry.js';
import { etcdKeys } from '../../protocol/registry.js';
import type { KvServer } from '../../server/kv-server.js';
import { readConfig, writeConfig } from '../../server/replication/config-store.js';
import { nextConfig, slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { startServer } from '../helpers/kv.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { type Member, eventually, nextStatus, restartMember, stats } from './helpers.js';
import { KEYS, Load, REPLICAS_ON, failedOver, firstWrite, readAlone, replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);

const config = (prefix: string): Promise<ClusterConfig | undefined> => readConfig(etcd.client, prefix);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));


test.serial('--replicas 2: five primaries SIGKILLed in turn under load, each restarted and copied back before the next: nothing acknowledged is lost, histories linearizable, each victim\'s keys written again', async (t) => {
  const prefix = '/test-failover-rounds';
  // It has hung twice, once in CI (pending at ava's 120 s of no progress, its teardown never run): each step
  // gets a timeout naming it, so a hang fails with where it hung.
  const step = (what: string, ms = slow(60_000)) => t.timeout(ms, `no progress for ${ms} ms: ${what}`);
  step('starting three members');
  const { members } = await replicatedMembers(t, etcd, prefix, 2, 3);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  step('the client connecting');
  await nextStatus(kv, 'ready');
  step('writing the cold keys');
  // Cold keys, written once: after the rounds only the copies can have put them on a returned member.
  const cold = Array.from({ length: 200 }, (_, i) => `cold:${i}`);
  for (const key of cold) await kv.put(key, `v-${key}`);
  const load = new Load(t, etcd, `etcd+${etcd.url}${prefix}`, slow(45_000));
  const names = (c: ClusterConfig) => slotReplicaNames(c).names;
  const repairedWith = (c: ClusterConfig | undefined, name: string) => c !== undefined && c.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0) && c.slots.some((r) => r.replicas.includes(c.members.indexOf(name)));
  const outages: number[] = [];
  await sleep(slow(1500));
  for (let round = 0; round < 5; round++) {
    // A different victim each round: the primary of a history key, other than the last victim.
    const now = (await config(prefix))!;
    const last = round === 0 ? undefined : `m${(round - 1) % 3}`;
    const key = Array.from({ length: KEYS }, (_, k) => `f${k}`).find((k) => names(now)[keySlot(Buffer.from(k))]![0] !== last)!;
    const victim = names(now)[keySlot(Buffer.from(key))]![0]!;
    const member = members[Number(victim.slice(1))]!;
    // A key of the victim's hash slots outside the histories, written until it can be again.
    let probe = `probe:${round}:0`;
    for (let i = 0; names(now)[keySlot(Buffer.from(probe))]![0] !== victim; i++) probe = `probe:${round}:${i}`;
    const killedAt = performance.now();
    step(`round ${round}: killing ${victim}`);
    await member.process.stop('SIGKILL');
    step(`round ${round}: writing ${probe} of the killed ${victim}`);
    outages.push(await firstWrite(kv, probe, killedAt));
    step(`round ${round}: restarting ${victim}`);
    await restartMember(member, REPLICAS_ON);
    step(`round ${round}: ${victim} copied back`);
    await eventually(async () => repairedWith(await config(prefix), victim), `round ${round}: ${victim} was copied back`, slow(30_000));
    t.log(`round ${round}: ${victim} (primary of ${key}) killed; its key ${probe} written again ${Math.round(outages[round]!)} ms after the kill; repaired`);
  }
  // The load may run on after the rounds; then its processes exit (their clients closed), a last client reads every key
  // and the histories are checked, which under a loaded host took more than a minute.
  const budget = Math.max(0, load.endsAt - performance.now()) + slow(180_000);
  step('the load ending and its histories checked', budget);
  await load.check(t, prefix, budget - slow(10_000));
  step('every hash slot whole again, then every replica read alone');
  // The bound of docs/replication-design.md §4.1 (the lease + 1.5 s) is measured by bench/kv/failover.ts, not asserted
  // here: a timing threshold fails under load alone (beside the other cluster files, round 0 once took 4.9 s).
  t.log(`each victim's key written again after ${outages.map((ms) => Math.round(ms)).join(', ')} ms (design bound: lease + 1.5 s; bench/kv/failover.ts)`);
  // Every hash slot holds two replicas again, and each holds every key: read them back from each alone. (A member's
  // 2 s lease can lapse once more under the load's stalls after the last round, as in repair.test: CI at 9aee16c
  // found a hash slot short here once. That failover is repaired too; waiting for it keeps the check exact.)
  const whole = (c: ClusterConfig | undefined) => c !== undefined && c.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0);
  await eventually(async () => whole(await config(prefix)), 'every hash slot has two replicas again', slow(30_000));
  const final = (await config(prefix))!;
  const counted = await Promise.all(members.map((m) => stats(m) as Promise<unknown> as Promise<{ replication: { failovers: number } }>));
  t.log(`failovers counted by the members since they started: ${counted.map((s) => s.replication.failovers).join(', ')} (5 kills)`);
  const latest = new Map<string, string | undefined>(cold.map((key) => [key, `v-${key}`]));
  for (let k = 0; k < KEYS; k++) latest.set(`f${k}`, (await kv.get(`f${k}`))?.toString());
  for (const member of members) {
    const direct = await KvClient.connect({ url: member.url, timeoutMs: testTimeoutMs() });
    t.teardown(() => direct.close());
    const name = `m${members.indexOf(member)}`;
    for (const [key, value] of latest) {
      if (!names(final)[keySlot(Buffer.from(key))]!.includes(name)) continue;
      t.is((await readAlone(() => direct.get(key)))?.toString(), value, `${key} on ${name}`);
    }
    await direct.close();
  }
});

test.serial('--replicas 3 on four members: two SIGKILLed at once under load: every hash slot keeps a replica, nothing acknowledged is lost, histories linearizable', async (t) => {
  const prefix = '/test-failover-two';
  const { members, placed: before, replicasOf } = await replicatedMembers(t, etcd, prefix, 3, 4);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  // The primary and first backup of f0: its hash slot is left with its last replica.
  const victims = replicasOf('f0').slice(0, 2);
  const load = new Load(t, etcd, `etcd+${etcd.url}${prefix}`, slow(8000));
  await sleep(slow(1500));
  const killedAt = performance.now();
  await Promise.all(victims.map((name) => members[Number(name.slice(1))]!.process.stop('SIGKILL')));
  let probe = 'probe:0';
  for (let i = 0; !victims.every((v) => replicasOf(probe).includes(v)); i++) probe = `probe:${i}`;
  const recoveredMs = await firstWrite(kv, probe, killedAt);
  t.log(`after two kills, the first write of a key they both held succeeded ${Math.round(recoveredMs)} ms after them`);
  await load.check(t, prefix);
  await eventually(async () => removedOf(await config(prefix)) === 2, 'both victims failed over');
  failedOver(t, before, (await config(prefix))!, victims);
});

test.serial('--replicas 2: two of three members SIGKILLed at once: hash slots only they held keep them (never given to the survivor, which lacks their data); the rest fail over to it', async (t) => {
  const prefix = '/test-failover-pair';
  const { members, placed: before, replicasOf } = await replicatedMembers(t, etcd, prefix, 2, 3);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 500 });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const keys = Array.from({ length: 60 }, (_, i) => `pair:${i}`);
  for (const key of keys) await kv.put(key, `v-${key}`);
  await Promise.all([0, 1].map((i) => members[i]!.process.stop('SIGKILL')));
  await eventually(async () => (await config(prefix))!.epoch > before.epoch, 'the survivor\'s hash slots failed over');
  await sleep(1000); // more controller rounds (the second member's deletion, the grace) have run
  const after = (await config(prefix))!;
  const was = slotReplicaNames(before);
  const now = slotReplicaNames(after);
  for (let slot = 0; slot < was.names.length; slot++) {
    const old = was.names[slot]!;
    const got = now.names[slot]!;
    if (old.includes('m2')) {
      if (got.join() !== 'm2' || now.epochs[slot]! <= before.epoch) t.fail(`hash slot ${slot}: ${old} → ${got} at epoch ${now.epochs[slot]}`);
    } else if (got.length === 0 || got.some((name) => !old.includes(name))) {
      // Theirs alone: kept by both, or by the one etcd saw die second (the first failed over while it lived).
      t.fail(`hash slot ${slot}: ${old} → ${got}`);
    }
  }
  t.true(after.epoch <= before.epoch + 2, 'a failover per victim at most, no re-placement');
  for (const key of keys) {
    if (replicasOf(key).includes('m2')) t.is(await kv.get(key).then(String), `v-${key}`, key);
    else await t.throwsAsync(kv.get(key), { code: 'KV_DISCONNECTED' }, `${key}: both replicas are dead`);
  }
});

test.serial('--replicas 2: a member SIGKILLed and restarted at once waits to be failed over before it registers; its keys stay served, by their backups, and it is copied them back', async (t) => {
  const prefix = '/test-failover-restart';
  const { members, placed: before, replicasOf } = await replicatedMembers(t, etcd, prefix, 2, 3);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const keys = Array.from({ length: 30 }, (_, i) => `restart:${i}`);
  for (const key of keys) await kv.put(key, `v-${key}`);
  const victim = replicasOf(keys[0]!)[0]!;
  const member = members[Number(victim.slice(1))]!;
  await member.process.stop('SIGKILL');
  await restartMember(member, REPLICAS_ON); // at once: its lease (2 s) has not lapsed
  const after = (await config(prefix))!;
  t.true(after.epoch > before.epoch, 'failed over before it registered');
  const frozen = JSON.parse((await etcd.client.get(etcdKeys(prefix).frozen).string())!) as { reason: string; members: string[]; epoch: number };
  t.like(frozen, { reason: 'failover', members: [victim] }, 'the failover that froze placement was of the victim');
  t.not(await etcd.client.get(etcdKeys(prefix).aliveKey(victim)).string(), null, 'registered again afterwards');
  for (const key of keys) t.is(await kv.get(key).then(String), `v-${key}`, key);
  await kv.put(keys[0]!, 'new');
  t.is(await kv.get(keys[0]!).then(String), 'new');
  // Then repaired: it holds what it lost again, copied.
  await eventually(async () => (await config(prefix))!.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0), 'the victim was copied its hash slots back', slow(30_000));
});

const removedOf = (c: ClusterConfig | undefined) => (c ? c.members.length - new Set(c.slots.flatMap((r) => r.replicas)).size : 0);

/** Two in-process servers registered by hand under `prefix`, with a config of --replicas 2 written by the test (no controller, no epoch follower). */
async function handPlaced(t: ExecutionContext, prefix: string): Promise<{ servers: Map<string, KvServer>; config: ClusterConfig }> {
  const keys = etcdKeys(prefix);
  const servers = new Map<string, KvServer>();
  t.teardown(() => Promise.all([...servers.values()].map((s) => s.close())));
  for (const name of ['a', 'b']) {
    const server = await startServer('shm');
    servers.set(name, server);
    await etcd.client.put(keys.member(name)).value(JSON.stringify({ name, joined: new Date().toISOString(), replicas: 2 }));
    await etcd.client.put(keys.aliveKey(name)).value(JSON.stringify({ url: server.urls[0], pid: process.pid, host: 'test', started: new Date().toISOString() }));
  }
  const placed = nextConfig(undefined, [{ name: 'a' }, { name: 'b' }], 2)!;
  t.true(await writeConfig(etcd.client, keys, placed, undefined));
  return { servers, config: placed };
}

/** `config` with hash slot `slot` alone moved to `epoch` (same replicas). */
function bumped(config: ClusterConfig, slot: number, epoch: number): ClusterConfig {
  const slots = config.slots.flatMap((r) => {
    if (slot < r.from || slot > r.to) return [r];
    return [
      ...(slot > r.from ? [{ ...r, to: slot - 1 }] : []),
      { ...r, from: slot, to: slot, epoch },
      ...(slot < r.to ? [{ ...r, from: slot + 1 }] : []),
    ];
  });
  return { ...config, epoch, slots };
}

test.serial('--replicas 2: writes carry their hash slot\'s epoch: a replica whose word is at another epoch refuses them (KV_EPOCH_MOVED, nothing written), and KvClient goes on once its config and the words agree', async (t) => {
  const prefix = '/test-failover-epochs';
  const { servers, config: placed } = await handPlaced(t, prefix);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 400 });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const key = 'epoch-key';
  const slot = keySlot(Buffer.from(key));
  const [primary, backup] = slotReplicaNames(placed).names[slot]!.map((name) => servers.get(name)!);
  const direct = async (server: KvServer) => {
    const c = await KvClient.connect({ url: server.urls[0]!, timeoutMs: 400 });
    try {
      return (await c.get(key))?.toString();
    } finally {
      await c.close();
    }
  };

  // A new region's words are (0, OPEN); the config says epoch 1: the servers are behind, nothing is written.
  await t.throwsAsync(kv.put(key, 'v1'), { code: 'KV_EPOCH_MOVED' });
  t.deepEqual([await direct(primary!), await direct(backup!)], [undefined, undefined]);
  // The words reach epoch 1 (what an epoch follower does): a write waiting out the mismatch goes through.
  const waiting = KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 5000 }).then(async (c) => {
    await c.put(key, 'v1');
    await c.close();
  });
  await sleep(300);
  for (const server of servers.values()) await server.epochBarrier(Array.from({ length: SLOT_COUNT }, (_, i) => i), placed.epoch);
  await waiting;
  t.deepEqual([await direct(primary!), await direct(backup!)], ['v1', 'v1']);

  // The backup's word moves on (a new configuration this client has not read yet): refused, nothing written anywhere.
  await backup!.epochBarrier([slot], placed.epoch + 1);
  await t.throwsAsync(kv.put(key, 'v2'), { code: 'KV_EPOCH_MOVED' });
  t.deepEqual([await direct(primary!), await direct(backup!)], ['v1', 'v1']);
  // Once the config and the primary's word say so too, the same client writes again.
  const pending = kv.put(key, 'v3').catch((e: Error) => e);
  await writeConfig(etcd.client, etcdKeys(prefix), bumped(placed, slot, placed.epoch + 1), (await etcd.client.get(etcdKeys(prefix).config).exec()).kvs[0]!.mod_revision);
  await primary!.epochBarrier([slot], placed.epoch + 1);
  const late = await pending;
  if (late instanceof Error) t.is((late as { code?: string }).code, 'KV_EPOCH_MOVED'); // it may have timed out before the config came
  await kv.put(key, 'v4');
  t.deepEqual([await direct(primary!), await direct(backup!)], ['v4', 'v4']);
});
