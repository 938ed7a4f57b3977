// A primary cut off from etcd but alive (issue 17; docs/replication-design.md
// §4.4), per provider (shm on the host, rdma in the Soft-RoCE guest). Three
// kv-server processes with --replicas 2 and a 2 s etcd lease (longer in the
// guest: leaseSeconds); one member, m0, reaches etcd only through a TCP proxy
// the test cuts (its lease keepalives stop while it keeps serving, on either
// provider: the cut is of its etcd traffic alone). A second client reaches
// etcd through another proxy, cut at the same moment: it keeps the old config
// and goes on using m0 as its keys' primary.
//  - Before the controller commits the config without m0, m0 has fenced
//    every epoch word (it self-fences half a lease after its last
//    acknowledged keepalive, the lease lapses a whole one after).
//  - After a write through the new config is acknowledged, the stale client
//    neither reads the old value from m0 (m0's read lease ran out: its GET
//    fails KV_READ_LEASE_LAPSED) nor lands a write (m0's words are fenced,
//    the backup's moved on): what a client of the new config reads stays the
//    acknowledged value.
//  - m0 reaches etcd again: its lease lapsed, so it registers anew and its
//    fence lifts, but no config names it: it grants no read lease, and the
//    stale client still cannot read the old value there.
// A client paused (SIGSTOP) across a failover (issue 17): while it is
// stopped, its etcd goes (it resumes on the old config) and its key's primary
// m0 is cut off from etcd and failed over, and a newer value is acknowledged
// through the new config. Resumed, it neither reads its old value from m0
// (alive, and still holding it: only the read lease stops that) nor completes
// a write under the old config (m0's words are fenced, the backup's moved on);
// its history is linearizable with the rest.
// The self-fence's own clock (fenced at the deadline, lifted by a keepalive
// that comes back in time) is tested alone in test/server/self-fence.test.ts.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import ava, { type ExecutionContext } from 'ava';

