// kvctl against a running kv-server process: put/get/del round trips, a
// missing key, stdin values, --json, tokens, stats, incr, layout of one
// server, and its error lines. Clusters: kvctl-cluster.test.ts.
import { chmodSync, writeFileSync } from 'node:fs';

import test from 'ava';

import { loadTokenFile } from '../../protocol/tokens.js';
import { type ServerProcess, freePort, kvctl, socketPath, socketUrl, startServerProcess } from './helpers.js';

let server: ServerProcess;
let url: string;
let metrics: string;
const TOKEN = 'kvctl-test-token';

test.before(async () => {
  url = socketUrl();
  const port = await freePort();
  metrics = `http://127.0.0.1:${port}`;
  server = await startServerProcess(['--listen', url, '--memory', '64M', '--token', TOKEN, '--metrics-port', String(port)]);
});

test.after.always(async () => {
  await server?.stop();
});

const ctl = (args: string[], stdin?: Buffer | string) => kvctl(['--url', url, '--token', TOKEN, ...args], { stdin });

test('put, get, del round trip; get and del of a missing key exit 1 with nothing on stdout', async (t) => {
  const put = await ctl(['put', 'greeting', 'hello, world']);
  t.is(put.code, 0, put.stderr);
  t.is(put.stdout, '');
  const get = await ctl(['get', 'greeting']);
  t.is(get.code, 0, get.stderr);
  t.is(get.stdout, 'hello, world'); // raw bytes: no newline when stdout is not a terminal
  const del = await ctl(['del', 'greeting']);
  t.is(del.code, 0, del.stderr);
  const missing = await ctl(['get', 'greeting']);
  t.is(missing.code, 1);
  t.is(missing.stdout, '');
  t.is(missing.stderr, 'kvctl: not found: greeting\n');
  const again = await ctl(['delete', 'greeting']);
  t.is(again.code, 1);
  t.is(again.stderr, 'kvctl: not found: greeting\n');
});

test('put KEY - reads binary bytes from stdin; get writes them back unchanged', async (t) => {
  const bytes = Buffer.from([0, 1, 2, 255, 254, 10, 13, 0]);
  const put = await ctl(['put', 'binary', '-'], bytes);
  t.is(put.code, 0, put.stderr);
  const get = await ctl(['get', 'binary']);
  t.deepEqual(get.stdoutBytes, bytes);
  const json = await ctl(['--json', 'get', 'binary']);
  const doc = JSON.parse(json.stdout) as { key: string; value: string; encoding: string; version: string };
  t.is(doc.encoding, 'base64');
  t.deepEqual(Buffer.from(doc.value, 'base64'), bytes);
  t.regex(doc.version, /^\d+$/);
});

test('--json: one document per command; words after -- may start with a dash', async (t) => {
  const put = await ctl(['--json', 'put', '--', '-dash-key', '-1']);
  t.is(put.code, 0, put.stderr);
  t.deepEqual(JSON.parse(put.stdout), { key: '-dash-key', stored: true, bytes: 2 });
  const get = await ctl(['get', '--json', '--', '-dash-key']);
  t.like(JSON.parse(get.stdout), { key: '-dash-key', value: '-1', encoding: 'utf8' });
  const del = await ctl(['del', '--json', '--', '-dash-key']);
  t.deepEqual(JSON.parse(del.stdout), { key: '-dash-key', deleted: true });
});

test('stats reads /stats; --json gives the server\'s numbers', async (t) => {
  await ctl(['put', 'counted', 'x']);
  const json = await kvctl(['--metrics', metrics, 'stats', '--json']);
  t.is(json.code, 0, json.stderr);
  const stats = JSON.parse(json.stdout) as Record<string, number>;
  const direct = (await (await fetch(`${metrics}/stats`)).json()) as Record<string, number>;
  t.is(stats.regionBytes, 64 << 20);
  t.deepEqual(Object.keys(stats).sort(), Object.keys(direct).sort());
  t.true(stats.items! >= 1);
  const table = await kvctl(['--metrics', metrics, 'stats']);
  t.is(table.code, 0);
  t.regex(table.stdout, /^regionBytes\s+67108864 \(64 MiB\)$/m);
  t.regex(table.stdout, /^items\s+\d+$/m);
});

test('--token-file works; a wrong token exits 1 with KV_AUTH', async (t) => {
  const file = `${socketPath(url)}.kvctl-token`;
  writeFileSync(file, `${TOKEN}\n`);
  const ok = await kvctl(['--url', url, '--token-file', file, 'put', 'via-file', 'yes']);
  t.is(ok.code, 0, ok.stderr);
  const wrong = await kvctl(['--url', url, '--token', 'nope', 'get', 'via-file']);
  t.is(wrong.code, 1);
  t.is(wrong.stdout, '');
  t.regex(wrong.stderr, /^kvctl: .*rejected the token \(KV_AUTH\)\n$/);
});

