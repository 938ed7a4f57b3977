// kvctl against clusters of real kv-server processes: --servers (layout,
// layout KEY, incr routing, stats, watch and its notification rates) and
// --etcd (layout and stats from the registrations, forget, watch following
// membership changes until Ctrl-C). Each test starts its own servers (the
// helpers' guard ends a server process after 60 s) and stops them at the end;
// etcd is Debian's etcd-server on loopback, started on first use.
import { setTimeout as sleep } from 'node:timers/promises';

import test, { type ExecutionContext } from 'ava';

import { KvClient } from '../../client/index.js';
import { type EtcdProcess, startEtcd } from '../helpers/etcd.js';
import { needing } from '../helpers/tools.js';
import { type ServerProcess, freePort, kvctl, socketUrl, startKvctl, startServerProcess } from './helpers.js';

/** The --etcd tests: skipped (or under CI failed) where etcd is missing. */
const etcdTest = needing(test, 'etcd');

interface Server {
  url: string;
  metrics: string;
  process: ServerProcess;
}

/** Starts servers one after the other (each takes a free port), all stopped when the test ends. */
async function startServers(t: ExecutionContext, count: number, extra: (i: number) => string[] = () => []): Promise<Server[]> {
  const servers: Server[] = [];
  t.teardown(() => Promise.all(servers.map((s) => s.process.stop('SIGKILL'))).then(() => undefined));
  for (let i = 0; i < count; i++) servers.push(await startServer(extra(i)));
  return servers;
}

/** A server at a fresh socket and metrics port, or at `at` (chosen before it starts). */
async function startServer(extra: string[], at?: { url: string; port: number }): Promise<Server> {
  const url = at?.url ?? socketUrl();
  const port = at?.port ?? (await freePort());
  const process = await startServerProcess(['--listen', url, '--memory', '64M', '--metrics-port', String(port), '--log-level', 'warn', ...extra]);
  return { url, metrics: `http://127.0.0.1:${port}`, process };
}

interface LayoutJson {
  slots: number;
  members: Array<{ name: string; url?: string; state: string; slots: number; percent: number }>;
  key?: { key: string; slot: number; member: string | null };
}

/** Reads `key` from one server alone (no slot map involved). */
async function readFrom(url: string, read: (kv: KvClient) => Promise<unknown>): Promise<unknown> {
  const kv = await KvClient.connect({ url, reconnect: false });
  try {
    return await read(kv);
  } finally {
    await kv.close();
  }
}

