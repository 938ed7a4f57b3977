// Failover on a replicated cluster (issue 17 step 6, first cut;
// docs/replication-design.md §4): kv-server processes with --replicas 2 or 3
// and a 2 s etcd lease.
//  - A primary SIGKILLed under a load of 4 writer and 2 reader processes that
//    record histories: once its lease lapses, the controller moves each of its
//    hash slots to the backup at a new epoch, the survivors' epoch words follow,
//    clients re-route, and writes of its keys (and a putMany/getMany issued
//    meanwhile) succeed again. Every key's history, with final reads after the
//    load, is linearizable (an op failed by the kill may or may not have taken
//    effect): no acknowledged write is lost. kvctl layout reports the hash
//    slots short of a replica and the member failed over. Restarted on its
//    region file, the victim is not placed again (placement stays frozen) but
//    is copied the hash slots left short and holds them again (repair), its
//    epoch words open for those alone.
//  - Five rounds under one such load: a primary killed (another each round),
//    restarted, copied back (repair) before the next; the histories stay
//    linearizable, each victim's key is written again within the bound, and at
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
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import ava, { type ExecutionContext } from 'ava';

import { KvClient } from '../../client/index.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import type { ClusterConfig } from '../../protocol/registry.js';
import { etcdKeys } from '../../protocol/registry.js';
import type { HistoryEvent } from '../../client/types.js';
import type { KvServer } from '../../server/kv-server.js';
import { readConfig, writeConfig } from '../../server/replication/config-store.js';
import { nextConfig, slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { MAY_HAVE_TAKEN_EFFECT, registerHistories } from '../helpers/history-operations.js';
import { runKvChild, startServer } from '../helpers/kv.js';
import { kvctl } from '../server/helpers.js';
import { isLinearizable } from '../helpers/linearizability.js';
import { registerModel } from '../helpers/linearizability-models.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { type Member, clusterDir, eventually, nextStatus, restartMember, startMember, stats, stopAll } from './helpers.js';

const test = needing(ava, 'etcd');
const REPLICAS_ON = { RKV_EXPERIMENTAL_REPLICAS: '1' };
const KEYS = 12;

const etcd = etcdForFile(test);

const config = (prefix: string): Promise<ClusterConfig | undefined> => readConfig(etcd.client, prefix);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function replicatedMembers(t: ExecutionContext, prefix: string, replicas: number, count: number): Promise<{ members: Member[]; placed: ClusterConfig; replicasOf: (key: string) => string[] }> {
  const dir = clusterDir(t);
  const members: Member[] = [];
  t.teardown(() => stopAll(members));
  for (let i = 0; i < count; i++) {
    members.push(await startMember(dir, i, ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', '2s', '--name', `m${i}`, '--replicas', String(replicas)], undefined, REPLICAS_ON));
  }
  await eventually(async () => (await config(prefix))?.members.length === count, `the controller placed all ${count} members`);
  const placed = (await config(prefix))!;
  const { names } = slotReplicaNames(placed);
  return { members, placed, replicasOf: (key) => names[keySlot(Buffer.from(key))]! };
}

/** Histories recorded by `churn` children (test/helpers/kv-child.ts): 4 writers and 2 readers on keys f0..KEYS-1. */
class Load {
  private readonly dir: string;
  readonly roles = ['w', 'w', 'w', 'w', 'r', 'r'];
  readonly files: string[];
  readonly done: Promise<Array<Record<string, unknown>>>;

  constructor(t: ExecutionContext, target: string, ms: number) {
    this.dir = mkdtempSync(join(tmpdir(), 'rkv-failover-'));
    t.teardown(() => rmSync(this.dir, { recursive: true, force: true }));
    this.files = this.roles.map((_, p) => join(this.dir, `p${p}.jsonl`));
    this.done = Promise.all(this.roles.map((role, p) => runKvChild(t, ['churn', target, String(p), role, String(KEYS), String(ms), this.files[p]!])));
  }

  /** Every process's events, then final reads of every key by one more process. */
  async events(prefix: string): Promise<Array<HistoryEvent & { process: number }>> {
    const final: HistoryEvent[] = [];
    const reader = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs(), history: (e) => void final.push(e) });
    for (let k = 0; k < KEYS; k++) await reader.get(`f${k}`);
    await reader.close();
    return [
      ...this.files.flatMap((file, p) => readFileSync(file, 'utf8').trim().split('\n').map((line) => ({ ...(JSON.parse(line) as HistoryEvent), process: p }))),
      ...final.map((e) => ({ ...e, process: this.roles.length })),
    ];
  }

  /** Every key's history is linearizable, a failure caused by the kills counting as may-have-taken-effect. */
  async check(t: ExecutionContext, prefix: string): Promise<Array<HistoryEvent & { process: number }>> {
    const outcomes = await this.done;
    t.log(`load: ${outcomes.map((o, p) => `${this.roles[p]}${p} ${o.ok as number} ok ${JSON.stringify(o.failures)}`).join('; ')}`);
    const events = await this.events(prefix);
    const byKey = registerHistories(events, MAY_HAVE_TAKEN_EFFECT);
    t.is(byKey.size, KEYS);
    for (const [key, ops] of byKey) t.true(isLinearizable(ops, registerModel), `history of ${key} (${ops.length} ops) is not linearizable`);
    return events;
  }
}

/** Writes `key` until a write succeeds; the ms from `since`. */
async function firstWrite(kv: KvClient, key: string, since: number): Promise<number> {
  for (;;) {
    try {
      await kv.put(key, 'after');
      return performance.now() - since;
    } catch (error) {
      if (performance.now() - since > slow(30_000)) throw error;
    }
  }
}

/** Checks that `after` is `before` with `dead` gone from every hash slot (those slots at a new epoch: after's, for one failover), and nothing else changed. */
function failedOver(t: ExecutionContext, before: ClusterConfig, after: ClusterConfig, dead: readonly string[]): void {
  const newEpoch = (epoch: number) => (dead.length === 1 ? epoch === after.epoch : epoch > before.epoch && epoch <= after.epoch);
  t.true(after.epoch > before.epoch);
  const was = slotReplicaNames(before);
  const now = slotReplicaNames(after);
  let moved = 0;
  for (let slot = 0; slot < was.names.length; slot++) {
    const old = was.names[slot]!;
    if (old.some((n) => dead.includes(n))) {
      moved++;
      if (now.names[slot]!.join() !== old.filter((n) => !dead.includes(n)).join() || !newEpoch(now.epochs[slot]!)) t.fail(`hash slot ${slot}: ${old} → ${now.names[slot]} at epoch ${now.epochs[slot]}`);
    } else if (now.names[slot]!.join() !== old.join() || now.epochs[slot] !== was.epochs[slot]) {
      t.fail(`hash slot ${slot} changed without losing ${dead}`);
    }
  }
  t.true(moved > 0);
}

test.serial('--replicas 2: a primary SIGKILLed under load: its hash slots move to their backups, writes go on, no acknowledged write is lost, histories linearizable; restarted, it is copied the short hash slots and holds them again', async (t) => {
  const prefix = '/test-failover-primary';
  const { members, placed: before, replicasOf } = await replicatedMembers(t, prefix, 2, 3);
  const primaryOf = (key: string) => replicasOf(key)[0]!;
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const victim = primaryOf('f0');
  const victimMember = members[Number(victim.slice(1))]!;
  const load = new Load(t, `etcd+${etcd.url}${prefix}`, slow(8000));

  await sleep(slow(1500));
  const killedAt = performance.now();
  await victimMember.process.stop('SIGKILL');
  // A key of the victim's hash slots, outside the histories.
  let probe = 'probe:0';
  for (let i = 0; primaryOf(probe) !== victim; i++) probe = `probe:${i}`;
  // A batch issued during the failover, half of it on the victim's hash slots: it waits the failover out.
  const batch = Array.from({ length: 16 }, (_, i): [string, string] => [`batch:${i}`, `b${i}`]);
  const many = kv.putMany(batch).then(() => kv.getMany(batch.map(([key]) => key)));
  const recoveredMs = await firstWrite(kv, probe, killedAt);
  const recoveredNs = process.hrtime.bigint() - BigInt(Math.round((performance.now() - killedAt - recoveredMs) * 1e6));
  t.deepEqual((await many).map(String), batch.map(([, value]) => value), 'putMany and getMany waited out the failover');
  t.true(batch.some(([key]) => primaryOf(key) === victim));
  t.log(`the first write of a key of the dead primary succeeded ${Math.round(recoveredMs)} ms after the kill (etcd lease 2 s)`);
  const events = await load.check(t, prefix);
  const after = (await config(prefix))!;
  failedOver(t, before, after, [victim]);
  t.is(await kv.get(probe).then(String), 'after');
  // kvctl layout says what the failover left.
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  const layout = JSON.parse((await kvctl([...target, '--json', 'layout'])).stdout) as { config: { failedOver: string[]; underReplicated: number } };
  t.deepEqual(layout.config.failedOver, [victim]);
  const short = slotReplicaNames(after).names.filter((r) => r.length < 2).length;
  t.true(short > 0);
  t.is(layout.config.underReplicated, short);
  t.regex((await kvctl([...target, 'layout'])).stdout, new RegExp(`^${short} hash slots with fewer than 2 replicas; failed over, holding none: ${victim} \\(a repair target once back\\)$`, 'm'));
  // Writers wrote the victim's keys after the failover, not only before it.
  const late = events.filter((e) => e.type === 'ok' && e.f === 'put' && primaryOf(e.key) === victim && BigInt(e.time) > recoveredNs);
  t.true(late.length > 0, 'puts of the dead primary\'s keys were acknowledged after the failover');

  // The victim returns on its region file: not placed again (frozen), but the hash slots the failover left short
  // are copied to it (repair: it holds none, so without waiting --replace-after), and it is their last replica again.
  await restartMember(victimMember, REPLICAS_ON);
  await eventually(async () => (await config(prefix))!.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0), 'the victim was copied the short hash slots', slow(30_000));
  const was = slotReplicaNames(after);
  const now = slotReplicaNames((await config(prefix))!);
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const short = was.names[slot]!.length < 2;
    const expected = short ? [...was.names[slot]!, victim] : was.names[slot]!;
    if (now.names[slot]!.join() !== expected.join()) t.fail(`hash slot ${slot}: ${was.names[slot]} → ${now.names[slot]}`);
  }
  const words = async (m: Member) => ((await stats(m)) as unknown as { hashSlots: Record<string, number> }).hashSlots;
  t.like(await words(victimMember), { open: short, fenced: SLOT_COUNT - short }, 'its /stats: open for the hash slots it holds again, fenced for the rest');
  t.is(layoutLine(await kvctl([...target, 'layout'])), undefined, 'kvctl layout reports nothing short any more');
  await kv.put('f0', 'still served');
  t.is(await kv.get('f0').then(String), 'still served');
});

