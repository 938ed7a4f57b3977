// Failover of a replicated cluster, per provider (shm on the host, rdma in the
// Soft-RoCE guest; issue 17): three kv-server processes with --replicas 2 and a
// 2 s etcd lease (longer in the guest: leaseSeconds), a primary SIGKILLed under a load of writer and reader
// processes that record histories. Once its lease lapses, the controller moves
// each of its hash slots to the backup at a new epoch, the survivors' epoch
// words follow, clients re-route, and writes of its keys (and a putMany/getMany
// issued meanwhile) succeed again. Every key's history, with final reads after
// the load, is linearizable (an op failed by the kill may or may not have taken
// effect): no acknowledged write is lost. kvctl layout reports the hash slots
// short of a replica and the member failed over. Restarted on its region file,
// the victim is not placed again (placement stays frozen) but is copied the
// hash slots left short and holds them again (repair), its epoch words open for
// those alone. The other failover cases, on shm: replicated-failover.test.ts.
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { SLOT_COUNT } from '../../protocol/hash-slots.js';
import { readConfig } from '../../server/replication/config-store.js';
import { slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { loadPollMode, providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { type Member, eventually, nextStatus, restartMember, stats } from './helpers.js';
import { Load, REPLICAS_ON, failedOver, firstWrite, layoutLine, leaseSeconds, replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);
// The case is the victim's return: no other member takes its place meanwhile (--replace-after, whose
// default, 60 s, the guest's run reaches before the victim restarts).
const NO_REPLACING = ['--replace-after', '1h'];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: --replicas 2: a primary SIGKILLed under load: its hash slots move to their backups, writes go on, no acknowledged write is lost, histories linearizable; restarted, it is copied the short hash slots and holds them again`, async (t) => {
    const prefix = `/test-failover-primary-${scheme}`;
    const { members, placed: before, replicasOf } = await replicatedMembers(t, etcd, prefix, 2, 3, scheme, NO_REPLACING);
    const primaryOf = (key: string) => replicasOf(key)[0]!;
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs(), pollMode: loadPollMode() });
    t.teardown(() => kv.close());
    await nextStatus(kv, 'ready');
    const victim = primaryOf('f0');
    const victimMember = members[Number(victim.slice(1))]!;
    const load = new Load(t, etcd, `etcd+${etcd.url}${prefix}`, slow(8000));

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
    t.log(`the first write of a key of the dead primary succeeded ${Math.round(recoveredMs)} ms after the kill (etcd lease ${leaseSeconds()} s)`);
    const events = await load.check(t, prefix);
    const after = (await readConfig(etcd.client, prefix))!;
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
    await eventually(async () => (await readConfig(etcd.client, prefix))!.slots.every((r) => r.replicas.length === 2 && r.syncing.length === 0), 'the victim was copied the short hash slots', slow(30_000));
    const was = slotReplicaNames(after);
    const now = slotReplicaNames((await readConfig(etcd.client, prefix))!);
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
}
