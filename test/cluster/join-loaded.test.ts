// A member joining a cluster that holds keys, before anyone froze placement
// (issue 18's headline defect; docs/cluster.md "Rebalancing"): the controller
// reads the members' load records, sees keys, and freezes placement instead of
// placing the new member directly (which would give it hash slots without
// their keys, hiding about a third of them). The new member holds nothing
// until kvctl rebalance copies its share to it; every key reads back before
// and after. At --replicas 1 and 2, on the host. Before this, the test failed
// at "every key reads back" (--replicas 1: the keys of the hash slots the new
// member took were unreachable).
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { etcdKeys, parseFrozenRecord, parseLoadRecord, slotsHeld } from '../../protocol/registry.js';
import { readConfig } from '../../server/replication/config-store.js';
import { etcdForFile } from '../helpers/etcd.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { eventually, startMember } from './helpers.js';
import { REPLICAS_ON, replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);
const CALM_TTL = Math.round(slow(6000) / 1000);
const KEYS = 600;

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

    const args = ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', `${CALM_TTL}s`, '--name', 'm2', '--replicas', String(replicas)];
    members.push(await startMember(dir, 2, args, undefined, REPLICAS_ON));
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
