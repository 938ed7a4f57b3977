// Sharding over a static server list on shm: batching per server, connecting
// with a member down, option checks, client metrics, kv-bench on a cluster.
// (Failover with 100k keys, on every provider: failover.test.ts.)
import { fileURLToPath } from 'node:url';

import test from 'ava';
import { Registry } from 'prom-client';

import { KvClient, type KvError } from '../../client/index.js';
import { run, seriesReader } from '../server/helpers.js';
import { type Member, clusterDir, eventually, memberUrl, nextStatus, startMember, stats, stopAll } from './helpers.js';

test.serial('a batch goes out as one doorbell per server', async (t) => {
  const dir = clusterDir(t);
  const members: Member[] = [];
  for (let i = 0; i < 3; i++) members.push(await startMember(dir, i));
  const kv = await KvClient.connect({ servers: members.map((m) => m.url) });
  try {
    // The client's one core has KvLayout.MAX_INFLIGHT (64) ops for all its members: 60 keys fit one submit.
    const keys = Array.from({ length: 60 }, (_, i) => `batch:${i}`);
    await kv.putMany(keys.map((k) => [k, k]));
    // The servers' clients, by member name (not a public API).
    const servers = (kv as unknown as { servers: Map<string, { submits: number }> }).servers;
    const before = new Map([...servers].map(([name, s]) => [name, s.submits]));
    const got = await kv.getMany(keys);
    t.deepEqual(got.map(String), keys);
    const perServer = new Map<string, number>();
    for (const k of keys) perServer.set(kv.memberFor(k)!, (perServer.get(kv.memberFor(k)!) ?? 0) + 1);
    for (const [name, server] of servers) {
      t.true(perServer.get(name)! > 0 && perServer.get(name)! <= 64, `${perServer.get(name)} keys on ${name}: fits one batch`);
      t.is(server.submits - before.get(name)!, 1, `${name}: its ${perServer.get(name)} GETs were submitted at once, with the other members'`);
    }
  } finally {
    await kv.close();
    await stopAll(members);
  }
});

test.serial('connect options are checked: exactly one of url, servers, etcd; real URLs', async (t) => {
  const bad: Array<[object, RegExp]> = [
    [{}, /exactly one of url, servers, etcd \(got none\)/],
    [{ url: 'shm:///a.sock', servers: ['shm:///b.sock'] }, /exactly one of url, servers, etcd \(got url, servers\)/],
    [{ servers: [] }, /non-empty array/],
    [{ servers: ['shm:///a.sock', 'tcp://x:1'] }, /unknown URL 'tcp:\/\/x:1'/],
    [{ etcd: { hosts: 'localhost:2379' } }, /etcd hosts must be http\(s\):\/\/host:port/],
  ];
  for (const [options, message] of bad) {
    const error = await t.throwsAsync<KvError>(KvClient.connect(options as never));
    t.is(error?.code, 'KV_INVALID_ARGUMENT');
    t.regex(error!.message, message);
  }
});

test.serial('no server reachable: connect fails with KV_DISCONNECTED naming them', async (t) => {
  const dir = clusterDir(t);
  const error = await t.throwsAsync<KvError>(KvClient.connect({ servers: [`shm://${dir}/a.sock`, `shm://${dir}/b.sock`], timeoutMs: 1000 }));
  t.is(error?.code, 'KV_DISCONNECTED');
  t.regex(error!.message, /no server of the cluster is reachable \(2 members\)/);
  t.regex(error!.message, /a\.sock/);
});

test.serial('requireReady: false: connect resolves with every member down, keys fail fast, and members are picked up as they start', async (t) => {
  const dir = clusterDir(t);
  const urls = [await memberUrl('shm', dir, 0), await memberUrl('shm', dir, 1)];
  const kv = await KvClient.connect({ servers: urls, timeoutMs: 1000, requireReady: false });
  const members: Member[] = [];
  t.teardown(async () => {
    await kv.close();
    await stopAll(members);
  });
  t.is(kv.status, 'reconnecting');
  t.deepEqual(kv.layout().map((m) => m.slots).reduce((a, b) => a + b, 0), 16384);
  t.true(kv.layout().every((m) => m.status !== 'ready'));
  const down = await t.throwsAsync<KvError>(kv.get('k'));
  t.is(down?.code, 'KV_DISCONNECTED');
  members.push(await startMember(dir, 0, [], urls[0]));
  members.push(await startMember(dir, 1, [], urls[1]));
  await nextStatus(kv, 'ready');
  await kv.put('k', 'v');
  t.is((await kv.get('k'))?.toString(), 'v');
});

