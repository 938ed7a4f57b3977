// A member joining a cluster that holds keys, before anyone froze placement
// (issue 18's headline defect; docs/cluster.md "Rebalancing"): the controller
// reads the members' load records, sees keys, and freezes placement instead of
// placing the new member directly (which would give it hash slots without
// their keys, hiding about a third of them). The new member holds nothing
// until kvctl rebalance copies its share to it; every key reads back before
// and after. At --replicas 1 and 2, on the host. Before this, the test failed
// at "every key reads back" (--replicas 1: the keys of the hash slots the new
// member took were unreachable).
//
// And the same join the moment after the first writes, before any walk counted
// them (RKV_TEST_LOAD_INTERVAL_MS: the members walk once, at start, so their
// records keep saying they hold no key, as every record does for up to about
// 200 ms after a member's first keys): a member's first block grant waits until
// its record says `granted` (server/replication/first-grant.ts), so placement
// freezes all the same. Before that, m2 was placed directly and the keys of
// the hash slots it took were unreachable (the test failed at "every key reads
// back").
import ava from 'ava';
import { pino } from 'pino';

import { KvClient } from '../../client/index.js';
import { etcdKeys, parseFrozenRecord, parseLoadRecord, slotsHeld } from '../../protocol/registry.js';
import { readConfig, writeConfig } from '../../server/replication/config-store.js';
import { LoadGuard } from '../../server/replication/load-guard.js';
import { nextConfig, slotReplicaNames } from '../../server/replication/placement.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { etcdForFile } from '../helpers/etcd.js';
import { EtcdProxy } from '../helpers/etcd-proxy.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { type Member, clusterDir, eventually, startMember, stopAll } from './helpers.js';
import { REPLICAS_ON, placedAll, replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);
const CALM_TTL = Math.round(slow(6000) / 1000);
const KEYS = 600;
const memberArgs = (prefix: string, name: string, replicas: number) => ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', `${CALM_TTL}s`, '--name', name, '--replicas', String(replicas)];

for (const replicas of [1, 2]) {
  test.serial(`--replicas ${replicas}: a member joining a loaded cluster whose placement was never frozen gets no hash slot without its keys; kvctl rebalance moves its share in`, async (t) => {
    const prefix = `/test-join-loaded-${replicas}`;
    const keys = etcdKeys(prefix);
    const { members, placed, dir } = await replicatedMembers(t, etcd, prefix, replicas, 2, 'shm', [], CALM_TTL);
    t.is(await etcd.client.get(keys.frozen).string(), null, 'placement is not frozen: nothing ran kvctl rebalance');
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
    t.teardown(() => kv.close());
    const names = Array.from({ length: KEYS }, (_, i) => `j:${i}`);
    await kv.putMany(names.map((key) => [key, `v:${key}`]));
    await eventually(async () => {
      const records = Object.values(await etcd.client.getAll().prefix(keys.load).strings()).map(parseLoadRecord);
      return records.filter((r) => r !== undefined && r.keys.some((n) => n > 0)).length === 2;
    }, 'both members\' load records show keys', slow(30_000));

    members.push(await startMember(dir, 2, memberArgs(prefix, 'm2', replicas), undefined, REPLICAS_ON));
    await eventually(async () => (await etcd.client.get(keys.aliveKey('m2')).string()) !== null, 'm2 registered', slow(30_000));
    await eventually(async () => (await etcd.client.get(keys.frozen).string()) !== null, 'the controller froze placement', slow(30_000));
    const why = parseFrozenRecord((await etcd.client.get(keys.frozen).string())!);
    t.deepEqual([why.reason, why.members.sort()], ['loaded', ['m0', 'm1']], 'frozen because both hold keys of hash slots a direct placement would move');
    const config = (await readConfig(etcd.client, prefix))!;
    t.is(slotsHeld(config, 'm2'), 0, 'm2 was given no hash slot');
    t.is(config.epoch, placed.epoch, 'no hash slot moved');
    t.deepEqual((await kv.getMany(names)).map(String), names.map((key) => `v:${key}`), 'every key reads back');
    // kvctl layout says why m2 holds nothing, and what moves its share to it.
    const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
    const shown = await kvctl([...target, 'layout']);
    t.regex(shown.stdout, /placement frozen since \S+ \(a member joined while m\d, m\d may have held keys\): hash slots move only by copying/);
    t.regex(shown.stdout, /joined, holding no hash slot: m2 \(kvctl rebalance moves their share to them\)/);
    const json = JSON.parse((await kvctl([...target, '--json', 'layout'])).stdout) as { config: { frozen: { reason: string; autoRebalance: boolean }; waiting: string[] } };
    t.like(json.config, { frozen: { reason: 'loaded', autoRebalance: false }, waiting: ['m2'] });

    const moved = await kvctl(['--etcd', etcd.url, '--etcd-prefix', prefix, '--json', 'rebalance', '--wait']);
    t.is(moved.code, 0, moved.stderr);
    t.like(JSON.parse(moved.stdout.trim().split('\n').pop()!), { done: true, left: 0 });
    t.true(slotsHeld((await readConfig(etcd.client, prefix))!, 'm2') > 0, 'm2 holds its share now');
    t.deepEqual((JSON.parse((await kvctl([...target, '--json', 'layout'])).stdout) as { config: { waiting: string[] } }).config.waiting, [], 'no member waits');
    t.deepEqual((await kv.getMany(names)).map(String), names.map((key) => `v:${key}`), 'every key reads back after the rebalance');
  });
}