/** kvctl layout's health line (hash slots short of replicas), if any. */
const layoutLine = (out: { stdout: string }): string | undefined => out.stdout.split('\n').find((line) => line.includes('fewer than'));

test.serial('--replicas 2: five primaries SIGKILLed in turn under load, each restarted and copied back before the next: nothing acknowledged is lost, histories linearizable, no key unavailable past the bound', async (t) => {
  const prefix = '/test-failover-rounds';
  const { members } = await replicatedMembers(t, prefix, 2, 3);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  // Cold keys, written once: after the rounds only the copies can have put them on a returned member.
  const cold = Array.from({ length: 200 }, (_, i) => `cold:${i}`);
  for (const key of cold) await kv.put(key, `v-${key}`);
  const load = new Load(t, `etcd+${etcd.url}${prefix}`, slow(45_000));
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
    await member.process.stop('SIGKILL');
    outages.push(await firstWrite(kv, probe, killedAt));
    await restartMember(member, REPLICAS_ON);
    await eventually(async () => repairedWith(await config(prefix), victim), `round ${round}: ${victim} was copied back`, slow(30_000));
    t.log(`round ${round}: ${victim} (primary of ${key}) killed; its key ${probe} written again ${Math.round(outages[round]!)} ms after the kill; repaired`);
  }
  await load.check(t, prefix);
  // The bound of docs/replication-design.md §4.1: the lease (2 s) + 1.5 s, slowed where the host is.
  for (const ms of outages) t.true(ms < slow(3500) + 1000, `a key was unavailable ${Math.round(ms)} ms`);
  // Every hash slot holds two replicas again, and each holds every key: read them back from each alone.
  const final = (await config(prefix))!;
  t.true(final.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0));
  const latest = new Map<string, string | undefined>(cold.map((key) => [key, `v-${key}`]));
  for (let k = 0; k < KEYS; k++) latest.set(`f${k}`, (await kv.get(`f${k}`))?.toString());
  for (const member of members) {
    const direct = await KvClient.connect({ url: member.url, timeoutMs: testTimeoutMs() });
    const name = `m${members.indexOf(member)}`;
    for (const [key, value] of latest) {
      if (!names(final)[keySlot(Buffer.from(key))]!.includes(name)) continue;
      t.is((await direct.get(key))?.toString(), value, `${key} on ${name}`);
    }
    await direct.close();
  }
});

test.serial('--replicas 3 on four members: two SIGKILLed at once under load: every hash slot keeps a replica, nothing acknowledged is lost, histories linearizable', async (t) => {
  const prefix = '/test-failover-two';
  const { members, placed: before, replicasOf } = await replicatedMembers(t, prefix, 3, 4);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  // The primary and first backup of f0: its hash slot is left with its last replica.
  const victims = replicasOf('f0').slice(0, 2);
  const load = new Load(t, `etcd+${etcd.url}${prefix}`, slow(8000));
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
  const { members, placed: before, replicasOf } = await replicatedMembers(t, prefix, 2, 3);
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
  const { members, placed: before, replicasOf } = await replicatedMembers(t, prefix, 2, 3);
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
  const frozen = JSON.parse((await etcd.client.get(etcdKeys(prefix).frozen).string())!) as { failed: string[]; epoch: number };
  t.deepEqual(frozen.failed, [victim], 'the failover that froze placement was of the victim');
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
