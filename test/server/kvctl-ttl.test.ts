// kvctl's TTL commands against a running kv-server process: put --ttl,
// expire, persist, ttl; a missing key exits 1, a bad duration 2 (nothing sent),
// a counter's TTL is KV_TYPE_MISMATCH.
import test from 'ava';

import { type ServerProcess, kvctl, socketUrl, startServerProcess } from './helpers.js';

let server: ServerProcess;
let url: string;

test.before(async () => {
  url = socketUrl();
  server = await startServerProcess(['--listen', url, '--memory', '64M']);
});

test.after.always(async () => {
  await server?.stop();
});

const ctl = (args: string[]) => kvctl(['--url', url, ...args]);
const HOUR = 3_600_000;

test('put --ttl, ttl, persist, expire; a missing key exits 1', async (t) => {
  t.is((await ctl(['put', 'session', 'abc', '--ttl', '2h'])).code, 0);
  const left = Number((await ctl(['ttl', 'session'])).stdout);
  t.true(left <= 2 * HOUR && left > 2 * HOUR - 60_000, `ttl printed ${left}`);
  const json = JSON.parse((await ctl(['--json', 'ttl', 'session'])).stdout) as { key: string; ttlMs: number };
  t.is(json.key, 'session');
  t.true(json.ttlMs <= 2 * HOUR);
  t.is((await ctl(['persist', 'session'])).code, 0);
  t.is((await ctl(['ttl', 'session'])).stdout, 'none\n');
  t.deepEqual(JSON.parse((await ctl(['--json', 'ttl', 'session'])).stdout), { key: 'session', ttlMs: null });
  const again = await ctl(['persist', 'session']);
  t.is(again.code, 0, 'no TTL to remove: done');
  t.is(again.stderr, 'kvctl: session had no TTL\n');
  t.deepEqual(JSON.parse((await ctl(['--json', 'expire', 'session', '1d'])).stdout), { key: 'session', ttlMs: 24 * HOUR });
  t.true(Number((await ctl(['ttl', 'session'])).stdout) > 23 * HOUR);
  t.is((await ctl(['expire', 'session', '1ms'])).code, 0);
  await new Promise((r) => setTimeout(r, 20));
  const gone = await ctl(['get', 'session']);
  t.is(gone.code, 1);
  for (const args of [['ttl', 'session'], ['expire', 'session', '1h'], ['persist', 'session']]) {
    const r = await ctl(args);
    t.is(r.code, 1, args.join(' '));
    t.is(r.stderr, 'kvctl: not found: session\n');
  }
});

test('a bad TTL is a usage error (exit 2); a counter never expires (exit 1, KV_TYPE_MISMATCH)', async (t) => {
  for (const args of [['put', 'k', 'v', '--ttl', '0'], ['put', 'k', 'v', '--ttl', 'soon'], ['expire', 'k', '-1'], ['expire', 'k', '36501d']]) {
    const r = await ctl(args);
    t.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
  }
  t.is((await ctl(['get', 'k'])).code, 1, 'nothing was written');
  t.is((await ctl(['incr', 'n'])).code, 0);
  const r = await ctl(['expire', 'n', '1h']);
  t.is(r.code, 1);
  t.regex(r.stderr, /expire n: the key holds a counter or a lock, which never expire.*KV_TYPE_MISMATCH/);
});
