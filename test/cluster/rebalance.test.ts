// Rebalancing a replicated cluster (issue 18; docs/cluster.md "Rebalancing"):
//  - per provider: a member joins a loaded cluster of two (--replicas 2, and on
//    the host --replicas 1 too; 20,000 keys)
//    under 4 writer and 2 reader processes recording histories; its share of
//    hash slots moves to it with their keys (copied first): every key reads
//    back through the new map, the new member holds its hash slots' keys, the
//    placement is the one a fresh cluster of three would get, histories
//    linearizable;
//  - on the host: a client whose config is stale (its etcd cut) never reads
//    the primary that gave a hash slot away once the new primary took a write
//    (that member quiesced its read leases; it applies configs late here, so
//    only the quiesce protects the read: the test fails without it);
//  - kvctl rebalance on a frozen cluster: --dry-run writes nothing, --cancel,
//    --wait; its refusals;
//  - the pure functions (rebalance.ts).
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type SlotRange, etcdKeys, frozenRecord, parseHandoffRecord } from '../../protocol/registry.js';
import { encodeClusterConfig } from '../../protocol/config-codec.js';
import { readConfig } from '../../server/replication/config-store.js';
import { nextConfig, slotReplicaNames } from '../../server/replication/placement.js';
import { handoffsDue, rebalanceTarget, slotsToMove, withMoveSyncing, withMoved } from '../../server/replication/rebalance.js';
import { etcdForFile } from '../helpers/etcd.js';
import { EtcdProxy } from '../helpers/etcd-proxy.js';
import { loadPollMode, providersUnderTest, slow, testScale, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { type Member, clusterDir, eventually, memberUrl, nextStatus, restartMember, startMember, stopAll } from './helpers.js';
import { Load, REPLICAS_ON, incrAlone, leaseSeconds, missingOnReplicas, placedAll, readAlone, replicatedMembers } from './replicated-helpers.js';

const etcdTest = needing(ava, 'etcd');
const etcd = etcdForFile(etcdTest);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const memberArgs = (prefix: string, name: string, ttlSeconds = leaseSeconds(), replicas = 2) => ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', `${ttlSeconds}s`, '--name', name, '--replicas', String(replicas)];
/**
 * A longer etcd lease for the cases that time no failover: loading 200k keys (the servers take
 * each PUT's notice) and copying them keeps a 2-core host busy enough that 2 s leases lapsed, which
 * fails the member over and gives the rebalance up (as it should).
 */
const CALM_TTL = Math.round(slow(6000) / 1000);
const isAlive = async (prefix: string, name: string) => (await etcd.client.get(etcdKeys(prefix).aliveKey(name)).string()) !== null;
/** The placement a fresh cluster of `names` gets (per hash slot, replicas by name). */
const fresh = (names: string[], replicas = 2) => slotReplicaNames(nextConfig(undefined, names.map((name) => ({ name })), replicas)!).names;

/**
 * `run`, or a failure naming what did not end (or failed: kvctl's own guard may fire first), with the
 * members' last warnings (their logs are otherwise not shown).
 */
async function within<T>(run: Promise<T>, ms: number, what: string, members: readonly Member[]): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const logs = () => members.map((m, i) => `m${i}:\n${m.process.stderr().split('\n').filter((line) => /"level":(40|50)/.test(line)).slice(-12).join('\n')}`).join('\n');
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms\n${logs()}`)), ms);
  });
  try {
    return await Promise.race([run.catch((error: Error) => Promise.reject(new Error(`${what}: ${error.message}\n${logs()}`))), late]);
  } finally {
    clearTimeout(timer);
  }
}

// Every provider at --replicas 2; on the host --replicas 1 too, where the moving hash slots' writes go to their one
// replica and to the member syncing into it, and nothing else holds the keys.
const joins = [...providersUnderTest().map((scheme) => [scheme, 2] as const), ...(providersUnderTest().includes('shm') ? [['shm', 1] as const] : [])];
for (const [scheme, replicas] of joins) {
  etcdTest.serial(`${scheme}: a member joins a loaded cluster (--replicas ${replicas}) under load: its share of hash slots moves to it with their keys; every key reads back, histories linearizable`, async (t) => {
    const prefix = `/test-rebalance-join-${scheme}-${replicas}`;
    const { members, dir } = await replicatedMembers(t, etcd, prefix, replicas, 2, scheme, [], CALM_TTL);
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs(), pollMode: loadPollMode() });
    t.teardown(() => kv.close());
    await nextStatus(kv, 'ready');
    // The test loads 200,000 keys (RKV_TEST_REBALANCE_KEYS=200000: passed by hand, 38-49 s); the suite loads
    // 20,000, since the larger load beside the other cluster files (ava runs two at once) made their timing-bound
    // repair cases miss their bounds in CI.
    const count = Math.max(2000, Math.round(Number(process.env.RKV_TEST_REBALANCE_KEYS ?? 20_000) * testScale()));
    const keys = Array.from({ length: count }, (_, i) => `j:${i}`);
    for (let i = 0; i < count; i += 2000) await kv.putMany(keys.slice(i, i + 2000).map((key) => [key, `v:${key}`]));
    await incrAlone(kv, 'j:counter', 7n);
    t.log(`${count} keys loaded`);

    // Loaded: kvctl rebalance on the balanced cluster freezes placement, so a member that joins gets nothing by itself.
    const freeze = await kvctl(['--etcd', etcd.url, '--etcd-prefix', prefix, 'rebalance']);
    t.regex(freeze.stdout, /^balanced: .*; placement is frozen/);
    const load = new Load(t, etcd, `etcd+${etcd.url}${prefix}`, slow(8000));
    await sleep(slow(1000));
    members.push(await startMember(dir, 2, memberArgs(prefix, 'm2', CALM_TTL, replicas), await memberUrl(scheme, dir, 2), REPLICAS_ON));
    await eventually(() => isAlive(prefix, 'm2'), 'm2 registered', slow(30_000));
    const followed = await within(kvctl(['--etcd', etcd.url, '--etcd-prefix', prefix, '--json', 'rebalance', '--wait']), slow(150_000), 'the rebalance', members);
    t.is(followed.code, 0, followed.stderr);
    const end = JSON.parse(followed.stdout.trim().split('\n').pop()!) as { done: boolean; moved: number; left: number };
    t.like(end, { done: true, left: 0 });
    t.log(`kvctl: ${followed.stderr.trim().split('\n').slice(-2).join(' | ')} | ${JSON.stringify(end)}`);
    await load.check(t, prefix);

    const after = (await readConfig(etcd.client, prefix))!;
    const { names } = slotReplicaNames(after);
    const wanted = fresh(['m0', 'm1', 'm2'], replicas);
    t.true(names.every((list, slot) => list.join() === wanted[slot]!.join()), 'the placement a fresh cluster of three gets');
    t.true(after.slots.every((range) => range.syncing.length === 0));
    t.deepEqual(await missingOnReplicas(members, after, [...keys.filter((_, i) => i % 10 === 0), 'j:counter']), [], 'every replica of a tenth of the keys holds it, backups too');
    const primaries = names.filter((list) => list[0] === 'm2').length;
    t.true(Math.abs(primaries - SLOT_COUNT / 3) < SLOT_COUNT * 0.03, `m2 is the primary of ${primaries} hash slots`);

    const reader = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
    t.teardown(() => reader.close());
    let lost = 0;
    for (let i = 0; i < count; i += 2000) {
      const chunk = keys.slice(i, i + 2000);
      const values = await reader.getMany(chunk);
      lost += values.filter((value, k) => String(value) !== `v:${chunk[k]}`).length;
    }
    t.is(lost, 0, 'every key loaded before the join reads back with its value');
    t.is(await readAlone(() => reader.incr('j:counter', 0n)), 7n, 'a counter moved with its value');
    // m2's own region holds the keys of the hash slots it replicates.
    const direct = await KvClient.connect({ servers: [members[2]!.url], timeoutMs: testTimeoutMs() });
    t.teardown(() => direct.close());
    const sample = keys.filter((key) => names[keySlot(Buffer.from(key))]!.includes('m2')).slice(0, 300);
    let held = 0;
    for (const key of sample) if (String(await readAlone(() => direct.get(key))) === `v:${key}`) held++;
    t.is(held, sample.length, 'm2 holds the keys of its hash slots');
    // The old owners freed what moved away from them: their own regions no longer hold those keys.
    const before = fresh(['m0', 'm1'], replicas);
    for (const old of [0, 1]) {
      const own = await KvClient.connect({ servers: [members[old]!.url], timeoutMs: testTimeoutMs() });
      t.teardown(() => own.close());
      const gone = keys.filter((key) => before[keySlot(Buffer.from(key))]!.includes(`m${old}`) && !names[keySlot(Buffer.from(key))]!.includes(`m${old}`)).slice(0, 300);
      t.true(gone.length > 0);
      await eventually(async () => {
        for (const key of gone) if ((await readAlone(() => own.get(key))) !== undefined) return false;
        return true;
      }, `m${old} freed the keys of the hash slots it gave away`, slow(30_000));
    }
  });
}

// The rest is the same on any provider: on the host only.
const onHost = providersUnderTest().includes('shm');

if (onHost) etcdTest.serial('a client whose config is stale never reads the primary that gave a hash slot away, once the new primary took a write (the old primary quiesced its read leases)', async (t) => {
  const prefix = '/test-rebalance-stale';
  const dir = clusterDir(t);
  const members: Member[] = [];
  t.teardown(() => stopAll(members));
  // m0 applies every config 3 s late: after the hand-over only its quiesce keeps a stale client from reading it.
  members.push(await startMember(dir, 0, memberArgs(prefix, 'm0'), undefined, { ...REPLICAS_ON, RKV_TEST_APPLY_DELAY_MS: String(slow(3000)) }));
  for (const i of [1, 2]) members.push(await startMember(dir, i, memberArgs(prefix, `m${i}`), undefined, REPLICAS_ON));
  await eventually(() => placedAll(etcd.client, prefix, 3), 'three members placed', slow(60_000));
  const { names } = slotReplicaNames((await readConfig(etcd.client, prefix))!);
  let key = 'stale:0';
  for (let i = 0; names[keySlot(Buffer.from(key))]![0] !== 'm0'; i++) key = `stale:${i}`;
  const slot = keySlot(Buffer.from(key));

  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  const proxy = await EtcdProxy.start(etcd.url);
  t.teardown(() => proxy.close());
  const stale = await KvClient.connect({ etcd: { hosts: proxy.url, prefix }, timeoutMs: slow(1500) });
  t.teardown(() => stale.close());
  stale.on('error', () => undefined); // its etcd watch fails once cut: it keeps the config it has
  await eventually(async () => kv.status === 'ready' && stale.status === 'ready', 'both clients reach every member');
  // m0's first block grant waits until it applied the config in etcd (server/replication/first-grant.ts): up to its lag.
  await eventually(() => kv.put(key, 'before').then(() => true, (error: { code?: string }) => (error.code === 'KV_TIMEOUT' ? false : Promise.reject(error))), 'the first PUT through m0', slow(30_000));
  t.is(String(await stale.get(key)), 'before', 'through m0, its primary');

  // A target without m0 (what kvctl rebalance writes, for another member set): m0 gives every hash slot away.
  const keys = etcdKeys(prefix);
  await etcd.client.put(keys.frozen).value(frozenRecord('rebalance'));
  await etcd.client.put(keys.target).value(encodeClusterConfig(nextConfig(undefined, [{ name: 'm1' }, { name: 'm2' }], 2)!));
  // Cut the stale client off etcd while m0 quiesces, with the latest config (m0 still the key's primary).
  const staleConfig = () => (stale as unknown as { source: { config?: ClusterConfig } }).source.config;
  await eventually(async () => {
    const text = await etcd.client.get(keys.handoffKey('m0')).string();
    return text !== null && parseHandoffRecord(text)?.phase === 'quiesce' && staleConfig()?.epoch === (await readConfig(etcd.client, prefix))!.epoch;
  }, 'm0 quiesces, the stale client has the latest config', slow(60_000));
  proxy.cut();
  t.is(slotReplicaNames(staleConfig()!).names[slot]![0], 'm0', 'the stale client routes the key to m0');
  await eventually(async () => !slotReplicaNames((await readConfig(etcd.client, prefix))!).names[slot]!.includes('m0'), 'the key\'s hash slot left m0', slow(30_000));
  await kv.put(key, 'after');
  const read = await stale.get(key).then(
    (value) => ({ value: String(value) }),
    (error: { code?: string }) => ({ error: error.code }),
  );
  t.deepEqual(read, { error: 'KV_READ_LEASE_LAPSED' }, 'the stale client does not read "before" from m0 after "after" was acknowledged');
  t.is(String(await kv.get(key)), 'after');
  await eventually(async () => (await etcd.client.get(keys.target).string()) === null, 'the rebalance ends', slow(30_000));
});

if (onHost) etcdTest.serial('kvctl rebalance on a frozen cluster: a joined member waits; --dry-run writes nothing, --cancel takes it back, --wait moves it in; refusals', async (t) => {
  const prefix = '/test-rebalance-kvctl';
  // A 20 s lease: the controller is SIGSTOPped across three kvctl runs below (each a node start: seconds under CI's
  // load), and a lapsed lease would fail it over and give the rebalance up before --cancel (CI at 9626125).
  const pausedTtl = Math.round(slow(20_000) / 1000);
  const { members, dir } = await replicatedMembers(t, etcd, prefix, 2, 2, 'shm', [], pausedTtl);
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  const balanced = await kvctl([...target, 'rebalance']);
  t.is(balanced.code, 0, balanced.stderr);
  t.regex(balanced.stdout, /^balanced: every hash slot already has the replicas its live members would be given/);
  // Frozen, as a failover or a drain leaves it: a member that joins gets no hash slot by itself.
  const keys = etcdKeys(prefix);
  await etcd.client.put(keys.frozen).value(frozenRecord('rebalance'));
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await kv.putMany(Array.from({ length: 500 }, (_, i) => [`k:${i}`, `v:${i}`]));
  members.push(await startMember(dir, 2, memberArgs(prefix, 'm2', pausedTtl), undefined, REPLICAS_ON));
  await eventually(() => isAlive(prefix, 'm2'), 'm2 registered', slow(30_000));
  await sleep(slow(1500));
  t.false((await readConfig(etcd.client, prefix))!.members.includes('m2'), 'frozen: m2 is not placed by itself');

  const dry = await kvctl([...target, 'rebalance', '--dry-run']);
  t.is(dry.code, 0, dry.stderr);
  t.regex(dry.stdout, /^\d+ of 16384 hash slots change replicas:\n/);
  t.regex(dry.stdout, /m2 +holds +0 -> +\d+ +primary of +0 -> +\d+/);
  t.regex(dry.stdout, /\(dry run: nothing written\)/);
  t.is(await etcd.client.get(keys.target).string(), null, 'nothing written');

  // The controller stopped (well within its lease) while kvctl starts a rebalance and cancels it: nothing moves meanwhile.
  const controller = (JSON.parse((await etcd.client.get(keys.controller).string())!) as { name: string }).name;
  const stopped = members[Number(controller.slice(1))]!.process.child;
  stopped.kill('SIGSTOP');
  let resumed = false;
  const resume = () => void (resumed || (stopped.kill('SIGCONT'), (resumed = true)));
  t.teardown(resume);
  const started = await kvctl([...target, '--json', 'rebalance']);
  t.is(started.code, 0, started.stderr);
  const plan = JSON.parse(started.stdout) as { moves: number; members: Record<string, { held: number[] }> };
  t.true(plan.moves > 0);
  t.is(plan.members.m2!.held[0], 0);
  const again = await kvctl([...target, 'rebalance']);
  t.is(again.code, 1);
  t.regex(again.stderr, /a rebalance is in progress already/);
  const cancelled = await kvctl([...target, 'rebalance', '--cancel']);
  t.is(cancelled.code, 0, cancelled.stderr);
  t.regex(cancelled.stdout, /rebalance cancelled; \d+ hash slots had not moved/);
  t.is(await etcd.client.get(keys.target).string(), null);
  resume();
  t.deepEqual(Object.values(await etcd.client.getAll().prefix(keys.handoff).strings()).filter((v) => parseHandoffRecord(v)?.phase !== 'moved'), [], 'no member is left quiesced');

  // Once the cancelled copies are dropped (repair's rule), a new rebalance goes to the end.
  await eventually(async () => (await readConfig(etcd.client, prefix))!.slots.every((r) => r.syncing.length === 0), 'the cancelled copies stop', slow(30_000));
  const done = await kvctl([...target, 'rebalance', '--wait']);
  t.is(done.code, 0, done.stderr);
  t.regex(done.stdout, /^rebalanced: \d+ hash slots moved in [\d.]+ s/);
  t.regex(done.stderr, /rebalance: \d+ of \d+ hash slots still to move/);
  const { names } = slotReplicaNames((await readConfig(etcd.client, prefix))!);
  const wanted = fresh(['m0', 'm1', 'm2']);
  t.true(names.every((list, slot) => list.join() === wanted[slot]!.join()));
  const values = await kv.getMany(Array.from({ length: 500 }, (_, i) => `k:${i}`));
  t.deepEqual(values.map(String), Array.from({ length: 500 }, (_, i) => `v:${i}`));

  const usage = await kvctl(['rebalance']);
  t.is(usage.code, 2);
  t.regex(usage.stderr, /rebalance works on an etcd cluster/);
  const single = '/test-rebalance-single';
  const one = await startMember(clusterDir(t), 0, ['--etcd', etcd.url, '--etcd-prefix', single, '--etcd-ttl', '2s', '--name', 's0'], undefined, REPLICAS_ON);
  t.teardown(() => one.process.stop('SIGTERM'));
  await eventually(async () => (await readConfig(etcd.client, single)) !== undefined, 'the config is written', slow(10_000));
  const n1 = await kvctl(['--etcd', etcd.url, '--etcd-prefix', single, 'rebalance']);
  t.is(n1.code, 0, n1.stderr);
  t.regex(n1.stdout, /^balanced: every hash slot already has the replicas its live members would be given/);
});

// With --replicas 1 a source killed mid-copy alone holds its hash slots: the rebalance is given up, and they wait
// for it, unavailable, until it serves its region file again.
const kills = [['m2', 2], ['m0', 2], ['m2', 1], ['m0', 1]] as const;
for (const [victim, replicas] of kills) {
  const ending = victim === 'm2' ? 'restarted, kvctl rebalance completes' : replicas > 1 ? 'repair fills in' : 'restarted on its region file, it serves its keys again';
  if (onHost) etcdTest.serial(`--replicas ${replicas}: ${victim === 'm2' ? 'the joining member' : 'a source primary'} SIGKILLed mid-copy: the rebalance is given up, the config ends consistent (every hash slot ${replicas} replicas, none syncing) and nothing acknowledged is lost; ${ending}`, async (t) => {
    const prefix = `/test-rebalance-kill-${victim}-${replicas}`;
    // Copies at 1 MB/s per primary: 4,000 keys of 1 KiB take seconds, so the kill lands mid-copy.
    const slowCopy = ['--repair-rate', '1', '--replace-after', '1s'];
    const { members, dir } = await replicatedMembers(t, etcd, prefix, replicas, 2, 'shm', slowCopy, CALM_TTL);
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
    t.teardown(() => kv.close());
    const value = Buffer.alloc(1024, 'k');
    const keys = Array.from({ length: 4000 }, (_, i) => `kill:${i}`);
    for (let i = 0; i < keys.length; i += 500) await kv.putMany(keys.slice(i, i + 500).map((key) => [key, value]));
    const keysOf = etcdKeys(prefix);
    await etcd.client.put(keysOf.frozen).value(frozenRecord('rebalance'));
    members.push(await startMember(dir, 2, [...memberArgs(prefix, 'm2', CALM_TTL, replicas), ...slowCopy], undefined, REPLICAS_ON));
    await eventually(() => isAlive(prefix, 'm2'), 'm2 registered', slow(30_000));
    const start = await kvctl(['--etcd', etcd.url, '--etcd-prefix', prefix, 'rebalance']);
    t.is(start.code, 0, start.stderr);
    await eventually(async () => (await etcd.client.get(keysOf.target).string()) !== null && (await readConfig(etcd.client, prefix))!.slots.some((r) => r.syncing.length > 0), 'the rebalance copies', slow(30_000));
    await members[Number(victim.slice(1))]!.process.stop('SIGKILL');
    // With --replicas 1 the killed source stays the replica of its hash slots (nothing else holds them).
    const keeps = replicas === 1 && victim === 'm0';
    await eventually(async () => {
      const config = (await readConfig(etcd.client, prefix))!;
      return (await etcd.client.get(keysOf.target).string()) === null && config.slots.every((r) => r.replicas.length === replicas && r.syncing.length === 0 && (keeps || !r.replicas.includes(config.members.indexOf(victim))));
    }, `the rebalance is given up and every hash slot has ${replicas} replicas${keeps ? '' : ', all live'}`, slow(60_000));
    t.deepEqual(Object.values(await etcd.client.getAll().prefix(keysOf.handoff).strings()).filter((v) => parseHandoffRecord(v)?.phase !== 'moved'), [], 'no member is left quiesced');
    if (keeps) await restartMember(members[0]!, REPLICAS_ON);
    await kv.put('kill:after', 'x');
    const values = await kv.getMany(keys);
    t.is(values.filter((v) => v === undefined || !Buffer.from(v).equals(value)).length, 0, 'every key loaded before reads back');
    t.is(String(await kv.get('kill:after')), 'x');
    if (victim === 'm2') {
      await restartMember(members[2]!, REPLICAS_ON);
      const done = await kvctl(['--etcd', etcd.url, '--etcd-prefix', prefix, 'rebalance', '--wait']);
      t.is(done.code, 0, done.stderr);
      const { names } = slotReplicaNames((await readConfig(etcd.client, prefix))!);
      const wanted = fresh(['m0', 'm1', 'm2'], replicas);
      t.true(names.every((list, slot) => list.join() === wanted[slot]!.join()), 'the placement of three');
      const again = await kv.getMany(keys);
      t.is(again.filter((v) => v === undefined || !Buffer.from(v).equals(value)).length, 0, 'every key reads back after the rebalance');
    }
  });
}

if (onHost) etcdTest.serial('--replicas 1, placement frozen: kvctl forget of a dead member gives its hash slots to the live members without keys; what they held of them from before a direct placement does not come back', async (t) => {
  const prefix = '/test-forget-frozen-1';
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  // m0 and m1 walk their index once, at start (RKV_TEST_LOAD_INTERVAL_MS), and grant blocks without saying so first
  // (RKV_TEST_GRANTS_UNRECORDED), as members did before 2026-12-05: their load records keep saying they hold no key, and
  // the controller places a joining member directly over their keys (now a record says `granted` before a member's
  // first grant, and placement freezes instead: join-loaded.test.ts). That leaves the state this test needs: keys
  // held, fenced, from before a direct placement.
  const lagging = { RKV_TEST_LOAD_INTERVAL_MS: '600000', RKV_TEST_GRANTS_UNRECORDED: '1' };
  const { members, dir } = await replicatedMembers(t, etcd, prefix, 1, 2, 'shm', [], CALM_TTL, lagging);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  const keys = Array.from({ length: 600 }, (_, i) => `f:${i}`);
  await kv.putMany(keys.map((key) => [key, 'old']));
  // m2 joins before placement froze: it is placed directly, and m0 and m1 keep, fenced, what they held of its hash slots.
  members.push(await startMember(dir, 2, memberArgs(prefix, 'm2', CALM_TTL, 1), undefined, REPLICAS_ON));
  await eventually(() => placedAll(etcd.client, prefix, 3), 'm2 is placed', slow(30_000));
  const placed = slotReplicaNames((await readConfig(etcd.client, prefix))!).names;
  const onM2 = keys.filter((key) => placed[keySlot(Buffer.from(key))]![0] === 'm2');
  t.true(onM2.length > 0);
  await eventually(async () => kv.memberFor(onM2[0]!) === 'm2', 'the client follows the config', slow(10_000));
  await kv.putMany(onM2.map((key) => [key, 'new']));
  t.regex((await kvctl([...target, 'rebalance'])).stdout, /^balanced: .*; placement is frozen/);

  await members[2]!.process.stop('SIGKILL');
  await eventually(async () => !(await isAlive(prefix, 'm2')), 'm2\'s lease lapsed', slow(60_000));
  const forgot = await kvctl([...target, 'forget', 'm2']);
  t.is(forgot.code, 0, forgot.stderr);
  t.regex(forgot.stdout, /forgot member m2: its \d+ hash slots go to the live members, without their keys\.\nIts keys are lost to the cluster: with --replicas 1 they had no other copy, and placement is frozen/);
  await eventually(async () => slotReplicaNames((await readConfig(etcd.client, prefix))!).names.every((list) => list.length === 1 && list[0] !== 'm2'), 'm2\'s hash slots go to m0 and m1', slow(30_000));
  await eventually(async () => kv.memberFor(onM2[0]!) !== 'm2', 'the client follows the config', slow(10_000));
  const values = await kv.getMany(onM2);
  t.deepEqual(values.filter((value) => value !== undefined).map(String), [], 'm2\'s keys are gone; the values from before it joined do not come back');
  const others = keys.filter((key) => !onM2.includes(key));
  t.deepEqual((await kv.getMany(others)).map(String), others.map(() => 'old'));
  await kv.put(onM2[0]!, 'fresh');
  t.is(String(await kv.get(onM2[0]!)), 'fresh');
});

if (onHost) etcdTest.serial('kvctl rebalance --auto on (--replicas 1): placement freezes, and a member that joins gets its share by a rebalance the controller starts, with its keys; --auto off: the next one waits', async (t) => {
  const prefix = '/test-rebalance-auto';
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  const { members, dir } = await replicatedMembers(t, etcd, prefix, 1, 2, 'shm', [], CALM_TTL);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  const keys = Array.from({ length: 1000 }, (_, i) => `a:${i}`);
  await kv.putMany(keys.map((key) => [key, `v:${key}`]));
  const misuse = await kvctl([...target, 'rebalance', '--auto', 'on', '--wait']);
  t.is(misuse.code, 2);
  t.regex(misuse.stderr, /--auto is given alone/);
  t.is((await kvctl([...target, 'rebalance', '--auto', 'off', '--cancel'])).code, 2, '--cancel is not silently taken for --auto off');
  const on = await kvctl([...target, 'rebalance', '--auto', 'on']);
  t.is(on.code, 0, on.stderr);
  t.regex(on.stdout, /^automatic rebalancing on: placement is frozen/);
  t.not(await etcd.client.get(etcdKeys(prefix).frozen).string(), null);

  members.push(await startMember(dir, 2, memberArgs(prefix, 'm2', CALM_TTL, 1), undefined, REPLICAS_ON));
  // No kvctl rebalance: the controller starts it, and it ends with the placement of three.
  const wanted = fresh(['m0', 'm1', 'm2'], 1);
  await eventually(async () => slotReplicaNames((await readConfig(etcd.client, prefix))!).names.every((list, slot) => list.join() === wanted[slot]!.join()) && (await etcd.client.get(etcdKeys(prefix).target).string()) === null, 'the controller rebalanced m2 in', slow(90_000));
  t.deepEqual((await kv.getMany(keys)).map(String), keys.map((key) => `v:${key}`), 'every key reads back through the new map');

  const off = await kvctl([...target, '--json', 'rebalance', '--auto', 'off']);
  t.deepEqual(JSON.parse(off.stdout), { auto: false });
  members.push(await startMember(dir, 3, memberArgs(prefix, 'm3', CALM_TTL, 1), undefined, REPLICAS_ON));
  await eventually(() => isAlive(prefix, 'm3'), 'm3 registered', slow(30_000));
  await sleep(slow(2000));
  const config = (await readConfig(etcd.client, prefix))!;
  t.false(config.slots.some((range) => range.replicas.includes(config.members.indexOf('m3'))), 'm3 holds nothing');
  t.is(await etcd.client.get(etcdKeys(prefix).target).string(), null, 'no rebalance started');
});

/** A config of two members (a, b) with --replicas 2 over all hash slots: a primary of 0..8191, b of the rest. */
function twoMembers(): ClusterConfig {
  const slots: SlotRange[] = [
    { from: 0, to: 8191, replicas: [0, 1], syncing: [], epoch: 3 },
    { from: 8192, to: SLOT_COUNT - 1, replicas: [1, 0], syncing: [], epoch: 3 },
  ];
  return { epoch: 3, replicas: 2, members: ['a', 'b'], slots };
}

ava('rebalance steps: the target\'s new members sync in; a hash slot moves once copied, one whose primary changes only with that primary quiet, all of its such hash slots at once', (t) => {
  const config = twoMembers();
  const goal = rebalanceTarget(config, [{ name: 'a' }, { name: 'b' }, { name: 'c' }])!;
  t.truthy(goal);
  const moving = slotsToMove(config, goal);
  t.true(moving > SLOT_COUNT / 2 && moving < SLOT_COUNT, `${moving} hash slots move`);
  t.is(rebalanceTarget(goal, [{ name: 'a' }, { name: 'b' }, { name: 'c' }]), undefined, 'a placed cluster has nothing to move');

  const syncing = withMoveSyncing(config, goal)!;
  t.is(syncing.epoch, 4);
  const s = slotReplicaNames(syncing);
  const want = slotReplicaNames(goal).names;
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const needs = want[slot]!.includes('c');
    if (s.syncing[slot]!.join() !== (needs ? 'c' : '') || s.epochs[slot] !== (needs ? 4 : 3)) t.fail(`hash slot ${slot}: syncing ${s.syncing[slot]} at ${s.epochs[slot]}`);
  }
  t.is(withMoveSyncing(syncing, goal), undefined, 'nothing more to add');
  t.is(withMoved(syncing, goal, new Map(), new Set()), undefined, 'nothing copied: nothing moves');
  t.deepEqual(handoffsDue(syncing, goal, new Map()), []);

  // Copies of c done at epoch 4 everywhere: hash slots keeping their primary move at once; a and b must quiesce for the rest.
  const copied = new Map([['c', [{ from: 0, to: SLOT_COUNT - 1, epoch: 4 }]]]);
  t.deepEqual(handoffsDue(syncing, goal, copied).sort(), ['a', 'b']);
  const backups = withMoved(syncing, goal, copied, new Set())!;
  t.deepEqual(backups.handedOver, []);
  const b = slotReplicaNames(backups.config);
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const samePrimary = s.names[slot]![0] === want[slot]![0];
    const expected = samePrimary ? want[slot]! : s.names[slot]!;
    if (b.names[slot]!.join() !== expected.join()) t.fail(`hash slot ${slot}: ${b.names[slot]} (want ${expected})`);
  }
  // a quiet: every hash slot a gives away as primary moves, at one epoch; b's wait.
  const movedA = withMoved(backups.config, goal, copied, new Set(['a']))!;
  t.deepEqual(movedA.handedOver, ['a']);
  const m = slotReplicaNames(movedA.config);
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    if (s.names[slot]![0] === 'a' && m.names[slot]!.join() !== want[slot]!.join()) t.fail(`hash slot ${slot} of a did not move`);
    if (s.names[slot]![0] === 'b' && want[slot]![0] !== 'b' && m.names[slot]![0] !== 'b') t.fail(`hash slot ${slot} of b moved without b quiet`);
  }
  const last = withMoved(movedA.config, goal, copied, new Set(['b']))!;
  t.deepEqual(last.handedOver, ['b']);
  t.is(slotsToMove(last.config, goal), 0, 'the target is reached');
  t.true(last.config.slots.every((r) => r.syncing.length === 0));
});
