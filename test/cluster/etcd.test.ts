// Sharding with etcd membership: kv-servers register themselves (kv-server
// --etcd), clients follow the prefix. A member that dies keeps its slots (its
// keys exist nowhere else), so they fail fast until it is back, wherever it
// comes back.
import { join } from 'node:path';

import ava from 'ava';

import { KvClient, type KvError, isRetryable } from '../../client/index.js';
import { etcdForFile } from '../helpers/etcd.js';
import { needing } from '../helpers/tools.js';
import { freePort, kvServer } from '../server/helpers.js';
import { type Member, clusterDir, eventually, nextStatus, startMember, stats, stopAll } from './helpers.js';
import { placedAll } from './replicated-helpers.js';

const test = needing(ava, 'etcd');

const KEYS = 100_000;
const key = (i: number) => `user:${i}`;
const value = (i: number) => `v${i}`;

const etcd = etcdForFile(test);

const memberArgs = (prefix: string, name: string) => ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', '2s', '--name', name];

test.serial('through etcd: 100k keys over 3 members; one crashes: fail fast, slots stay; back at a new URL: readable; a clean stop deregisters at once', async (t) => {
  const prefix = '/test-crash';
  const dir = clusterDir(t);
  const members: Member[] = [];
  for (let i = 0; i < 3; i++) members.push(await startMember(dir, i, memberArgs(prefix, `kv-${i}`)));
  // Written only once the controller has placed all three: a member placed while the keys are being written can get
  // hash slots whose keys stay behind (its owners' load records lag; CI at c924033 found the items per member short
  // of the map for 30 s, the writes having begun before the third member's placement).
  await eventually(() => placedAll(etcd.client, prefix, 3), 'the controller placed all three members');
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 30_000 });
  try {
    t.is(kv.status, 'ready');
    t.deepEqual(kv.layout().map((m) => [m.name, m.url]), members.map((m, i) => [`kv-${i}`, m.url]));
    for (let from = 0; from < KEYS; from += 5000) {
      await kv.putMany(Array.from({ length: 5000 }, (_, j) => [key(from + j), value(from + j)] as [string, string]));
    }
    const expected = new Map<string, number>();
    for (let i = 0; i < KEYS; i++) expected.set(kv.memberFor(key(i))!, (expected.get(kv.memberFor(key(i))!) ?? 0) + 1);
    await eventually(async () => (await Promise.all(members.map(stats))).every((s, i) => s.items === expected.get(`kv-${i}`)), 'items per member match the map');
    for (const [name, count] of expected) t.true(count / KEYS > 0.3 && count / KEYS < 0.37, `${name} holds ${count} keys`);

    // kv-1 crashes. Its lease runs out, and its slots still belong to it.
    const crashed = members[1]!;
    const degraded = nextStatus(kv, 'degraded');
    await crashed.process.stop('SIGKILL');
    await degraded;
    await eventually(async () => (await etcd.client.get(`${prefix}/alive/kv-1`).string()) === null, 'the crashed member\'s lease expired');
    const onCrashed = Array.from({ length: KEYS }, (_, i) => i).filter((i) => kv.memberFor(key(i)) === 'kv-1');
    const elsewhere = Array.from({ length: 3000 }, (_, j) => j * 33).filter((i) => kv.memberFor(key(i)) !== 'kv-1');
    const error = await t.throwsAsync<KvError>(kv.get(key(onCrashed[0]!)));
    t.is(error?.code, 'KV_DISCONNECTED');
    t.true(isRetryable(error));
    t.is(kv.layout().length, 3, 'the member is still in the map');
    t.deepEqual((await kv.getMany(elsewhere.map(key))).map(String), elsewhere.map(value));

    // Back with its region file, on another socket: etcd tells the client where.
    const moved = await startMember(dir, 1, memberArgs(prefix, 'kv-1'), `shm://${join(dir, 'kv1-moved.sock')}`);
    members[1] = moved;
    await nextStatus(kv, 'ready');
    t.is(kv.layout().find((m) => m.name === 'kv-1')?.url, moved.url);
    const back = await kv.getMany(onCrashed.map(key));
    t.is(back.filter((v, j) => v?.toString() === value(onCrashed[j]!)).length, onCrashed.length, 'every key of kv-1 is readable again');

    // A clean stop revokes the lease: the alive key is gone when the process is.
    const stopping = nextStatus(kv, 'degraded');
    const finished = await members[2]!.process.stop('SIGTERM');
    t.is(finished.code, 0);
    t.is(await etcd.client.get(`${prefix}/alive/kv-2`).string(), null);
    t.not(await etcd.client.get(`${prefix}/members/kv-2`).string(), null, 'still a member: it owns its slots');
    await stopping;
  } finally {
    await kv.close();
    await stopAll(members);
  }
});