for (const replicas of [1, 2]) {
  test.serial(`--replicas ${replicas}: a member joining the moment after the first writes, before any load record counts them, gets no hash slot without its keys`, async (t) => {
    const prefix = `/test-join-unwalked-${replicas}`;
    const keys = etcdKeys(prefix);
    const lagging = { RKV_TEST_LOAD_INTERVAL_MS: '600000' };
    const { members, placed, dir } = await replicatedMembers(t, etcd, prefix, replicas, 2, 'shm', [], CALM_TTL, lagging);
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
    t.teardown(() => kv.close());
    const names = Array.from({ length: KEYS }, (_, i) => `u:${i}`);
    await kv.putMany(names.map((key) => [key, `v:${key}`]));
    const records = Object.values(await etcd.client.getAll().prefix(keys.load).strings()).map(parseLoadRecord);
    t.deepEqual(records.map((r) => r?.keys.length), [0, 0], 'no walk counted a key');

    members.push(await startMember(dir, 2, memberArgs(prefix, 'm2', replicas), undefined, { ...REPLICAS_ON, ...lagging }));
    const acted = async () => (await etcd.client.get(keys.frozen).string()) !== null || slotsHeld((await readConfig(etcd.client, prefix))!, 'm2') > 0;
    await eventually(acted, 'the controller froze placement or placed m2', slow(30_000));
    await eventually(async () => (await kv.getMany(names)).every((v, i) => String(v) === `v:${names[i]}`), 'every key reads back', slow(10_000));
    const config = (await readConfig(etcd.client, prefix))!;
    t.is(slotsHeld(config, 'm2'), 0, 'm2 was given no hash slot');
    t.is(config.epoch, placed.epoch, 'no hash slot moved');
    t.deepEqual(parseFrozenRecord((await etcd.client.get(keys.frozen).string())!).members.sort(), ['m0', 'm1'], 'frozen: both may hold keys');
  });
}

