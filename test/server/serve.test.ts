// kv-server as a process: it starts a 1 GiB region, prints what it serves,
// serves clients, metrics and /stats, checks tokens, logs lifecycle events
// only, and stops cleanly on SIGTERM and SIGINT.
import { existsSync } from 'node:fs';

import test from 'ava';

import { KvAuthError, KvClient, type KvError } from '../../client/index.js';
import { METRICS } from '../../server/metrics.js';
import { freePort, kvServer, logLines, sample, serveWithTokenFile, socketPath, socketUrl, startServerProcess } from './helpers.js';

test('a 1 GiB server prints its URL and region; a client puts and gets; /metrics and /stats agree', async (t) => {
  const url = socketUrl();
  const port = await freePort();
  const server = await startServerProcess(['--listen', url, '--memory', '1GiB', '--metrics-port', String(port)]);
  t.teardown(() => server.stop('SIGKILL'));
  t.log(server.banner.join('\n')); // includes "ready in N ms": startup time, for the record only
  t.deepEqual(server.urls, [url]);
  t.true(server.banner.some((line) => line.startsWith('kv-server: region 1 GiB (1073741824 bytes)')), server.banner.join('\n'));
  t.true(server.banner.includes(`kv-server: metrics on http://127.0.0.1:${port}/metrics, stats on http://127.0.0.1:${port}/stats`));

  const kv = await KvClient.connect({ url });
  t.teardown(() => kv.close());
  for (let i = 0; i < 20; i++) await kv.put(`key-${i}`, `value-${i}`);
  await kv.put('key-0', 'overwritten');
  t.is((await kv.get('key-7'))?.toString(), 'value-7');
  t.is((await kv.get('key-0'))?.toString(), 'overwritten');
  t.true(await kv.delete('key-19'));

  // The server counts from the notices it drains asynchronously: wait until all 22 are in.
  const deadline = Date.now() + 10_000;
  let response = await fetch(`http://127.0.0.1:${port}/stats`);
  let stats = (await response.json()) as Record<string, number>;
  while (stats.notifications! < 22 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    response = await fetch(`http://127.0.0.1:${port}/stats`);
    stats = (await response.json()) as Record<string, number>;
  }
  t.is(response.headers.get('content-type'), 'application/json');
  const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();

  t.is(stats.items, 19);
  t.is(stats.regionBytes, 1073741824);
  t.is(stats.clients, 1);
  t.is(sample(metrics, 'rdmakv_items'), 19);
  t.is(sample(metrics, 'rdmakv_region_bytes'), 1073741824);
  t.is(sample(metrics, 'rdmakv_connected_clients'), 1);
  t.is(sample(metrics, 'rdmakv_slots'), stats.slots);
  t.is(sample(metrics, 'rdmakv_slot_load_factor'), 19 / stats.slots!);
  t.true(sample(metrics, 'rdmakv_notifications_total')! >= 22); // 21 puts, 1 delete (the scrape may see more than /stats did)
  t.true(sample(metrics, 'rdmakv_heap_used_bytes')! > 0);
  for (const def of METRICS) t.true(metrics.includes(`# TYPE ${def.name} ${def.type}\n`), `${def.name} is not exposed`);
  t.regex(metrics, /^process_cpu_seconds_total \d/m); // prom-client's default metrics
  t.regex(metrics, /^rdmakv_heap_class_used_bytes\{class_bytes="\d+"\} \d+/m);

  const notFound = await fetch(`http://127.0.0.1:${port}/nothing`);
  t.is(notFound.status, 404);
});

test('wrong token: KvAuthError (KV_AUTH); the right one works; the rejection is counted', async (t) => {
  const url = socketUrl();
  const port = await freePort();
  const server = await startServerProcess(['--listen', url, '--memory', '64M', '--token', 's3cret', '--metrics-port', String(port)]);
  t.teardown(() => server.stop('SIGKILL'));
  t.true(server.banner.includes('kv-server: clients must present the token'));
  const wrong = await t.throwsAsync(KvClient.connect({ url, token: 'guess', reconnect: false }));
  t.true(wrong instanceof KvAuthError);
  t.is((wrong as KvError).code, 'KV_AUTH');
  const none = await t.throwsAsync(KvClient.connect({ url, reconnect: false }));
  t.is((none as KvError).code, 'KV_AUTH');
  const kv = await KvClient.connect({ url, token: 's3cret' });
  await kv.put('a', 'b');
  t.is((await kv.get('a'))?.toString(), 'b');
  await kv.close();
  const stats = (await (await fetch(`http://127.0.0.1:${port}/stats`)).json()) as { rejectedConnections: number };
  t.is(stats.rejectedConnections, 2);
  const rejected = logLines(server.stderr()).filter((line) => line.msg === 'connection rejected');
  t.is(rejected.length, 2);
  t.false(server.stderr().includes('s3cret'), 'the token must never be logged');
});

