// kv-server's option parsers: sizes, durations, counts, listen URLs,
// the whole configuration, and the held-back log stream.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import { DEFAULTS, type RawServerArgs, resolveConfig } from '../../server/config.js';
import { StartupError, UsageError, formatBytes, parseCount, parseDuration, parseSize } from '../../protocol/operator-input.js';
import { checkListenUrl } from '../../protocol/providers.js';
import { HeldBackStream } from '../../server/logging.js';

test('sizes: bytes, binary units in any case, fractions that land on whole bytes', (t) => {
  const cases: Array<[string, number]> = [
    ['4096', 4096],
    ['0', 0],
    ['1GiB', 2 ** 30],
    ['512MiB', 512 * 2 ** 20],
    ['64M', 64 * 2 ** 20],
    ['64m', 64 * 2 ** 20],
    ['64MB', 64 * 2 ** 20],
    ['2k', 2048],
    ['1.5GiB', 1.5 * 2 ** 30],
    ['1 TiB', 2 ** 40],
    ['100B', 100],
  ];
  for (const [text, bytes] of cases) t.is(parseSize(text, '--memory'), bytes, text);
});

test('sizes: what is not a size is a UsageError naming the option', (t) => {
  for (const text of ['', 'GiB', '1PiB', '-1G', '1e9', '12 parsecs', '0x100', '1.1', '1,5G']) {
    const error = t.throws(() => parseSize(text, '--memory'), { instanceOf: UsageError }, text);
    t.true(error.message.startsWith('--memory: '), error.message);
  }
  t.throws(() => parseSize('99999999T', '--memory'), { instanceOf: UsageError, message: /too large/ });
});

test('durations: milliseconds by default, ms/s/m/h suffixes', (t) => {
  const cases: Array<[string, number]> = [
    ['1000', 1000],
    ['250ms', 250],
    ['2s', 2000],
    ['1.5s', 1500],
    ['2m', 120_000],
    ['1h', 3_600_000],
    ['0', 0],
  ];
  for (const [text, ms] of cases) t.is(parseDuration(text, '--grace-ms'), ms, text);
  for (const text of ['soon', '1d', '-5', '0.5ms', '']) t.throws(() => parseDuration(text, '--grace-ms'), { instanceOf: UsageError, message: /^--grace-ms: / });
});

test('counts: whole numbers within range', (t) => {
  t.is(parseCount('256', '--max-clients', 1, 65536), 256);
  t.throws(() => parseCount('0', '--max-clients', 1, 65536), { message: /out of range \(1 to 65536\)/ });
  t.throws(() => parseCount('2.5', '--max-clients', 1, 65536), { message: /not a whole number/ });
  t.throws(() => parseCount('lots', '--max-clients', 1, 65536), { instanceOf: UsageError });
});

test('listen URLs: shm with an absolute path, rdma with host and port, nothing else', (t) => {
  t.is(checkListenUrl('shm:///run/rdma-kv/kv.sock'), 'shm:///run/rdma-kv/kv.sock');
  t.is(checkListenUrl('SHM:///tmp/a.sock'), 'shm:///tmp/a.sock');
  t.is(checkListenUrl('rdma://0.0.0.0:7471'), 'rdma://0.0.0.0:7471');
  t.is(checkListenUrl('rdma://10.0.0.5:0'), 'rdma://10.0.0.5:0');
  t.is(checkListenUrl('rdma://[::]:7471'), 'rdma://[::]:7471');
  t.is(checkListenUrl('rdma://node-3.cluster:7471/'), 'rdma://node-3.cluster:7471');
  const bad: Array<[string, RegExp]> = [
    ['tcp://127.0.0.1:7471', /no provider for this URL/],
    ['/run/rdma-kv/kv.sock', /no provider for this URL/],
    ['shm://kv.sock', /absolute socket path/],
    [`shm:///${'x'.repeat(120)}.sock`, /at most 107/],
    ['shm:///run/rdma-kv/', /names a directory/],
    ['rdma://0.0.0.0', /name a port/],
    ['rdma://0.0.0.0:99999', /out of range/],
    ['rdma://0.0.0.0:port', /expected rdma:\/\/host:port/],
    ['rdma://a:b:c', /expected rdma:\/\/host:port/],
    ['rdma://:7471', /expected rdma:\/\/host:port/],
    ['rdma://h:7471/path', /expected rdma:\/\/host:port/],
  ];
  for (const [url, reason] of bad) t.throws(() => checkListenUrl(url), { instanceOf: UsageError, message: reason }, url);
});