import { type HistoryEvent, KvClient } from '../../client/index.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { type ClusterConfig, etcdKeys } from '../../protocol/registry.js';
import { readConfig } from '../../server/replication/config-store.js';
import { slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { EtcdProxy } from '../helpers/etcd-proxy.js';
import { MAY_HAVE_TAKEN_EFFECT, registerHistories } from '../helpers/history-operations.js';
import { forkKvChild } from '../helpers/kv.js';
import { isLinearizable } from '../helpers/linearizability.js';
import { registerModel } from '../helpers/linearizability-models.js';
import { type Scheme, loadPollMode, providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { type Member, clusterDir, eventually, memberUrl, startMember, stats, stopAll } from './helpers.js';
import { REPLICAS_ON, leaseSeconds, placedAll } from './replicated-helpers.js';

const test = needing(ava, 'etcd');

const etcd = etcdForFile(test);

/**
 * Three members with --replicas 2 under `prefix`, m0 reaching etcd only through `memberProxy`; a
 * second proxy for a client's etcd. `m0Key(stem)`: a key m0 is primary of in the placed config.
 */
async function cutOffCluster(t: ExecutionContext, prefix: string, scheme: Scheme) {
  const dir = clusterDir(t);
  const members: Member[] = [];
  const proxies = [await EtcdProxy.start(etcd.url), await EtcdProxy.start(etcd.url)];
  const [memberProxy, clientProxy] = proxies as [EtcdProxy, EtcdProxy];
  t.teardown(async () => {
    await stopAll(members);
    for (const proxy of proxies) await proxy.close();
  });
  for (let i = 0; i < 3; i++) {
    const etcdUrl = i === 0 ? memberProxy.url : etcd.url;
    const args = ['--etcd', etcdUrl, '--etcd-prefix', prefix, '--etcd-ttl', `${leaseSeconds()}s`, '--name', `m${i}`, '--replicas', '2'];
    members.push(await startMember(dir, i, args, await memberUrl(scheme, dir, i), REPLICAS_ON));
  }
  const config = (): Promise<ClusterConfig | undefined> => readConfig(etcd.client, prefix);
  await eventually(() => placedAll(etcd.client, prefix, 3), 'the controller placed all 3 members', slow(30_000));
  const before = (await config())!;
  const { names } = slotReplicaNames(before);
  const m0Key = (stem: string): string => {
    let key = `${stem}:0`;
    for (let i = 0; names[keySlot(Buffer.from(key))]![0] !== 'm0'; i++) key = `${stem}:${i}`;
    return key;
  };
  return { members, memberProxy, clientProxy, config, before, m0Key };
}

/** Whether process `pid` is stopped (state T in /proc). */
function stopped(pid: number): boolean {
  return /^\d+ \(.*\) T /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
}

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: --replicas 2: a primary cut off from etcd fences itself before its hash slots fail over, and a client still on the old config neither reads its old values nor lands a write there`, async (t) => {
    const prefix = `/rkv-self-fence-${scheme}`;
    const { members, memberProxy, clientProxy, config, before, m0Key } = await cutOffCluster(t, prefix, scheme);
    const key = m0Key('k');
    const counter = m0Key('c');

    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs(), pollMode: loadPollMode() });
    t.teardown(() => kv.close());
    // Short timeouts: its ops are expected to fail, after retrying through the failover waits.
    const stale = await KvClient.connect({ etcd: { hosts: clientProxy.url, prefix }, timeoutMs: slow(1500), pollMode: loadPollMode() });
    t.teardown(() => stale.close());
    stale.on('error', () => undefined); // its etcd watch fails once cut: it keeps the config it has
    await eventually(async () => kv.status === 'ready' && stale.status === 'ready', 'both clients reach every member');
    await kv.put(key, 'v1');
    t.is(String(await stale.get(key)), 'v1', 'through m0, its primary');
    t.is(await kv.incr(counter), 1n);

    memberProxy.cut();
    clientProxy.cut();
    // The config without m0: when it is committed, m0 must already be fenced everywhere.
    let fencedWhenFailedOver: Record<string, number> | undefined;
    await eventually(
      async () => {
        const now = await config();
        if (!now || now.epoch === before.epoch) return false;
        fencedWhenFailedOver = (await stats(members[0]!)).hashSlots;
        return true;
      },
      'the controller fails m0 over once its lease lapses',
    );
    const after = (await config())!;
    t.false(slotReplicaNames(after).names[keySlot(Buffer.from(key))]!.includes('m0'), "m0 is no longer one of the key's replicas");
    t.is(fencedWhenFailedOver?.open ?? 0, 0, `m0 had fenced every hash slot when it was failed over (${JSON.stringify(fencedWhenFailedOver)})`);

    await kv.put(key, 'v2'); // acknowledged by the new primary
    const read = await stale.get(key).then(
      (value) => ({ value: value === undefined ? undefined : String(value) }),
      (error: { code?: string }) => ({ error: error.code }),
    );
    t.deepEqual(read, { error: 'KV_READ_LEASE_LAPSED' }, 'the stale client does not read v1 from m0 after v2 was acknowledged');
    const write = await stale.put(key, 'v3').then(
      () => 'acknowledged',
      (error: { code?: string }) => error.code,
    );
    t.not(write, 'acknowledged', 'the stale client lands no write through the old config');
    t.is(String(await kv.get(key)), 'v2', 'the acknowledged value stands');
    // An INCR's answer is its primary's word: m0's misses what was added since the failover.
    t.is(await kv.incr(counter), 2n);
    const added = await stale.incr(counter).then(
      (value) => ({ value: String(value) }),
      (error: { code?: string }) => ({ error: error.code }),
    );
    // Its backup (now the primary) adds first and READs an epoch word past the stale config's: the INCR ends
    // as one that may have taken effect, before m0 adds or answers (docs/protocol.md, "The atomics' epoch READ").
    t.deepEqual(added, { error: 'KV_TIMEOUT' }, "the stale client's INCR gives no answer from m0 (it may have added on the new primary)");
    t.true((await kv.incr(counter)) >= 3n);
    t.like((await stats(members[0]!)).hashSlots, { open: 0 }, 'm0 still serves no hash slot');

    // m0 reaches etcd again: its lease has lapsed, so it registers anew, under a config that names it
    // nowhere. Its fence lifts, but it grants no read lease: the stale client still cannot read v1.
    memberProxy.heal();
    await eventually(async () => (await etcd.client.get(etcdKeys(prefix).aliveKey('m0')).string()) !== null, 'm0 registers again');
    await eventually(() => members[0]!.process.stderr().includes('self-fence lifted'), "m0's fence lifts with its new lease");
    t.like((await stats(members[0]!)).hashSlots, { fenced: SLOT_COUNT }, 'no config names it: its words stay fenced');
    const again = await stale.get(key).then(
      (value) => ({ value: value === undefined ? undefined : String(value) }),
      (error: { code?: string }) => ({ error: error.code }),
    );
    t.deepEqual(again, { error: 'KV_READ_LEASE_LAPSED' }, 'registered again, m0 grants no read lease: config names it nowhere');
  });

  test.serial(`${scheme}: --replicas 2: a client SIGSTOPped across a failover and resumed before it sees the new config neither reads its old value nor completes a write under the old config`, async (t) => {
    const prefix = `/rkv-paused-client-${scheme}`;
    const { memberProxy, clientProxy: childProxy, config, before, m0Key } = await cutOffCluster(t, prefix, scheme);
    const key = m0Key('p');

    const files = mkdtempSync(join(tmpdir(), 'rkv-paused-'));
    t.teardown(() => rmSync(files, { recursive: true, force: true }));
    const events: Array<HistoryEvent & { process: number }> = [];
    const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs(), pollMode: loadPollMode(), history: (e) => void events.push({ ...e, process: 0 }) });
    t.teardown(() => kv.close());
    const child = forkKvChild(t, ['paused', `etcd+${childProxy.url}${prefix}`, key, join(files, 'child.jsonl')]);
    const reports: Array<Record<string, unknown>> = [];
    child.on('message', (m: Record<string, unknown>) => reports.push(m));
    await eventually(() => reports.some((m) => m.ready), 'the child put its value and is ready');
    t.is(String(await kv.get(key)), 'before');

    child.send('stop'); // it stops itself between two calls into the addon
    await eventually(() => stopped(child.pid!), 'the child is stopped');
    // While it is stopped: its etcd goes (it will not hear of the new config), and m0 is cut off and failed over.
    childProxy.cut();
    memberProxy.cut();
    await eventually(async () => (await config())!.epoch !== before.epoch, 'the controller fails m0 over');
    await kv.put(key, 'v2'); // acknowledged under the new config
    child.kill('SIGCONT');
    child.send('go');
    await eventually(() => reports.some((m) => m.read !== undefined), 'the resumed child reports', 3 * testTimeoutMs() + slow(30_000));
    const report = reports.find((m) => m.read !== undefined)!;
    t.log(`resumed child: ${JSON.stringify(report)}`);
    t.is(report.read, 'error KV_READ_LEASE_LAPSED', 'resumed on the old config, it does not read its old value from m0');
    t.not(report.put, 'ok', 'nor completes a write there');
    t.not(report.readAfter, 'before');
    t.is(String(await kv.get(key)), 'v2', 'the value acknowledged while it was stopped stands');

    const childEvents = readFileSync(join(files, 'child.jsonl'), 'utf8').trim().split('\n').map((line) => ({ ...(JSON.parse(line) as HistoryEvent), process: 1 }));
    const byKey = registerHistories([...events, ...childEvents], MAY_HAVE_TAKEN_EFFECT);
    t.true(isLinearizable(byKey.get(key)!, registerModel), `the history of ${key} is linearizable`);
  });
}