test.serial('a second live server under a taken name is refused after one TTL', async (t) => {
  const prefix = '/test-dup';
  const dir = clusterDir(t);
  const first = await startMember(dir, 0, memberArgs(prefix, 'same'));
  try {
    const second = await kvServer(['--listen', `shm://${join(dir, 'other.sock')}`, '--memory', '64M', ...memberArgs(prefix, 'same')]);
    t.is(second.code, 1);
    t.regex(second.stderr, /another kv-server is registered as 'same' in etcd \(at shm:\/\/.*kv0\.sock, host \S+ pid \d+\)/);
    // The first is untouched.
    t.regex((await etcd.client.get(`${prefix}/alive/same`).string()) ?? '', /kv0\.sock/);
  } finally {
    await stopAll([first]);
  }
});

test.serial('clients follow members that join later', async (t) => {
  const prefix = '/test-join';
  const dir = clusterDir(t);
  const members = [await startMember(dir, 0, memberArgs(prefix, 'a'))];
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix } });
  try {
    t.deepEqual(kv.layout().map((m) => m.name), ['a']);
    const layouts: string[][] = [];
    kv.on('layout', (l) => layouts.push(l.map((m) => m.name)));
    members.push(await startMember(dir, 1, memberArgs(prefix, 'b')));
    const keys = Array.from({ length: 200 }, (_, i) => `j${i}`);
    // Routed by the controller's config, which places b a little after b registers.
    await eventually(async () => kv.layout().every((m) => m.status === 'ready') && kv.layout().length === 2 && keys.some((k) => kv.memberFor(k) === 'b'), 'b joined, is ready and placed');
    t.deepEqual(layouts[0], ['a', 'b']);
    await kv.putMany(keys.map((k) => [k, k]));
    t.true(keys.some((k) => kv.memberFor(k) === 'b') && keys.some((k) => kv.memberFor(k) === 'a'));
    t.deepEqual((await kv.getMany(keys)).map(String), keys);
  } finally {
    await kv.close();
    await stopAll(members);
  }
});

test.serial('etcd unreachable: the client and the server say so', async (t) => {
  const nobody = `http://127.0.0.1:${await freePort()}`;
  const error = await t.throwsAsync<KvError>(KvClient.connect({ etcd: { hosts: nobody }, timeoutMs: 1000 }));
  t.is(error?.code, 'KV_DISCONNECTED');
  t.regex(error!.message, /cannot read the cluster from etcd at http:\/\/127\.0\.0\.1:\d+/);
  const dir = clusterDir(t);
  const server = await kvServer(['--listen', `shm://${join(dir, 'x.sock')}`, '--memory', '64M', '--etcd', nobody]);
  t.is(server.code, 1);
  t.regex(server.stderr, /^kv-server: cannot register in etcd at http:\/\/127\.0\.0\.1:\d+/m);
});

test.serial('cluster flags without --etcd, and a bad --etcd, are usage errors', async (t) => {
  const dir = clusterDir(t);
  const listen = ['--listen', `shm://${join(dir, 'u.sock')}`, '--memory', '64M'];
  const cases: Array<[string[], RegExp]> = [
    [['--name', 'x'], /--name only means something with --etcd/],
    [['--advertise', 'rdma://10.0.0.1:7471'], /--advertise only means something with --etcd/],
    [['--zone', 'east'], /--zone only means something with --etcd/],
    [['--etcd', 'http://127.0.0.1:2379', '--zone', 'a b'], /--zone 'a b': use 1-64 of/],
    [['--etcd', 'localhost:2379'], /--etcd localhost:2379: expected http:\/\/host:port/],
    [['--etcd', 'http://127.0.0.1:2379', '--name', 'a/b'], /--name: member name 'a\/b'/],
    [['--etcd', 'http://127.0.0.1:2379', '--etcd-ttl', '500ms'], /--etcd-ttl: a whole number of seconds, at least 2s/],
  ];
  for (const [args, message] of cases) {
    const r = await kvServer([...listen, ...args]);
    t.is(r.code, 2, args.join(' '));
    t.regex(r.stderr, message);
  }
});

