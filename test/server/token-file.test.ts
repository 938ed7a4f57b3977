// kv-server --token-file as a process: roles from the file, a malformed file
// refused at start by file and line, a warning for a file others can read, and
// SIGHUP rereading it: new tokens work, a removed token's client is fenced,
// a malformed file keeps the old tokens and logs why.
import { writeFileSync } from 'node:fs';

import test from 'ava';

import { KvClient, type KvError } from '../../client/index.js';
import { eventually } from '../helpers/providers.js';
import { kvServer, kvctl, logLines, serveWithTokenFile, urlWithTokenFile } from './helpers.js';

test('a malformed token file: exit 1 with the file and the line', async (t) => {
  const { url, file } = urlWithTokenFile('w write\nr reader\n');
  const result = await kvServer(['--listen', url, '--memory', '64M', '--token-file', file]);
  t.is(result.code, 1);
  t.is(result.stderr.trim(), `kv-server: --token-file ${file} line 2: unknown role 'reader': expected read or write`);
});

test('roles from the file; a file others can read is warned about; SIGHUP reloads it', async (t) => {
  const { url, file, server } = await serveWithTokenFile(t, '# test tokens\nw1 write\nr1 read\ngone write\n', 0o644);
  t.true(server.banner.includes(`kv-server: clients must present a token of ${file} (2 write, 1 read; SIGHUP rereads it)`), server.banner.join('\n'));
  const warnings = () => logLines(server.stderr()).filter((l) => typeof l.msg === 'string' && (l.msg as string).includes('is readable by everyone'));
  t.is(warnings().length, 1);

  const w1 = await KvClient.connect({ url, token: 'w1' });
  t.teardown(() => w1.close());
  const r1 = await KvClient.connect({ url, token: 'r1' });
  t.teardown(() => r1.close());
  const gone = await KvClient.connect({ url, token: 'gone' });
  t.teardown(() => gone.close());
  await w1.put('k', 'v');
  t.is((await r1.get('k'))?.toString(), 'v');
  t.is(((await t.throwsAsync(r1.put('k', 'x'))) as KvError).code, 'KV_READ_ONLY');
  // kvctl with a read token: get works, put is refused by name.
  const got = await kvctl(['--url', url, '--token', 'r1', 'get', 'k']);
  t.is(got.code, 0, got.stderr);
  t.is(got.stdout, 'v');
  const put = await kvctl(['--url', url, '--token', 'r1', 'put', 'k', 'x']);
  t.is(put.code, 1);
  t.regex(put.stderr, /^kvctl: put refused: .* gave this client a read token .*\(KV_READ_ONLY\)\n$/);
  const statuses: Record<string, string[]> = { w1: [], r1: [], gone: [] };
  w1.on('status', (s) => statuses.w1!.push(s));
  r1.on('status', (s) => statuses.r1!.push(s));
  gone.on('status', (s) => statuses.gone!.push(s));

  // A malformed file: the old tokens stay, the error is logged with the line.
  writeFileSync(file, 'w1 write\nr1 read extra more\n');
  server.child.kill('SIGHUP');
  await eventually(() => logLines(server.stderr()).some((l) => l.msg === 'token file not reloaded: the old tokens stay in force'), 'the failed reload is logged');
  const failed = logLines(server.stderr()).find((l) => l.msg === 'token file not reloaded: the old tokens stay in force')!;
  t.regex(String(failed.err), /line 2: 4 fields/);
  const stillGone = await KvClient.connect({ url, token: 'gone', reconnect: false });
  await stillGone.close();

  // A good one, now 0600: 'gone' is removed (its client fenced), 'r2' is new.
  writeFileSync(file, 'w1 write\nr1 read\nr2 read\n');
  const { chmodSync } = await import('node:fs');
  chmodSync(file, 0o600);
  server.child.kill('SIGHUP');
  await eventually(() => logLines(server.stderr()).some((l) => l.msg === 'token file reloaded'), 'the reload is logged');
  await eventually(() => statuses.gone!.includes('reconnecting'), "the removed token's client was fenced");
  const refused = await t.throwsAsync(KvClient.connect({ url, token: 'gone', reconnect: false }));
  t.is((refused as KvError).code, 'KV_AUTH');
  const r2 = await KvClient.connect({ url, token: 'r2' });
  t.teardown(() => r2.close());
  t.is((await r2.get('k'))?.toString(), 'v');
  await w1.put('k', 'w1 still writes');
  t.is((await r1.get('k'))?.toString(), 'w1 still writes');
  t.deepEqual(statuses.w1, []);
  t.deepEqual(statuses.r1, []);
  t.is(warnings().length, 1, 'no new warning for a 0600 file');
  t.false(server.stderr().includes('"w1') || server.stderr().includes('r2 read'), 'tokens are never logged');
});