test('--token-file readable by others: the server\'s one-line warning on stderr, and the command runs; 0600: no warning', async (t) => {
  const file = `${socketPath(url)}.kvctl-token-mode`;
  writeFileSync(file, `${TOKEN} write\n`);
  chmodSync(file, 0o644);
  const open = await kvctl(['--url', url, '--token-file', file, 'put', 'via-open-file', 'yes']);
  t.is(open.code, 0, open.stderr);
  t.is(open.stderr, `kvctl: warning: ${loadTokenFile(file).warning}\n`);
  t.regex(open.stderr, /^kvctl: warning: --token-file .* is readable by everyone \(mode 644\): .*chmod 600 it\n$/);
  chmodSync(file, 0o600);
  const closed = await kvctl(['--url', url, '--token-file', file, 'get', 'via-open-file']);
  t.is(closed.code, 0, closed.stderr);
  t.is(closed.stdout, 'yes');
  t.is(closed.stderr, '');
});

test('errors: one line, exit 1 for failures and 2 for a bad command line', async (t) => {
  const closed = await freePort();
  const cases: Array<[string[], number, RegExp]> = [
    [['--url', `${url}.absent`, 'get', 'k'], 1, /^kvctl: (cannot connect to|no server listens on) shm:\/\/.*\.absent/],
    [['--metrics', `http://127.0.0.1:${closed}`, 'stats'], 1, /^kvctl: cannot reach http:\/\/127\.0\.0\.1:\d+\/stats: connection refused/],
    [['--metrics', 'http://127.0.0.1:1', 'stats'], 1, /^kvctl: cannot reach http:\/\/127\.0\.0\.1:1\/stats: bad port/],
    [['--url', url, 'frobnicate'], 2, /^kvctl: Unknown argument: frobnicate/],
    [['--url', url, 'get'], 2, /^kvctl: Missing required argument: key/],
    [['--url', 'tcp://x', 'get', 'k'], 2, /^kvctl: --url tcp:\/\/x: no provider/],
    [['--url', url, 'get', 'k', '--bogus'], 2, /^kvctl: Unknown argument: bogus/],
    [[], 2, /^kvctl: name a command/],
  ];
  for (const [args, code, reason] of cases) {
    const result = await kvctl(args);
    t.is(result.code, code, `kvctl ${args.join(' ')}: ${result.stderr}`);
    t.regex(result.stderr, reason);
    t.is(result.stderr.split('\n').filter(Boolean).length, 1, result.stderr);
    t.false(result.stderr.includes('    at '));
  }
});

test('a misspelled option exits 2 with one line naming the option meant, before connecting', async (t) => {
  const cases: Array<[string[], string]> = [
    [['--jsn', 'get', 'k'], 'kvctl: unknown option --jsn: did you mean --json?\n'],
    [['get', 'k', '--tokn', 'secret'], 'kvctl: unknown option --tokn: did you mean --token?\n'],
    [['--tokenfile', '/dev/null', 'get', 'k'], 'kvctl: unknown option --tokenfile: did you mean --token-file?\n'],
    [['--timeout-m=100', 'get', 'k'], 'kvctl: unknown option --timeout-m: did you mean --timeout-ms?\n'],
    [['--no-jsn', 'get', 'k'], 'kvctl: unknown option --no-jsn: did you mean --no-json?\n'],
    [['watch', '--intreval', '2s'], 'kvctl: unknown option --intreval: did you mean --interval?\n'],
    [['forget', 'kv-1', '--froce'], 'kvctl: unknown option --froce: did you mean --force?\n'],
    // Options of another command are not suggested; nothing close is yargs' own line.
    [['layout', '--intreval', '2s'], 'kvctl: Unknown argument: intreval (see kvctl --help)\n'],
    [['get', 'k', '--bogus'], 'kvctl: Unknown argument: bogus (see kvctl --help)\n'],
  ];
  for (const [args, line] of cases) {
    // The socket does not exist: the usage error must come first.
    const result = await kvctl(['--url', `${url}.absent`, ...args]);
    t.is(result.code, 2, `kvctl ${args.join(' ')}: ${result.stderr}`);
    t.is(result.stderr, line);
    t.is(result.stdout, '');
  }
  // After --, words that look like options are keys and values.
  const put = await ctl(['put', '--', '--jsn', 'v']);
  t.is(put.code, 0, put.stderr);
  t.is((await ctl(['get', '--', '--jsn'])).stdout, 'v');
});

