// kv-server's command line: --help is complete, and every bad configuration
// ends with one line on stderr, no stack trace, and a non-zero exit code
// (2: the command line is wrong, 1: this machine cannot do it).
import { createServer } from 'node:net';
import { writeFileSync } from 'node:fs';

import test from 'ava';

import { Provider } from '../../native/index.js';
import { freePort, kvServer, socketUrl, startServerProcess } from './helpers.js';

const OPTIONS = [
  'listen', 'memory', 'token', 'token-file', 'buckets', 'max-value', 'grace-ms', 'keepalive-ms',
  'max-clients', 'region-file', 'metrics-port', 'metrics-host', 'log-level',
  'eviction', 'eviction-high', 'eviction-low', 'expiry-sweep-ms',
];

/** The help text of each option: from its line to the next option's line. */
function helpEntries(help: string): Map<string, string> {
  const entries = new Map<string, string>();
  let current: string | undefined;
  for (const line of help.split('\n')) {
    const match = /^\s+(?:-\w, )?--([\w-]+)/.exec(line);
    if (match) current = match[1]!;
    else if (!/^\s{6,}/.test(line)) current = undefined;
    if (current) entries.set(current, `${entries.get(current) ?? ''}${line}\n`);
  }
  return entries;
}

test('--help lists every option with its default, and exits 0', async (t) => {
  const { code, stdout, stderr } = await kvServer(['--help']);
  t.is(code, 0);
  t.is(stderr, '');
  const entries = helpEntries(stdout);
  for (const option of OPTIONS) {
    const entry = entries.get(option);
    t.truthy(entry, `--${option} is missing from --help`);
    t.regex(entry ?? '', /\[default: [^\]]+\]/, `--${option} shows no default`);
  }
  t.regex(entries.get('listen')!, /shm:\/\/\/run\/rdma-kv\/kv\.sock/);
  t.regex(entries.get('memory')!, /"1GiB"/);
  t.regex(stdout, /binary unit/); // sizes explain their units
});

/** One line on stderr, prefixed, without a stack trace; nothing on stdout; the expected exit code. */
async function failsCleanly(t: import('ava').ExecutionContext, args: string[], code: number, reason: RegExp): Promise<void> {
  const result = await kvServer(args);
  t.log(`kv-server ${args.join(' ')} → ${result.code}: ${result.stderr.trim()}`);
  t.is(result.code, code);
  const lines = result.stderr.split('\n').filter((line) => line !== '');
  t.is(lines.length, 1, `stderr: ${result.stderr}`);
  t.true(lines[0]!.startsWith('kv-server: '));
  t.regex(lines[0]!, reason);
  t.false(result.stderr.includes('    at '));
  t.is(result.stdout, '');
}

test('an unknown option is a usage error', (t) => failsCleanly(t, ['--listen', socketUrl(), '--bogus', '1'], 2, /Unknown argument: bogus/));

test('a misspelled option is a usage error naming the option meant', (t) =>
  failsCleanly(t, ['--listen', socketUrl(), '--memroy', '1GiB'], 2, /Unknown argument: memroy; did you mean --memory\? \(see kv-server --help\)$/));

test('several misspelled options: each is named with the option meant', (t) =>
  failsCleanly(t, ['--listen', socketUrl(), '--max-valu', '4K', '--grce-ms', '5'], 2, /did you mean --max-value for --max-valu, --grace-ms for --grce-ms\?/));

test('a positional argument is a usage error', (t) => failsCleanly(t, ['serve', '--listen', socketUrl()], 2, /Unknown argument: serve/));

test('an unparseable size is a usage error', (t) => failsCleanly(t, ['--listen', socketUrl(), '--memory', '12 parsecs'], 2, /--memory: '12 parsecs' is not a size/));

test('an unparseable duration is a usage error', (t) => failsCleanly(t, ['--listen', socketUrl(), '--grace-ms', 'soon'], 2, /--grace-ms: 'soon' is not a duration/));

test('a memory too small for the index and heap is a usage error', (t) =>
  failsCleanly(t, ['--listen', socketUrl(), '--memory', '1MiB'], 2, /memory too small/));

test('an option given twice is a usage error', (t) =>
  failsCleanly(t, ['--listen', socketUrl(), '--memory', '64M', '--memory', '128M'], 2, /--memory is given more than once/));

test('an unknown URL scheme is a usage error', (t) => failsCleanly(t, ['--listen', 'tcp://127.0.0.1:7471'], 2, /no provider for this URL/));

test('a relative shm path is a usage error', (t) => failsCleanly(t, ['--listen', 'shm://kv.sock'], 2, /absolute socket path/));

test('an unknown log level is a usage error', (t) => failsCleanly(t, ['--listen', socketUrl(), '--log-level', 'loud'], 2, /Invalid values/));

test('--token and --token-file together are a usage error', (t) =>
  failsCleanly(t, ['--listen', socketUrl(), '--token', 'a', '--token-file', '/etc/hostname'], 2, /exclude each other/));

test('an unreadable token file fails with a clear line', (t) =>
  failsCleanly(t, ['--listen', socketUrl(), '--token-file', '/nonexistent/rdma-kv/token'], 1, /cannot read --token-file \/nonexistent\/rdma-kv\/token: no such file/));

test('an empty token file fails with a clear line', async (t) => {
  const file = `${socketUrl().slice('shm://'.length)}.token`;
  writeFileSync(file, ' \n');
  await failsCleanly(t, ['--listen', socketUrl(), '--token-file', file], 1, /is empty/);
});

test('rdma:// without an RDMA device fails with a clear line', async (t) => {
  let device = false;
  try {
    new Provider('rdma').close();
    device = true;
  } catch {
    // no device (or no verbs in this build): the case under test
  }
  if (device) {
    t.log('this machine has an RDMA device: nothing to test here');
    t.pass();
    return;
  }
  await failsCleanly(t, ['--listen', 'rdma://127.0.0.1:7471', '--memory', '64M'], 1, /cannot serve rdma:\/\/127\.0\.0\.1:7471/);
});

test('an shm socket another live server holds: exit 1, and the first server keeps serving', async (t) => {
  const url = socketUrl();
  const first = await startServerProcess(['--listen', url, '--memory', '64M']);
  t.teardown(() => first.stop('SIGKILL'));
  await failsCleanly(t, ['--listen', url, '--memory', '64M'], 1, /cannot listen on .*(in use|another process)/);
  t.is(first.child.exitCode, null);
  const { code } = await first.stop();
  t.is(code, 0);
});

test('a busy metrics port: exit 1 with a clear line', async (t) => {
  const port = await freePort();
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
  t.teardown(() => blocker.close());
  await failsCleanly(t, ['--listen', socketUrl(), '--memory', '64M', '--metrics-port', String(port)], 1, new RegExp(`metrics on 127\\.0\\.0\\.1:${port}: the port is in use`));
});

test('a failure on the second URL prints one line (the log line of the first is held back)', async (t) => {
  const url = socketUrl();
  const first = await startServerProcess(['--listen', url, '--memory', '64M']);
  t.teardown(() => first.stop('SIGKILL'));
  await failsCleanly(t, ['--listen', socketUrl(), '--listen', url, '--memory', '64M'], 1, /cannot listen on/);
});
