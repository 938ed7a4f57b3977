// Failover on a replicated cluster (issue 17 step 6, first cut;
// docs/replication-design.md §4): three kv-server processes with --replicas 2
// and a 2 s etcd lease.
//  - A primary SIGKILLed under a load of 4 writer and 2 reader processes that
//    record histories: once its lease lapses, the controller moves each of its
//    hash slots to the backup at a new epoch, the survivors' epoch words follow,
//    clients re-route, and writes of its keys succeed again. Every key's
//    history, with final reads after the load, is linearizable (an op failed by
//    the kill may or may not have taken effect): no acknowledged write is lost.
//  - The killed member restarted on its region file gets no hash slot back
//    (placement stays frozen until repair exists), takes no write even from a
//    client that dials it directly (its epoch words are fenced), and the
//    cluster serves as before.
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
import { type EtcdProcess, startEtcd } from '../helpers/etcd.js';
import { MAY_HAVE_TAKEN_EFFECT, registerHistories } from '../helpers/history-operations.js';
import { runKvChild, startServer } from '../helpers/kv.js';
import { isLinearizable } from '../helpers/linearizability.js';
import { registerModel } from '../helpers/linearizability-models.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { type Member, clusterDir, eventually, nextStatus, restartMember, startMember, stopAll } from './helpers.js';

const test = needing(ava, 'etcd');
const REPLICAS_ON = { RKV_EXPERIMENTAL_REPLICAS: '1' };
const KEYS = 12;

let etcd: EtcdProcess;
test.before(async () => {
  etcd = await startEtcd();
});
test.after.always(async () => {
  await etcd?.stop();
});

const config = (prefix: string): Promise<ClusterConfig | undefined> => readConfig(etcd.client, prefix);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function replicatedMembers(t: ExecutionContext, prefix: string): Promise<{ members: Member[]; placed: ClusterConfig; primaryOf: (key: string) => string }> {
  const dir = clusterDir(t);
  const members: Member[] = [];
  t.teardown(() => stopAll(members));
  for (let i = 0; i < 3; i++) {
    members.push(await startMember(dir, i, ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', '2s', '--name', `m${i}`, '--replicas', '2'], undefined, REPLICAS_ON));
  }
  await eventually(async () => (await config(prefix))?.members.length === 3, 'the controller placed all three members');
  const placed = (await config(prefix))!;
  const { names } = slotReplicaNames(placed);
  return { members, placed, primaryOf: (key) => names[keySlot(Buffer.from(key))]![0]! };
}

test.serial('--replicas 2: a primary SIGKILLed under load: its hash slots move to their backups, writes go on, no acknowledged write is lost, histories linearizable; restarted, it gets nothing back and takes no write', async (t) => {
  const prefix = '/test-failover-primary';
  const { members, placed: before, primaryOf } = await replicatedMembers(t, prefix);
  const target = `etcd+${etcd.url}${prefix}`;
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const victim = primaryOf('f0');
  const victimMember = members[Number(victim.slice(1))]!;

  const dir = mkdtempSync(join(tmpdir(), 'rkv-failover-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const roles = ['w', 'w', 'w', 'w', 'r', 'r'];
  const files = roles.map((_, p) => join(dir, `p${p}.jsonl`));
  const loadMs = slow(8000);
  const load = Promise.all(roles.map((role, p) => runKvChild(t, ['churn', target, String(p), role, String(KEYS), String(loadMs), files[p]!])));

  await sleep(slow(1500));
  const killedAt = performance.now();
  await victimMember.process.stop('SIGKILL');
  // A key of the victim's hash slots, outside the histories: written until a write succeeds.
  let probe = 'probe:0';
  for (let i = 0; primaryOf(probe) !== victim; i++) probe = `probe:${i}`;
  let recoveredMs: number | undefined;
  while (recoveredMs === undefined) {
    try {
      await kv.put(probe, 'after');
      recoveredMs = performance.now() - killedAt;
    } catch (error) {
      if (performance.now() - killedAt > slow(30_000)) throw error;
    }
  }
  t.log(`the first write of a key of the dead primary succeeded ${Math.round(recoveredMs)} ms after the kill (etcd lease 2 s)`);
  const outcomes = await load;
  t.log(`load: ${outcomes.map((o, p) => `${roles[p]}${p} ${o.ok as number} ok ${JSON.stringify(o.failures)}`).join('; ')}`);

  // The config: the victim holds no hash slot; each one it held is its backup's alone, at the new epoch.
  const after = (await config(prefix))!;
  t.true(after.epoch > before.epoch);
  const was = slotReplicaNames(before);
  const now = slotReplicaNames(after);
  let moved = 0;
  for (let slot = 0; slot < was.names.length; slot++) {
    const old = was.names[slot]!;
    if (old.includes(victim)) {
      moved++;
      if (now.names[slot]!.join() !== old.filter((n) => n !== victim).join() || now.epochs[slot] !== after.epoch) t.fail(`hash slot ${slot}: ${old} → ${now.names[slot]} at epoch ${now.epochs[slot]}`);
    } else if (now.names[slot]!.join() !== old.join() || now.epochs[slot] !== was.epochs[slot]) {
      t.fail(`hash slot ${slot} changed without losing ${victim}`);
    }
  }
  t.true(moved > 0);
  t.is(await kv.get(probe).then(String), 'after');

  // Final reads, recorded as one more process: every acknowledged write must show in them.
  const final: HistoryEvent[] = [];
  const reader = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs(), history: (e) => void final.push(e) });
  for (let k = 0; k < KEYS; k++) await reader.get(`f${k}`);
  await reader.close();
  const events = [
    ...files.flatMap((file, p) => readFileSync(file, 'utf8').trim().split('\n').map((line) => ({ ...(JSON.parse(line) as HistoryEvent), process: p }))),
    ...final.map((e) => ({ ...e, process: roles.length })),
  ];
  const byKey = registerHistories(events, MAY_HAVE_TAKEN_EFFECT);
  t.is(byKey.size, KEYS);
  for (const [key, ops] of byKey) t.true(isLinearizable(ops, registerModel), `history of ${key} (${ops.length} ops) is not linearizable`);
  // Writers wrote the victim's keys after the failover, not only before it.
  const killedNs = process.hrtime.bigint() - BigInt(Math.round((performance.now() - killedAt - recoveredMs) * 1e6));
  const late = events.filter((e) => e.type === 'ok' && e.f === 'put' && primaryOf(e.key) === victim && BigInt(e.time) > killedNs);
  t.true(late.length > 0, 'puts of the dead primary\'s keys were acknowledged after the failover');

  // The victim returns on its region file: no hash slot for it, and its words are fenced.
  await restartMember(victimMember, REPLICAS_ON);
  await eventually(async () => (await etcd.client.get(etcdKeys(prefix).aliveKey(victim)).string()) !== null, 'the victim registered again');
  await sleep(500); // a controller round that would re-place it has run by now
  const frozen = (await config(prefix))!;
  t.is(frozen.epoch, after.epoch, 'placement stays frozen after a failover');
  const direct = await KvClient.connect({ url: victimMember.url, timeoutMs: 300 });
  t.teardown(() => direct.close());
  await t.throwsAsync(direct.put('f0', 'stale write'), { code: 'KV_TIMEOUT' }, 'a fenced member takes no write');
  await kv.put('f0', 'still served');
  t.is(await kv.get('f0').then(String), 'still served');
});

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