test.serial('--replicas 1: a member given a direct placement while it had granted nothing grants its first block only after applying it, so a PUT through the config from before is refused, never acknowledged and lost', async (t) => {
  const prefix = '/test-join-unapplied';
  const keys = etcdKeys(prefix);
  const dir = clusterDir(t);
  const members: Member[] = [];
  t.teardown(() => stopAll(members));
  // m0 applies every config LAG ms late: the window in which it still serves what a new config moved away.
  const LAG = slow(5000);
  members.push(await startMember(dir, 0, memberArgs(prefix, 'm0', 1), undefined, { ...REPLICAS_ON, RKV_TEST_APPLY_DELAY_MS: String(LAG) }));
  members.push(await startMember(dir, 1, memberArgs(prefix, 'm1', 1), undefined, REPLICAS_ON));
  await eventually(() => placedAll(etcd.client, prefix, 2), 'm0 and m1 placed', slow(30_000));
  const before = slotReplicaNames((await readConfig(etcd.client, prefix))!).names;
  // A client that keeps this config: its etcd is cut before m2 joins. No key written yet: every record says none.
  const proxy = await EtcdProxy.start(etcd.url);
  t.teardown(() => proxy.close());
  const stale = await KvClient.connect({ etcd: { hosts: proxy.url, prefix }, timeoutMs: slow(10_000) });
  t.teardown(() => stale.close());
  stale.on('error', () => undefined); // its etcd watch fails once cut: it keeps the config it has
  await eventually(async () => stale.status === 'ready', 'the stale client reaches both members');
  proxy.cut();

  members.push(await startMember(dir, 2, memberArgs(prefix, 'm2', 1), undefined, REPLICAS_ON));
  await eventually(async () => slotsHeld((await readConfig(etcd.client, prefix))!, 'm2') > 0, 'm2 is placed directly', slow(30_000));
  const placedAt = performance.now(); // m0 applies that config LAG ms after it was written, at the earliest after this
  t.is(await etcd.client.get(keys.frozen).string(), null, 'placement is not frozen: no member had granted a block');
  const after = slotReplicaNames((await readConfig(etcd.client, prefix))!).names;
  let key = 'moved:0';
  for (let i = 0; before[keySlot(Buffer.from(key))]![0] !== 'm0' || after[keySlot(Buffer.from(key))]![0] !== 'm2'; i++) key = `moved:${i}`;
  // m0 has not applied the new config yet: before, it granted at once and took this write into a hash slot it then fenced.
  t.true(performance.now() - placedAt < LAG / 2, 'the PUT goes out while m0 has not applied the config (else this test shows nothing)');
  const put = await stale.put(key, 'stranded?').then(
    () => 'acknowledged',
    (error: { code?: string }) => error.code ?? String(error),
  );
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  if (put === 'acknowledged') t.is(String(await kv.get(key)), 'stranded?', 'an acknowledged PUT reads back');
  t.is(put, 'KV_EPOCH_MOVED', 'refused: m0 granted its first block only after applying the config that moved the key away');
  t.is(await kv.get(key), undefined);
});

test.serial('the controller writes a direct placement only if the holders\' load records are still the ones it checked: a first grant in between fails the write, and the next check freezes placement', async (t) => {
  const prefix = '/test-join-guard';
  const keys = etcdKeys(prefix);
  const empty = (granted: boolean) => JSON.stringify({ at: new Date().toISOString(), slots: [], keys: [], bytes: [], ...(granted ? { granted: true } : {}) });
  const one = nextConfig(undefined, [{ name: 'm0' }], 1)!;
  const two = nextConfig(one, [{ name: 'm0' }, { name: 'm1' }], 1, one.epoch)!;
  t.true(await writeConfig(etcd.client, keys, one, undefined));
  const stored = (await etcd.client.get(keys.config).exec()).kvs[0]!.mod_revision;
  await etcd.client.put(keys.loadKey('m0')).value(empty(false));
  const guard = new LoadGuard({ client: etcd.client, prefix, logger: pino({ level: 'silent' }), ttlMs: 10_000, poke: () => {} });
  const members = new Set(['m0', 'm1']);
  const checked = await guard.check(one, two, members, members);
  if (checked.hold) return t.fail('m0 holds no key and granted nothing: the placement may go on');
  t.deepEqual([...checked.unchanged.keys()], [keys.loadKey('m0')]);
  // m0's first grant, between the check and the write (first-grant.ts puts this before it answers).
  await etcd.client.put(keys.loadKey('m0')).value(empty(true));
  t.false(await writeConfig(etcd.client, keys, two, stored, undefined, [keys.frozen], checked.unchanged), 'the write is conditioned on the record as checked');
  t.like(await guard.check(one, two, members, members), { hold: true });
  t.like(parseFrozenRecord((await etcd.client.get(keys.frozen).string())!), { reason: 'loaded', epoch: one.epoch, members: ['m0'] }, 'frozen: m0 may hold keys');
  t.is((await readConfig(etcd.client, prefix))!.epoch, one.epoch, 'm1 was not placed directly');
});