const defaults = (): RawServerArgs => ({
  listen: [...DEFAULTS.listen],
  memory: DEFAULTS.memory,
  maxValue: DEFAULTS.maxValue,
  keepaliveMs: DEFAULTS.keepaliveMs,
  maxClients: DEFAULTS.maxClients,
  metricsPort: DEFAULTS.metricsPort,
  metricsHost: DEFAULTS.metricsHost,
  logLevel: DEFAULTS.logLevel,
});

test('the defaults make a valid configuration: 1 GiB on shm:///run/rdma-kv/kv.sock, no token, no metrics', (t) => {
  t.deepEqual(resolveConfig(defaults()), {
    listen: ['shm:///run/rdma-kv/kv.sock'],
    memoryBytes: 2 ** 30,
    namespaces: [],
    token: undefined,
    tokenFile: undefined,
    buckets: undefined,
    maxValueBytes: 2 ** 20,
    graceMs: 1000,
    keepaliveMs: 1000,
    maxClients: 256,
    metricsPort: 0,
    metricsHost: '127.0.0.1',
    logLevel: 'info',
    regionFile: undefined,
    etcd: undefined,
    eviction: 'none',
    evictionHigh: 90,
    evictionLow: 80,
    expirySweepMs: 1000,
    replicas: 1,
  });
});

test('resolveConfig: --replicas 1 to 3 and --zone with --etcd; above 1 only with the experimental switch (StartupError: exit 1)', (t) => {
  const etcd = { ...defaults(), etcd: ['http://127.0.0.1:2379'], name: 'a' };
  t.is(resolveConfig({ ...etcd, replicas: '1', zone: 'east' }).replicas, 1);
  t.is(resolveConfig({ ...etcd, zone: 'east' }).etcd?.zone, 'east');
  const refused = t.throws(() => resolveConfig({ ...etcd, replicas: '2' }), { instanceOf: StartupError });
  t.is(refused?.message, "--replicas 2 is experimental (issue 17): writes are replicated, a dead member's hash slots fail over to their backups, a member cut off from etcd fences itself, hash slots short of a replica are copied back (repair) and locks are replicated, but placement never changes after a failover (members join only as repair targets) and a returning member is copied every key; RKV_EXPERIMENTAL_REPLICAS=1 runs it anyway");
  t.throws(() => resolveConfig({ ...etcd, replicas: '1.5' }), { instanceOf: StartupError, message: /--replicas must be a whole number from 1 to 3/ });
  t.throws(() => resolveConfig({ ...defaults(), zone: 'east' }), { instanceOf: UsageError, message: '--zone only means something with --etcd' });
  // <prefix>.load/ holds a cluster's load records: no cluster may live there.
  t.throws(() => resolveConfig({ ...etcd, etcdPrefix: '/rdma-kv.load' }), { instanceOf: UsageError, message: /^--etcd-prefix \/rdma-kv\.load: a prefix may not end in '\.load'/ });
  t.is(resolveConfig({ ...etcd, etcdPrefix: '/rdma-kv.loader' }).etcd?.prefix, '/rdma-kv.loader');
});

// With eviction every miss of a cache frees a block, and a grace period of them is heap no item
// can use: the default is 100 ms there (docs/operations.md, --grace-ms), 1 s without; one given wins.
test('resolveConfig: --grace-ms defaults to 1000 without eviction and 100 with it; a given one is kept', (t) => {
  t.is(resolveConfig({ ...defaults(), eviction: 'none' }).graceMs, 1000);
  t.is(resolveConfig({ ...defaults(), eviction: 'lru' }).graceMs, 100);
  t.is(resolveConfig({ ...defaults(), eviction: 'lfu' }).graceMs, 100);
  t.is(resolveConfig({ ...defaults(), eviction: 'lfu', graceMs: '1s' }).graceMs, 1000);
  t.is(resolveConfig({ ...defaults(), graceMs: '250ms' }).graceMs, 250);
});

