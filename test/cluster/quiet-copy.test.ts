// A member that grants no read leases (quiet: a drain or a handoff asked it to, server/replication/quiesce.ts)
// still copies what is asked of it: its copier reads its own items without a lease, each read checked by the
// CAS that follows it (client/repair.ts, rewriteOnto). In the Soft-RoCE guest a member failed over while
// another was quiet for its drain, so the quiet one had copies to make again, and could not (every GET of
// its own items lapsed): the drain waited forever (2026-11-29). Here a drain record that says `quiesce`
// from the start makes the member quiet before any copy, so every copy of its drain is made while quiet.
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { type DrainRecord, etcdKeys, slotsHeld } from '../../protocol/registry.js';
import { readConfig } from '../../server/replication/config-store.js';
import { slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { eventually, nextStatus } from './helpers.js';
import { missingOnReplicas, replicatedMembers } from './replicated-helpers.js';

const etcdTest = needing(ava, 'etcd');
const etcd = etcdForFile(etcdTest);

etcdTest.serial('a quiet member (granting no read lease) copies its hash slots: a drain that asks it to quiesce before any copy ends with every key on the members left', async (t) => {
  const prefix = '/test-quiet-copy';
  const keys = etcdKeys(prefix);
  const { members, placed } = await replicatedMembers(t, etcd, prefix, 2, 3);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const names = Array.from({ length: 300 }, (_, i) => `q:${i}`);
  await kv.putMany(names.map((key) => [key, `v:${key}`]));
  const primaryOf = slotReplicaNames(placed).names.filter((list) => list[0] === 'm0').length;
  t.true(primaryOf > 0, 'm0 is the primary of hash slots: it copies them itself');

  await etcd.client.put(keys.drainKey('m0')).value(JSON.stringify({ since: new Date().toISOString(), phase: 'quiesce' } satisfies DrainRecord));
  const config = async () => (await readConfig(etcd.client, prefix))!;
  await eventually(async () => slotsHeld(await config(), 'm0') === 0, 'm0 left every hash slot to copies it made while quiet', slow(60_000));

  const after = await config();
  t.true(after.epoch > placed.epoch);
  t.true(slotReplicaNames(after).names.every((list) => list.length === 2 && !list.includes('m0')), 'every hash slot on m1 and m2');
  t.true(after.slots.every((range) => range.syncing.length === 0));
  t.deepEqual(await missingOnReplicas(members, after, names), [], 'm1 and m2 each hold every key of their hash slots');
  t.deepEqual((await kv.getMany(names)).map(String), names.map((key) => `v:${key}`));
});