test('usage errors for cluster targets exit 2 with one line', async (t) => {
  const url = socketUrl();
  const metrics = 'http://127.0.0.1:9';
  const cases: Array<[string[], RegExp]> = [
    [['--url', url, '--servers', url, 'get', 'k'], /^kvctl: --url and --servers exclude each other: give one target\n$/],
    [['--servers', url, '--etcd', 'http://127.0.0.1:1', 'layout'], /^kvctl: --servers and --etcd exclude each other/],
    [['--servers', `${url},${url}`, 'get', 'k'], /^kvctl: --servers lists shm:\/\/\S+ twice\n$/],
    [['--servers', `${url},`, 'get', 'k'], /^kvctl: --servers: an empty entry/],
    [['--servers', 'rdma://x', 'get', 'k'], /^kvctl: --servers rdma:\/\/x: name a port/],
    [['--etcd', 'localhost:2379', 'layout'], /^kvctl: --etcd localhost:2379: expected http:\/\/host:port/],
    [['--etcd', 'http://127.0.0.1:1', '--etcd-prefix', 'rdma-kv', 'layout'], /^kvctl: --etcd-prefix rdma-kv: expected an absolute key prefix/],
    [['--etcd-prefix', '/x', 'layout'], /^kvctl: --etcd-prefix only means something with --etcd\n$/],
    [['--etcd', 'http://127.0.0.1:1', '--etcd-prefix', '/x.load', 'layout'], /^kvctl: --etcd-prefix \/x\.load: a prefix may not end in '\.load'/],
    // Options that do not go together are refused before etcd is dialed (nothing listens at :1).
    [['--etcd', 'http://127.0.0.1:1', 'rebalance', '--cancel', '--by', 'bytes'], /^kvctl: --cancel takes no other rebalance option but --json\n$/],
    [['--etcd', 'http://127.0.0.1:1', 'rebalance', '--auto', 'on', '--by', 'count'], /^kvctl: --auto is given alone/],
    [['--etcd', 'http://127.0.0.1:1', 'rebalance', '--tolerance', '5'], /^kvctl: --tolerance goes with --by bytes\n$/],
    [['--etcd', 'http://127.0.0.1:1', 'drain', 'm0', '--cancel', '--max-mbps', '1'], /^kvctl: --max-mbps and --cancel exclude each other\n$/],
    [['--servers', `${url},${url}.b`, '--metrics', metrics, 'stats'], /^kvctl: --metrics: 1 address for 2 servers/],
    [['--servers', `${url},${url}.b`, 'stats'], /^kvctl: stats with --servers needs --metrics/],
    [['--url', url, '--metrics', `${metrics},${metrics}`, 'stats'], /^kvctl: --metrics: one address with --url/],
    [['--etcd', 'http://127.0.0.1:1', '--metrics', metrics, 'stats'], /^kvctl: --metrics: with --etcd each member's metrics address comes from/],
    [['--url', url, 'forget', 'kv-1'], /^kvctl: forget works on an etcd cluster: give --etcd/],
    [['--etcd', 'http://127.0.0.1:1', 'forget', 'no/such'], /^kvctl: member name 'no\/such': use 1-128 of/],
    [['--url', url, 'watch', '--interval', 'soon'], /^kvctl: --interval: 'soon' is not a duration/],
    [['--url', url, 'watch', '--interval', '0'], /^kvctl: --interval: must be more than 0/],
    [['--url', url, 'watch', '--count', '0'], /^kvctl: --count: 0 is out of range/],
    [['--url', url, 'layout', '--count', '2'], /^kvctl: Unknown argument: count/],
  ];
  for (const [args, reason] of cases) {
    const result = await kvctl(args);
    t.is(result.code, 2, `kvctl ${args.join(' ')}: ${result.stderr}`);
    t.regex(result.stderr, reason);
    t.is(result.stderr.split('\n').filter(Boolean).length, 1, result.stderr);
    t.is(result.stdout, '');
  }
});

test('--servers: layout shows three members with about a third each; layout KEY names the member that holds the key', async (t) => {
  const servers = await startServers(t, 3);
  const target = ['--servers', servers.map((s) => s.url).join(',')];
  const [json, table, put, incr] = await Promise.all([
    kvctl([...target, '--json', 'layout']),
    kvctl([...target, 'layout']),
    kvctl([...target, 'put', 'user:42', 'Ada']),
    kvctl([...target, 'incr', 'counter', '7']),
  ]);
  t.is(json.code, 0, json.stderr);
  const layout = JSON.parse(json.stdout) as LayoutJson;
  t.is(layout.slots, 16384);
  t.deepEqual(layout.members.map((m) => m.name), servers.map((s) => s.url).sort());
  t.is(layout.members.reduce((sum, m) => sum + m.slots, 0), 16384);
  for (const m of layout.members) {
    t.is(m.url, m.name);
    t.is(m.state, 'ready');
    t.true(m.percent > 30 && m.percent < 37, `${m.name} owns ${m.percent}%`);
    t.is(m.percent, Math.round((m.slots / 16384) * 10_000) / 100);
  }
  const rows = table.stdout.trimEnd().split('\n');
  t.regex(rows[0]!, /^MEMBER\s+STATE\s+SLOTS\s+SHARE$/);
  t.is(rows.length, 5, table.stdout);
  for (const m of layout.members) t.true(rows.some((r) => new RegExp(`^${m.name}\\s+ready\\s+${m.slots}\\s+${m.percent.toFixed(1)}%$`).test(r)), `${m.name} in\n${table.stdout}`);
  t.is(rows[4], '16384 slots over 3 members');

  t.is(put.code, 0, put.stderr);
  t.is(incr.code, 0, incr.stderr);
  t.is(incr.stdout, '7\n');
  for (const [key, read, expected] of [
    ['user:42', (kv: KvClient) => kv.get('user:42').then((v) => v?.toString()), 'Ada'],
    ['counter', (kv: KvClient) => kv.incr('counter', 0).then(String), '7'],
  ] as const) {
    const where = await kvctl([...target, '--json', 'layout', key]);
    const owner = (JSON.parse(where.stdout) as LayoutJson).key!;
    t.is(owner.key, key);
    t.true(servers.some((s) => s.url === owner.member), `${key} → ${owner.member}`);
    // The member layout names holds the key, and no other server does.
    for (const server of servers) {
      if (server.url === owner.member) t.is(await readFrom(server.url, read), expected, `${key} on ${server.url}`);
      else t.is(await readFrom(server.url, (kv) => kv.get(key)), undefined, `${key} not on ${server.url}`);
    }
    const human = await kvctl([...target, 'layout', key]);
    t.is(human.stdout, `${key}: slot ${owner.slot}, member ${owner.member} (ready)\n`);
  }
});

test('--servers: a cluster that is all down still has a map for layout, and watch sees its members come up', async (t) => {
  const planned = [0, 1].map(() => ({ url: socketUrl(), port: 0 }));
  for (const p of planned) p.port = await freePort();
  const target = ['--servers', planned.map((p) => p.url).join(','), '--metrics', planned.map((p) => `http://127.0.0.1:${p.port}`).join(',')];

  const layout = await kvctl([...target, '--json', 'layout']);
  t.is(layout.code, 0, layout.stderr);
  const map = JSON.parse(layout.stdout) as LayoutJson;
  t.deepEqual(map.members.map((m) => m.name), planned.map((p) => p.url).sort());
  t.is(map.members.reduce((sum, m) => sum + m.slots, 0), 16384);
  for (const m of map.members) t.not(m.state, 'ready', `${m.name} is down`);
  // Operations still fail, at once and with the reason.
  const get = await kvctl([...target, 'get', 'k']);
  t.is(get.code, 1);
  t.regex(get.stderr, /KV_DISCONNECTED/);

  const watch = startKvctl([...target, 'watch', '--interval', '200ms']);
  t.teardown(() => watch.stop('SIGKILL').then(() => undefined));
  await watch.waitForLine(/^\S+ {2}\S+ {2}(down|reconnecting)\s+/);
  const servers: Server[] = [];
  t.teardown(() => Promise.all(servers.map((s) => s.process.stop('SIGKILL'))).then(() => undefined));
  for (const p of planned) {
    const from = watch.lines.length;
    servers.push(await startServer([], p));
    const name = p.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    await watch.waitForLine(new RegExp(`^\\S+ {2}member ${name}: ready$`), from);
    await watch.waitForLine(new RegExp(`^\\S+ {2}${name} {2}ready\\s+items 0`), from);
  }
  const end = await watch.stop('SIGINT');
  t.is(end.code, 0, end.stderr);
});

const WATCH_LINE = /^\d\d:\d\d:\d\d {2}(\S+)\s+(ready|reconnecting|down)\s+items (\d+) {2}clients (\d+) {2}load (\d+\.\d\d)% {2}notifications (\d+\.\d|-)\/s$/;

interface WatchJson {
  type: string;
  time: string;
  refresh: number;
  members: Array<{
    name: string;
    url: string;
    state: string;
    slots: number;
    metrics?: string;
    stats?: { items: number; clients: number; loadFactor: number; notificationsPerSecond: number | null };
    error?: string;
  }>;
}

test('--servers: stats and watch read every member; a put shows as notifications/s on its member only', async (t) => {
  const servers = await startServers(t, 3);
  const target = ['--servers', servers.map((s) => s.url).join(','), '--metrics', servers.map((s) => s.metrics).join(',')];
  // Keep writing to the first server (directly: no map involved) while the watches run.
  const writer = await KvClient.connect({ url: servers[0]!.url });
  let writing = true;
  const writes = (async () => {
    for (let i = 0; writing; i++) {
      await writer.put('hot', String(i));
      await sleep(5);
    }
  })();
  let human, json, stats, bare;
  try {
    [human, json, stats, bare] = await Promise.all([
      kvctl([...target, 'watch', '--count', '2', '--interval', '200ms']),
      kvctl([...target, '--json', 'watch', '--count', '2', '--interval', '200ms']),
      kvctl([...target, '--json', 'stats']),
      kvctl(['--servers', servers.map((s) => s.url).join(','), 'watch', '--count', '1', '--interval', '200ms']),
    ]);
  } finally {
    writing = false;
    await writes;
    await writer.close();
  }
  const hot = servers[0]!.url;

  t.is(human.code, 0, human.stderr);
  const lines = human.stdout.trimEnd().split('\n');
  t.is(lines.length, 6, human.stdout);
  const parsed = lines.map((line) => {
    const m = WATCH_LINE.exec(line);
    t.truthy(m, line);
    return { name: m?.[1], state: m?.[2], clients: Number(m?.[4]), rate: m?.[6] };
  });
  for (const server of servers) {
    const mine = parsed.filter((p) => p.name === server.url);
    t.is(mine.length, 2, `two refreshes of ${server.url}`);
    for (const p of mine) {
      t.is(p.state, 'ready');
      t.true(p.clients >= 1, 'watch itself is a client');
      if (server.url !== hot) t.is(p.rate, '0.0', `nothing writes to ${server.url}`);
    }
    if (server.url === hot) t.true(mine.some((p) => Number(p.rate) > 0), `a rate on ${hot}: ${lines.join('\n')}`);
  }

  t.is(json.code, 0, json.stderr);
  const docs = json.stdout.trimEnd().split('\n').map((line) => JSON.parse(line) as WatchJson);
  t.deepEqual(docs.map((d) => [d.type, d.refresh]), [['refresh', 1], ['refresh', 2]]);
  for (const doc of docs) {
    t.false(Number.isNaN(Date.parse(doc.time)));
    t.deepEqual(doc.members.map((m) => m.name), servers.map((s) => s.url).sort());
    for (const m of doc.members) {
      t.is(m.metrics, servers.find((s) => s.url === m.name)!.metrics);
      t.is(m.state, 'ready');
      t.is(typeof m.stats?.items, 'number');
      t.true(m.stats!.loadFactor >= 0 && m.stats!.loadFactor < 1);
      t.is(typeof m.stats!.notificationsPerSecond, 'number');
      if (m.name !== hot) t.is(m.stats!.notificationsPerSecond, 0);
    }
  }
  t.true(docs.some((d) => d.members.find((m) => m.name === hot)!.stats!.notificationsPerSecond! > 0), json.stdout);
  const hotItems = docs[1]!.members.find((m) => m.name === hot)!.stats!.items;
  t.is(hotItems, 1, 'one key, rewritten');

  t.is(stats.code, 0, stats.stderr);
  const all = JSON.parse(stats.stdout) as { members: Array<{ name: string; metrics: string; stats: Record<string, number> }> };
  t.deepEqual(all.members.map((m) => [m.name, m.metrics, m.stats.regionBytes]), servers.map((s) => [s.url, s.metrics, 64 << 20]));

  // Without --metrics a --servers watch still shows each member's state.
  t.is(bare.code, 0, bare.stderr);
  t.deepEqual(bare.stdout.trimEnd().split('\n').map((l) => l.replace(/^\S+ {2}/, '').replace(/\s+/g, ' ')), servers.map((s) => `${s.url} ready no stats`).sort());
});

let etcdStarted: Promise<EtcdProcess> | undefined;
/** One etcd for the etcd tests, started on first use (the --servers tests do without). */
const etcd = () => (etcdStarted ??= startEtcd());
test.after.always(async () => {
  const started = await etcdStarted?.catch(() => undefined);
  await started?.stop();
});

const registered = (url: string, prefix: string) => (name: string) => ['--etcd', url, '--etcd-prefix', prefix, '--etcd-ttl', '2s', '--name', name];

etcdTest('--etcd: layout and stats find members in etcd; forget refuses a live member and forgets a stopped one', async (t) => {
  const { url: etcdUrl, client } = await etcd();
  const prefix = '/kvctl-forget';
  const servers = await startServers(t, 3, (i) => registered(etcdUrl, prefix)(`kv-${i}`));
  const target = ['--etcd', etcdUrl, '--etcd-prefix', prefix];

  const [layoutRun, statsRun, alive] = await Promise.all([kvctl([...target, '--json', 'layout']), kvctl([...target, '--json', 'stats']), kvctl([...target, 'forget', 'kv-1'])]);
  t.is(layoutRun.code, 0, layoutRun.stderr);
  const before = JSON.parse(layoutRun.stdout) as LayoutJson;
  t.deepEqual(before.members.map((m) => [m.name, m.url, m.state]), servers.map((s, i) => [`kv-${i}`, s.url, 'ready']));
  t.is(statsRun.code, 0, statsRun.stderr);
  const stats = JSON.parse(statsRun.stdout) as { members: Array<{ name: string; metrics: string; stats: { regionBytes: number } }> };
  t.deepEqual(stats.members.map((m) => [m.name, m.metrics, m.stats.regionBytes]), servers.map((s, i) => [`kv-${i}`, s.metrics, 64 << 20]));

  t.is(alive.code, 1);
  t.regex(alive.stderr, /^kvctl: 'kv-1' is alive \(at shm:\/\/\S+, host \S+ pid \d+\): stop it first, or give --force/);
  t.not(await client.get(`${prefix}/members/kv-1`).string(), null, 'still a member');

  // A clean stop revokes its lease: it is down, and may be forgotten.
  await servers[1]!.process.stop();
  t.is(await client.get(`${prefix}/alive/kv-1`).string(), null);
  const forgot = await kvctl([...target, 'forget', 'kv-1']);
  t.is(forgot.code, 0, forgot.stderr);
  const said = /^forgot member kv-1: its (\d+) slots \((\d+\.\d)%\) now belong to kv-0 \((\d+)\), kv-2 \((\d+)\)\.\nIts keys are lost to the cluster: with --replicas 1 they had no other copy\. Its region file still holds them/.exec(forgot.stdout);
  t.truthy(said, forgot.stdout);
  const [owned, toKv0, toKv2] = [Number(said?.[1]), Number(said?.[3]), Number(said?.[4])];
  t.is(owned, before.members[1]!.slots);
  t.is(toKv0 + toKv2, owned);
  t.is(await client.get(`${prefix}/members/kv-1`).string(), null);

  const after = JSON.parse((await kvctl([...target, '--json', 'layout'])).stdout) as LayoutJson;
  t.deepEqual(after.members.map((m) => [m.name, m.slots]), [['kv-0', before.members[0]!.slots + toKv0], ['kv-2', before.members[2]!.slots + toKv2]]);

  const again = await kvctl([...target, 'forget', 'kv-1']);
  t.is(again.code, 1);
  t.is(again.stderr, `kvctl: no member 'kv-1' under etcd prefix ${prefix} (members: kv-0, kv-2)\n`);

  // --force forgets a member that is running, and says so.
  const forced = await kvctl([...target, '--json', 'forget', 'kv-2', '--force']);
  t.is(forced.code, 0, forced.stderr);
  t.like(JSON.parse(forced.stdout), { forgotten: 'kv-2', slots: after.members[1]!.slots, movedTo: { 'kv-0': after.members[1]!.slots }, alive: true, members: ['kv-0'], keysLost: true });
  t.is(await client.get(`${prefix}/members/kv-2`).string(), null);
});

etcdTest('--etcd: watch prints member and layout changes as they happen, and Ctrl-C ends it with exit 0', async (t) => {
  const { url: etcdUrl } = await etcd();
  const prefix = '/kvctl-watch';
  const register = registered(etcdUrl, prefix);
  const servers = await startServers(t, 2, (i) => register(`kv-${i}`));
  const target = ['--etcd', etcdUrl, '--etcd-prefix', prefix];
  const watch = startKvctl([...target, 'watch', '--interval', '200ms']);
  t.teardown(() => watch.stop('SIGKILL').then(() => undefined));

  await watch.waitForLine(/^\S+ {2}kv-0 {2}ready\s+items 0 {2}clients \d+ {2}load 0\.00% {2}notifications 0\.0\/s$/);
  await watch.waitForLine(/^\S+ {2}kv-1 {2}ready\s+items/);

  // kv-1 stops: its connection drops, and without a registration it is down (no stats to read).
  let from = watch.lines.length;
  await servers[1]!.process.stop();
  await watch.waitForLine(/^\S+ {2}member kv-1: reconnecting$/, from);
  await watch.waitForLine(/^\S+ {2}kv-1 {2}down\s+no stats$/, from);

  // Forgotten: kv-0 takes every slot.
  from = watch.lines.length;
  const forgot = await kvctl([...target, 'forget', 'kv-1']);
  t.is(forgot.code, 0, forgot.stderr);
  await watch.waitForLine(/^\S+ {2}layout: 1 member: kv-0 \(16384 slots, 100\.0%\)$/, from);

  // A new member joins: the map changes again, and it shows up ready with stats.
  from = watch.lines.length;
  servers.push(await startServer(register('kv-2')));
  await watch.waitForLine(/^\S+ {2}layout: 2 members: kv-0 \(\d+ slots, \d+\.\d%\), kv-2 \(\d+ slots, \d+\.\d%\)$/, from);
  await watch.waitForLine(/^\S+ {2}kv-2 {2}ready\s+items 0 {2}clients \d+/, from);

  const end = await watch.stop('SIGINT');
  t.is(end.code, 0, end.stderr);
  t.is(end.signal, null);
});