test.serial('a client opted in to metrics counts its operations, retries and servers in the registry', async (t) => {
  const dir = clusterDir(t);
  const members = [await startMember(dir, 0), await startMember(dir, 1)];
  const registry = new Registry();
  const kv = await KvClient.connect({ servers: members.map((m) => m.url), metrics: registry });
  try {
    await kv.putMany(Array.from({ length: 50 }, (_, i) => [`m${i}`, 'v'] as [string, string]));
    await kv.getMany(Array.from({ length: 70 }, (_, i) => `m${i}`));
    await kv.incr('counter', 5);
    const lock = await kv.lock('a-lock');
    await t.throwsAsync(kv.lock('a-lock', { timeoutMs: 50 }), { code: 'KV_LOCK_CONTENDED' });
    // A waiter that gets the lock once it is released: it retried.
    const waiter = kv.lock('a-lock', { timeoutMs: 20_000 });
    setTimeout(() => void lock.release(), 100);
    await (await waiter).release();
    const text = await registry.metrics();
    const value = seriesReader(text);
    t.is(value('rdmakv_client_operations_total{op="put",result="ok"}'), 50);
    t.is(value('rdmakv_client_operations_total{op="get",result="ok"}'), 50);
    t.is(value('rdmakv_client_operations_total{op="get",result="not_found"}'), 20);
    t.is(value('rdmakv_client_operations_total{op="incr",result="ok"}'), 1);
    t.is(value('rdmakv_client_operations_total{op="lock",result="KV_LOCK_CONTENDED"}'), 1);
    // getMany and putMany are one latency sample per call (their keys counted above).
    t.is(value('rdmakv_client_operation_seconds_count{op="get_many"}'), 1);
    t.is(value('rdmakv_client_operation_seconds_count{op="put_many"}'), 1);
    t.is(value('rdmakv_client_operations_total{op="lock",result="ok"}'), 2);
    t.is(value('rdmakv_client_lock_contended_total'), 2);
    t.true(value('rdmakv_client_retries_total{op="lock"}') >= 1, 'the contended lock retried');
    t.is(value('rdmakv_client_servers{state="ready"}'), 2);
  } finally {
    await kv.close();
    await stopAll(members);
  }
});

test.serial('kv-bench loads a cluster with rdmakv.servers: the records spread over the members', async (t) => {
  const dir = clusterDir(t);
  const members = [await startMember(dir, 0), await startMember(dir, 1)];
  try {
    const bench = fileURLToPath(new URL('../../../bin/kv-bench.js', import.meta.url));
    // its reports go to the test's directory, not the checkout's bench/results
    const reports = ['-p', `kvbench.resultsdir=${dir}`];
    const load = await run(bench, ['load', '--db', 'rdma-kv', '-p', `rdmakv.servers=${members.map((m) => m.url).join(',')}`, '-p', 'recordcount=1000', '-p', 'fieldcount=2', ...reports]);
    t.is(load.code, 0, load.stderr);
    t.regex(load.stderr, new RegExp(`^kv-bench: results ${dir}/ycsb-rdma-kv-default-load-\\S+\\.json$`, 'm'));
    t.regex(load.stdout, /^\[INSERT\], Return=OK, 1000$/m);
    await eventually(async () => (await Promise.all(members.map(stats))).reduce((sum, s) => sum + s.items, 0) === 1000, 'all 1000 records stored');
    for (const s of await Promise.all(members.map(stats))) t.true(s.items > 300, `${s.items} records on one member`);
    const both = await run(bench, ['load', '--db', 'rdma-kv', '-p', `rdmakv.servers=${members[0]!.url}`, '-p', `rdmakv.url=${members[0]!.url}`, ...reports]);
    t.not(both.code, 0);
    t.regex(both.stderr, /give one of rdmakv\.url, rdmakv\.servers, rdmakv\.etcd/);
  } finally {
    await stopAll(members);
  }
});