test.serial('a malformed registration is ignored: the member shows as down, the others serve', async (t) => {
  const prefix = '/test-bogus';
  const dir = clusterDir(t);
  const members = [await startMember(dir, 0, memberArgs(prefix, 'good'))];
  await etcd.client.put(`${prefix}/members/bogus`).value('{}');
  await etcd.client.put(`${prefix}/alive/bogus`).value('not json');
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix } });
  try {
    t.deepEqual(kv.layout().map((m) => [m.name, m.status]), [['bogus', 'down'], ['good', 'ready']]);
    t.is(kv.status, 'degraded');
    const keys = Array.from({ length: 50 }, (_, i) => `b${i}`);
    // Routed by the controller's config, which places bogus too (its record says nothing against it).
    await eventually(async () => keys.some((k) => kv.memberFor(k) === 'bogus'), 'the config places bogus');
    const onGood = keys.filter((k) => kv.memberFor(k) === 'good');
    const onBogus = keys.filter((k) => kv.memberFor(k) === 'bogus');
    await kv.putMany(onGood.map((k) => [k, k]));
    t.deepEqual((await kv.getMany(onGood)).map(String), onGood);
    const error = await t.throwsAsync<KvError>(kv.get(onBogus[0]!));
    t.is(error?.code, 'KV_DISCONNECTED');
    t.regex(error!.message, /hash slots \d+-\d+: replica bogus has no live registration/);
  } finally {
    await kv.close();
    await stopAll(members);
  }
});

test.serial('a member that joins while the client is still connecting and cannot be reached is retried in the background, never an unhandled rejection', async (t) => {
  // Before: open() left the joiner's first connect without a handler while the client's status was
  // 'connecting' (only start()'s own members are awaited), so its failure crashed the process: a
  // kv-server whose copier's client met it exited with "uncaught exception" in the Soft-RoCE guest.
  const prefix = '/test-join-while-connecting';
  const dir = clusterDir(t);
  // A member whose process is stopped: the kernel takes the client's connection, nothing answers it.
  const members = [await startMember(dir, 0, memberArgs(prefix, 'slow'))];
  t.teardown(() => stopAll(members));
  process.kill(members[0]!.process.child.pid!, 'SIGSTOP');
  t.teardown(() => void process.kill(members[0]!.process.child.pid!, 'SIGCONT'));
  const register = async (name: string, url: string) => {
    await etcd.client.put(`${prefix}/members/${name}`).value(JSON.stringify({ name, joined: new Date().toISOString() }));
    await etcd.client.put(`${prefix}/alive/${name}`).value(JSON.stringify({ url, pid: 1, host: 'test', started: new Date().toISOString() }));
  };
  const connecting = KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 3000, requireReady: false });
  await new Promise((resolve) => setTimeout(resolve, 500));
  await register('gone', `shm://${join(dir, 'nobody.sock')}`); // nothing listens: its connect fails at once
  const kv = await connecting;
  t.teardown(() => kv.close());
  await eventually(() => kv.layout().some((m) => m.name === 'gone'), 'the client follows the member that joined');
  t.not(kv.layout().find((m) => m.name === 'gone')!.status, 'ready');
  t.is(kv.status === 'closed', false);
});

test.serial('a member that joins while the client is connecting, and answers only after connect() returned, gets one session, not two', async (t) => {
  // Before: connect()'s last step sent every member not yet ready to keepTrying, also one whose first connect was
  // still waiting for its answer; both connects then succeeded, and the client held two sessions to the member
  // (the first one orphaned, its keepalive running).
  const prefix = '/test-join-while-connecting-twice';
  const dir = clusterDir(t);
  const slowMember = await startMember(dir, 0, memberArgs(prefix, 'slow'));
  const late = await startMember(dir, 1); // no etcd of its own: registered below, by hand, while the client connects
  const members = [slowMember, late];
  t.teardown(() => stopAll(members));
  for (const m of members) process.kill(m.process.child.pid!, 'SIGSTOP');
  t.teardown(() => members.forEach((m) => void process.kill(m.process.child.pid!, 'SIGCONT')));
  const connecting = KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 4000, requireReady: false });
  await new Promise((resolve) => setTimeout(resolve, 2000));
  // 'slow' keeps connect() waiting until its 4 s timeout; 'late' is dialled 2 s in, so it is still waiting then.
  await etcd.client.put(`${prefix}/members/late`).value(JSON.stringify({ name: 'late', joined: new Date().toISOString() }));
  await etcd.client.put(`${prefix}/alive/late`).value(JSON.stringify({ url: late.url, pid: 1, host: 'test', started: new Date().toISOString() }));
  const kv = await connecting;
  t.teardown(() => kv.close());
  t.not(kv.layout().find((m) => m.name === 'late')?.status, 'ready', 'late has not answered yet');
  await new Promise((resolve) => setTimeout(resolve, 500)); // a second connect, if any, is under way by now (its backoff: ≤ 100 ms)
  process.kill(late.process.child.pid!, 'SIGCONT');
  await eventually(() => kv.layout().find((m) => m.name === 'late')?.status === 'ready', 'late answers');
  await new Promise((resolve) => setTimeout(resolve, 1000)); // any second connect has been answered by now
  t.is((await stats(late)).clients, 1, 'one session to the member');
});