test('--token-file: the token is read and trimmed', async (t) => {
  const { url } = await serveWithTokenFile(t, '  from-a-file\n\n');
  const kv = await KvClient.connect({ url, token: 'from-a-file' });
  await kv.put('k', 'v');
  await kv.close();
  const wrong = await t.throwsAsync(KvClient.connect({ url, token: '  from-a-file\n\n', reconnect: false }));
  t.is((wrong as KvError).code, 'KV_AUTH');
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal}: exit 0, socket file removed, clients see the server go`, async (t) => {
    const url = socketUrl();
    const port = await freePort();
    const server = await startServerProcess(['--listen', url, '--memory', '64M', '--metrics-port', String(port)]);
    t.teardown(() => server.stop('SIGKILL'));
    t.true(existsSync(socketPath(url)));
    const kv = await KvClient.connect({ url, reconnect: false });
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    const gone = new Promise<void>((resolve) => kv.on('status', (status) => status === 'closed' && resolve()));
    const { code, signal: killedBy, stdout } = await server.stop(signal);
    t.is(code, 0);
    t.is(killedBy, null);
    t.true(stdout.includes(`kv-server: stopped (${signal})`));
    t.false(existsSync(socketPath(url)), 'the socket file is removed');
    await gone;
    const refused = await fetch(`http://127.0.0.1:${port}/metrics`).then(
      () => 'answered',
      () => 'refused',
    );
    t.is(refused, 'refused', 'the metrics server is closed');
    const messages = logLines(server.stderr()).map((line) => line.msg);
    t.true(messages.includes('shutting down'));
    t.is(messages.at(-1), 'exiting');
  });
}

test('logs: one line per lifecycle event, nothing per operation', async (t) => {
  const url = socketUrl();
  const server = await startServerProcess(['--listen', url, '--memory', '64M']);
  t.teardown(() => server.stop('SIGKILL'));
  const kv = await KvClient.connect({ url });
  for (let i = 0; i < 300; i++) await kv.put(`k${i % 50}`, `v${i}`);
  for (let i = 0; i < 300; i++) await kv.get(`k${i % 50}`);
  for (let i = 0; i < 50; i++) await kv.delete(`k${i}`);
  await kv.close();
  const { code, stderr } = await server.stop();
  t.is(code, 0);
  const lines = logLines(stderr);
  t.is(lines.length, stderr.split('\n').filter(Boolean).length, 'stderr holds only JSON log lines');
  const messages = lines.map((line) => line.msg);
  t.log(messages.join(', '));
  // The client's departure may be noticed before or after the signal; everything else is in order.
  t.deepEqual(messages.slice(0, 4), ['starting', 'listening', 'ready', 'client connected']);
  // A departure may also take back blocks the client had not given back yet (CI at 039e97e saw that line once).
  const departure = (m: unknown) => m === 'client disconnected' || m === 'took back the unpublished blocks of a departed client';
  t.deepEqual(messages.filter((m) => !departure(m)).slice(4), ['shutting down', 'stopped', 'exiting']);
  t.true(messages.filter((m) => m === 'client disconnected').length <= 1);
  for (const line of lines) {
    t.is(line.name, 'kv-server');
    t.is(typeof line.time, 'string');
  }
});

test('--log-level warn: lifecycle info lines are not written', async (t) => {
  const url = socketUrl();
  const server = await startServerProcess(['--listen', url, '--memory', '64M', '--log-level', 'warn']);
  const { code, stderr } = await server.stop();
  t.is(code, 0);
  t.is(stderr, '');
});

test('--region-file: data survives a restart; a restart with another size fails with one line', async (t) => {
  const url = socketUrl();
  const file = `${socketPath(url)}.region`;
  const first = await startServerProcess(['--listen', url, '--memory', '64M', '--region-file', file]);
  t.teardown(() => first.stop('SIGKILL'));
  t.true(first.banner.some((line) => line.endsWith(`kept in ${file}`)), first.banner.join('\n'));
  const kv = await KvClient.connect({ url, reconnect: false });
  await kv.put('persisted', 'across restarts');
  await kv.close();
  t.is((await first.stop()).code, 0);

  const second = await startServerProcess(['--listen', url, '--memory', '64M', '--region-file', file]);
  t.teardown(() => second.stop('SIGKILL'));
  const again = await KvClient.connect({ url, reconnect: false });
  t.is((await again.get('persisted'))?.toString(), 'across restarts');
  await again.close();
  t.is((await second.stop()).code, 0);

  const wrongSize = await kvServer(['--listen', url, '--memory', '128M', '--region-file', file]);
  t.is(wrongSize.code, 1);
  t.is(wrongSize.stderr.split('\n').filter(Boolean).length, 1, wrongSize.stderr);
  t.regex(wrongSize.stderr, /^kv-server: .*region/);
});
