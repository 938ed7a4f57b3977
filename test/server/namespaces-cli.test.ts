// kv-server --namespace as a process: the banner names each namespace, the
// token file's third column routes a token to its namespace, kvctl
// --namespace works on it and reads its stats (/stats?namespace=), /metrics
// labels every series by namespace, the logs name the namespace, a token file
// naming a namespace the server does not host is refused at start (exit 1)
// and on SIGHUP (the old tokens stay).
import { writeFileSync } from 'node:fs';

import test from 'ava';

import { KvClient } from '../../client/index.js';
import { eventually } from '../helpers/providers.js';
import { freePort, kvServer, kvctl, logLines, sample, startServerProcess, urlWithTokenFile } from './helpers.js';

const TOKENS = 'd write\na write alpha\nar read alpha\n';

test('a token file naming a namespace that is not hosted: exit 1 with one line', async (t) => {
  const { url, file } = urlWithTokenFile(TOKENS);
  const result = await kvServer(['--listen', url, '--memory', '64M', '--token-file', file]);
  t.is(result.code, 1);
  t.is(result.stderr.trim(), `kv-server: --token-file ${file}: a token for namespace 'alpha', which this server does not host (it hosts default): add --namespace alpha:SIZE, or fix the line`);
});

test('--namespace: banner, kvctl, /stats and /metrics per namespace, logs that name it; SIGHUP with an unknown namespace keeps the old tokens', async (t) => {
  const { url, file } = urlWithTokenFile(TOKENS);
  const port = await freePort();
  const server = await startServerProcess(['--listen', url, '--memory', '64M', '--namespace', 'alpha:32M', '--token-file', file, '--metrics-port', String(port)]);
  t.teardown(() => server.stop('SIGKILL'));
  t.true(server.banner.some((l) => /^kv-server: namespace alpha: region 32 MiB: \d+ buckets/.test(l)), server.banner.join('\n'));

  const put = await kvctl(['--url', url, '--token-file', file, '--namespace', 'alpha', 'put', 'k', 'in alpha']);
  t.is(put.code, 0, put.stderr);
  const got = await kvctl(['--url', url, '--token', 'a', 'get', 'k']);
  t.is(got.stdout, 'in alpha', 'the token alone opens its namespace');
  const missing = await kvctl(['--url', url, '--token', 'd', 'get', 'k']);
  t.is(missing.code, 1, 'the default namespace does not have it');
  const wrong = await kvctl(['--url', url, '--token', 'a', '--namespace', 'beta', 'get', 'k']);
  t.is(wrong.code, 1);
  t.regex(wrong.stderr, /hosts no namespace 'beta'/);

  const stats = await kvctl(['--url', url, '--metrics', `http://127.0.0.1:${port}`, '--namespace', 'alpha', 'stats', '--json']);
  t.is(stats.code, 0, stats.stderr);
  t.is((JSON.parse(stats.stdout) as { items: number }).items, 1);
  const defaults = (await (await fetch(`http://127.0.0.1:${port}/stats`)).json()) as { items: number; regionBytes: number };
  t.deepEqual([defaults.items, defaults.regionBytes], [0, 64 << 20]);
  t.is((await fetch(`http://127.0.0.1:${port}/stats?namespace=beta`)).status, 404);
  const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  t.is(sample(metrics, 'rdmakv_items', 'namespace="alpha"'), 1);
  t.is(sample(metrics, 'rdmakv_items', 'namespace="default"'), 0);
  t.is(sample(metrics, 'rdmakv_region_bytes', 'namespace="alpha"'), 32 << 20);
  t.is(sample(metrics, 'rdmakv_items'), undefined, 'no unlabelled series with several namespaces');
  const connected = logLines(server.stderr()).filter((l) => l.msg === 'client connected');
  t.true(connected.some((l) => l.namespace === 'alpha') && connected.some((l) => l.namespace === 'default'), JSON.stringify(connected));

  const reader = await KvClient.connect({ url, token: 'ar' });
  t.teardown(() => reader.close());
  writeFileSync(file, 'a write alpha\nb write beta\n');
  server.child.kill('SIGHUP');
  await eventually(() => logLines(server.stderr()).some((l) => l.msg === 'token file not reloaded: the old tokens stay in force' && /namespace 'beta' is not hosted/.test(String(l.err))), 'the refused reload is logged');
  t.is((await reader.get('k'))?.toString(), 'in alpha', 'the old tokens stay: its client was not fenced');
  t.is(reader.status, 'ready');
});