test('--help lists the commands and every option with its default', async (t) => {
  const { code, stdout } = await kvctl(['--help']);
  t.is(code, 0);
  for (const command of ['get <key>', 'put <key> <value>', 'del <key>', 'incr <key> [delta]', 'stats', 'layout [key]', 'watch', 'forget <name>']) {
    t.true(stdout.includes(`kvctl ${command}`), command);
  }
  for (const option of ['url', 'servers', 'etcd', 'etcd-prefix', 'token', 'token-file', 'metrics', 'timeout-ms', 'json']) {
    t.regex(stdout, new RegExp(`--${option}\\s[^\\n]*(\\n\\s{10,}[^\\n]*)*?\\[default: `), option);
  }
  const watch = await kvctl(['watch', '--help']);
  t.regex(watch.stdout, /--interval\s[^\n]*\[default: "?1s"?\]/);
  t.regex(watch.stdout, /--count\s[^\n]*\[default: until Ctrl-C\]/);
});

test('incr: creates the counter at DELTA, adds, subtracts; --json gives the value as a decimal string', async (t) => {
  const first = await ctl(['incr', 'visits']);
  t.is(first.code, 0, first.stderr);
  t.is(first.stdout, '1\n');
  const plus = await ctl(['incr', 'visits', '41']);
  t.is(plus.stdout, '42\n');
  const minus = await ctl(['incr', 'visits', '-2']);
  t.is(minus.stdout, '40\n');
  const json = await ctl(['--json', 'incr', 'visits', '0']);
  t.deepEqual(JSON.parse(json.stdout), { key: 'visits', value: '40' });
  // Unsigned, modulo 2^63 (protocol v2): below zero wraps around.
  const wrapped = await ctl(['incr', 'visits', '-41']);
  t.is(wrapped.stdout, `${2n ** 63n - 1n}\n`);
  const created = await ctl(['incr', 'stock', '18446744073709551615']);
  t.is(created.stdout, `${2n ** 63n - 1n}\n`);
});

test('incr: a bad DELTA exits 2 before connecting; a key holding a value exits 1 with KV_TYPE_MISMATCH', async (t) => {
  const bad: Array<[string, RegExp]> = [
    ['abc', /^kvctl: incr: DELTA 'abc' is not an integer\n$/],
    ['1.5', /^kvctl: incr: DELTA '1\.5' is not an integer\n$/],
    ['18446744073709551616', /^kvctl: incr: DELTA 18446744073709551616 is out of range \(-9223372036854775808 to 18446744073709551615\)\n$/],
    ['-9223372036854775809', /^kvctl: incr: DELTA -9223372036854775809 is out of range/],
  ];
  for (const [delta, reason] of bad) {
    // The socket does not exist: a usage error must come first.
    const result = await kvctl(['--url', `${url}.absent`, 'incr', 'k', delta]);
    t.is(result.code, 2, `${delta}: ${result.stderr}`);
    t.regex(result.stderr, reason);
    t.is(result.stdout, '');
  }
  t.is((await ctl(['put', 'plain', 'text'])).code, 0);
  const mismatch = await ctl(['incr', 'plain']);
  t.is(mismatch.code, 1);
  t.is(mismatch.stdout, '');
  t.is(mismatch.stderr, 'kvctl: incr plain: the key holds a value (or a lock), not a counter (KV_TYPE_MISMATCH)\n');
  t.is((await ctl(['get', 'plain'])).stdout, 'text', 'the value is untouched');
});

test('layout of one server: it owns all 16,384 slots; layout KEY names it', async (t) => {
  const table = await ctl(['layout']);
  t.is(table.code, 0, table.stderr);
  t.deepEqual(table.stdout.split('\n'), [
    'MEMBER' + ' '.repeat(url.length - 'MEMBER'.length) + '  STATE  SLOTS   SHARE',
    `${url}  ready  16384  100.0%`,
    '16384 slots over 1 member',
    '',
  ]);
  const json = await ctl(['--json', 'layout', 'greeting']);
  t.deepEqual(JSON.parse(json.stdout), {
    slots: 16384,
    members: [{ name: url, url, state: 'ready', slots: 16384, percent: 100 }],
    key: { key: 'greeting', slot: 12714, member: url },
  });
  const key = await ctl(['layout', 'greeting']);
  t.is(key.stdout, `greeting: slot 12714, member ${url} (ready)\n`);
});
