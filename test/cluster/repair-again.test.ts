// Repair after repair, per provider (shm on the host, rdma in the Soft-RoCE
// guest): three kv-server processes with --replicas 2 and keys loaded. One
// member is SIGKILLed, failed over, restarted and copied the hash slots left
// short (repair's first copy in this cluster's life); then a member that
// copied to it is killed the same way, and its repair is the copiers' second
// copy (their clients and connections made for the first one, to a member
// that died since). Both repairs end, and every key reads back, from the
// restarted member's own region too.
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { readConfig } from '../../server/replication/config-store.js';
import { slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { providersUnderTest, slow, testScale, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { type Member, eventually, nextStatus, restartMember } from './helpers.js';
import { REPLICAS_ON, readAlone, replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);
// The victims return: no other member takes their place meanwhile.
const NO_REPLACING = ['--replace-after', '1h'];

/** Whether every hash slot has `replicas` replicas and none is syncing. */
async function repaired(prefix: string, replicas: number): Promise<boolean> {
  const config = await readConfig(etcd.client, prefix);
  return config !== undefined && config.slots.every((r) => r.replicas.length === replicas && r.syncing.length === 0);
}

/** The last warnings of each member (their logs are otherwise not shown), for a repair that did not end. */
function warnings(members: readonly Member[]): string {
  return members.map((m, i) => `m${i}:\n${m.process.stderr().split('\n').filter((line) => /"level":(40|50)/.test(line)).slice(-12).join('\n')}`).join('\n');
}

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: a member repaired after another's repair: the copiers copy a second time, every key reads back`, async (t) => {
    const prefix = `/test-repair-again-${scheme}`;
    const { members, replicasOf } = await replicatedMembers(t, etcd, prefix, 2, 3, scheme, NO_REPLACING);
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
    t.teardown(() => kv.close());
    await nextStatus(kv, 'ready');
    const count = Math.max(500, Math.round(4000 * testScale()));
    const keys = Array.from({ length: count }, (_, i) => `again:${i}`);
    for (let i = 0; i < count; i += 500) await kv.putMany(keys.slice(i, i + 500).map((key) => [key, `v:${key}`]));

    const repairOnce = async (victim: number, round: string) => {
      const name = `m${victim}`;
      await members[victim]!.process.stop('SIGKILL');
      await eventually(async () => slotReplicaNames((await readConfig(etcd.client, prefix))!).names.every((list) => !list.includes(name)), `${round}: ${name} failed over`, slow(60_000));
      await restartMember(members[victim]!, REPLICAS_ON);
      try {
        await eventually(() => repaired(prefix, 2), `${round}: ${name} was copied the short hash slots`, slow(60_000));
      } catch (error) {
        throw new Error(`${(error as Error).message}\n${warnings(members)}`);
      }
    };
    // The first victim: the primary of again:0; the second: a member that copied to it (every other member did).
    const first = Number(replicasOf('again:0')[0]!.slice(1));
    await repairOnce(first, 'first repair');
    const second = (first + 1) % 3;
    await repairOnce(second, 'second repair');

    let lost = 0;
    for (let i = 0; i < count; i += 500) {
      const chunk = keys.slice(i, i + 500);
      lost += (await kv.getMany(chunk)).filter((value, k) => String(value) !== `v:${chunk[k]}`).length;
    }
    t.is(lost, 0, 'every key reads back');
    const { names } = slotReplicaNames((await readConfig(etcd.client, prefix))!);
    const direct = await KvClient.connect({ servers: [members[second]!.url], timeoutMs: testTimeoutMs() });
    t.teardown(() => direct.close());
    const sample = keys.filter((key) => names[keySlot(Buffer.from(key))]!.includes(`m${second}`)).slice(0, 100);
    let held = 0;
    for (const key of sample) if (String(await readAlone(() => direct.get(key))) === `v:${key}`) held++;
    t.is(held, sample.length, `m${second}'s own region holds the keys of its hash slots`);
  });
}