test('resolveConfig: --max-value reaches 127 MiB (the slot\'s coarse length), given the memory for it', (t) => {
  t.is(resolveConfig({ ...defaults(), memory: '320MiB', maxValue: '64MiB' }).maxValueBytes, 64 << 20);
  t.is(resolveConfig({ ...defaults(), memory: '600MiB', maxValue: '127MiB' }).maxValueBytes, 127 << 20);
});

test('resolveConfig: the first thing wrong, as a UsageError', (t) => {
  const bad: Array<[Partial<RawServerArgs>, RegExp]> = [
    [{ listen: [] }, /at least one URL/],
    [{ listen: ['shm:///a.sock', 'shm:///a.sock'] }, /given twice/],
    [{ memory: '1MiB' }, /memory too small/],
    [{ memory: '1GiB', maxValue: '128MiB' }, /at most 133169152 bytes \(127 MiB; got 134217728/],
    [{ memory: '64M', maxValue: '64MiB' }, /memory too small/], // the heap holds at least 4 of the largest items
    [{ buckets: '1000' }, /not a power of two/],
    [{ buckets: '1' }, /out of range/],
    [{ maxValue: '0' }, /at least 1 byte/],
    [{ keepaliveMs: '5' }, /at least 10 ms/],
    [{ maxClients: '0' }, /--max-clients: 0 is out of range/],
    [{ metricsPort: '70000' }, /--metrics-port: 70000 is out of range/],
    [{ token: '  ' }, /must not be empty/],
    [{ token: 'a', tokenFile: '/x' }, /exclude each other/],
    [{ namespace: ['billing'] }, /--namespace billing: expected NAME:SIZE/],
    [{ namespace: ['bil/ling:1GiB'] }, /--namespace bil\/ling:1GiB: namespace 'bil\/ling': a name is letters/],
    [{ namespace: ['default:1GiB'] }, /the default namespace is always there; --memory sizes it/],
    [{ namespace: ['a:64MiB', 'a:32MiB'] }, /--namespace a is given twice/],
    [{ namespace: ['a:lots'] }, /--namespace a/],
    [{ namespace: ['a:1MiB'] }, /--namespace a: memory too small/],
  ];
  for (const [change, reason] of bad) {
    t.throws(() => resolveConfig({ ...defaults(), ...change }), { instanceOf: UsageError, message: reason }, JSON.stringify(change));
  }
});

test('resolveConfig: --namespace NAME:SIZE, and a token file\'s namespaces must be hosted (StartupError)', (t) => {
  const config = resolveConfig({ ...defaults(), memory: '64MiB', namespace: ['billing:128MiB', 'search.v2:64MiB'] });
  t.deepEqual(config.namespaces, [{ name: 'billing', memoryBytes: 128 << 20 }, { name: 'search.v2', memoryBytes: 64 << 20 }]);
  const file = join(mkdtempSync(join(tmpdir(), 'rkv-cfg-')), 'tokens');
  writeFileSync(file, 'a write billing\nb read\n', { mode: 0o600 });
  t.deepEqual(resolveConfig({ ...defaults(), memory: '64MiB', namespace: ['billing:64MiB'], tokenFile: file }).tokenFile?.entries.map((e) => e.namespace), ['billing', 'default']);
  const error = t.throws(() => resolveConfig({ ...defaults(), memory: '64MiB', tokenFile: file }), { instanceOf: StartupError });
  t.is(error?.message, `--token-file ${file}: a token for namespace 'billing', which this server does not host (it hosts default): add --namespace billing:SIZE, or fix the line`);
});

test('formatBytes: binary units, one decimal at most', (t) => {
  t.is(formatBytes(1000), '1000 B');
  t.is(formatBytes(2 ** 30), '1 GiB');
  t.is(formatBytes(1.5 * 2 ** 20), '1.5 MiB');
  t.is(formatBytes(1004515328), '958 MiB');
});

test('HeldBackStream: holds lines until release, drops them on discard', (t) => {
  const out: string[] = [];
  const held = new HeldBackStream({ write: (line) => void out.push(line) });
  held.write('a');
  held.write('b');
  t.deepEqual(out, []);
  held.release();
  t.deepEqual(out, ['a', 'b']);
  held.write('c');
  t.deepEqual(out, ['a', 'b', 'c']);
  const dropped: string[] = [];
  const other = new HeldBackStream({ write: (line) => void dropped.push(line) });
  other.write('x');
  other.discard();
  other.write('y');
  t.deepEqual(dropped, ['y']);
});
