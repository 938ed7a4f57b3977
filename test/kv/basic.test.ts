// KV conformance: the operations' semantics, limits and typed errors.
import test from 'ava';

import { KvClient, KvError, isRetryable } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme}: put, get, overwrite, delete`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    t.is(await kv.get('missing'), undefined);
    await kv.put('k', 'first');
    t.is((await kv.get('k'))?.toString(), 'first');
    await kv.put('k', 'second, and longer than the first');
    t.is((await kv.get('k'))?.toString(), 'second, and longer than the first');
    t.true(await kv.delete('k'));
    t.is(await kv.get('k'), undefined);
    t.false(await kv.delete('k'));
  });

  test(`${scheme}: binary and UTF-8 keys, empty values`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const binary = Buffer.from([0, 255, 1, 254, 0, 0, 7]);
    const utf8 = 'ключ-鍵-🔑';
    await kv.put(binary, 'binary key');
    await kv.put(utf8, Buffer.from('utf8 key'));
    await kv.put('empty', Buffer.alloc(0));
    await kv.put(Buffer.alloc(0), 'the empty key');
    t.is((await kv.get(binary))?.toString(), 'binary key');
    t.is((await kv.get(Buffer.from(utf8)))?.toString(), 'utf8 key');
    t.deepEqual(await kv.get('empty'), Buffer.alloc(0));
    t.is((await kv.get(''))?.toString(), 'the empty key');
    t.is(await kv.get(Buffer.from([0, 255, 1, 254, 0, 0])), undefined); // a prefix is another key
  });

  test(`${scheme}: the largest key and value work, one byte more is a typed error`, async (t) => {
    const maxValue = 64 * 1024;
    const server = await startServer(scheme, { maxValueBytes: maxValue });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const bigKey = Buffer.alloc(1024, 'k');
    const bigValue = Buffer.alloc(maxValue, 'v');
    await kv.put(bigKey, bigValue);
    t.deepEqual(await kv.get(bigKey), bigValue);
    const keyError = await t.throwsAsync(kv.put(Buffer.alloc(1025, 'k'), 'x'));
    t.is((keyError as KvError).code, 'KV_KEY_TOO_LARGE');
    t.false(isRetryable(keyError));
    const valueError = await t.throwsAsync(kv.put('k', Buffer.alloc(maxValue + 1)));
    t.is((valueError as KvError).code, 'KV_VALUE_TOO_LARGE');
    t.true(valueError instanceof KvError);
    // Nothing was stored by the failed puts, and the client still works.
    t.is(await kv.get('k'), undefined);
    t.is(kv.maxValueBytes, maxValue);
  });

  test(`${scheme}: versions change with every write`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await kv.put('v', 'a');
    const first = await kv.getWithVersion('v');
    await kv.put('v', 'a');
    const second = await kv.getWithVersion('v');
    t.truthy(first && second);
    t.not(first!.version, second!.version);
  });

  test(`${scheme}: a wrong token is KV_AUTH, the right one connects`, async (t) => {
    const server = await startServer(scheme, { token: 'correct horse' });
    t.teardown(() => server.close());
    const wrong = await t.throwsAsync(KvClient.connect({ url: server.urls[0]!, token: 'battery staple', timeoutMs: testTimeoutMs() }));
    t.is((wrong as KvError).code, 'KV_AUTH');
    const none = await t.throwsAsync(KvClient.connect({ url: server.urls[0]!, timeoutMs: testTimeoutMs() }));
    t.is((none as KvError).code, 'KV_AUTH');
    const kv = await KvClient.connect({ url: server.urls[0]!, token: 'correct horse', timeoutMs: testTimeoutMs() });
    await kv.put('x', 'y');
    t.is((await kv.get('x'))?.toString(), 'y');
    await kv.close();
    t.is(server.stats().rejectedConnections, 2);
  });

  test(`${scheme}: a server restarted under a connected client: KV_DISCONNECTED, then reconnect works`, async (t) => {
    const first = await startServer(scheme);
    const url = first.urls[0]!;
    const kv = await KvClient.connect({ url, timeoutMs: testTimeoutMs() });
    t.teardown(() => kv.close());
    await kv.put('before', 'restart');
    const statuses: string[] = [];
    kv.on('status', (s) => statuses.push(s));
    await first.close();
    // The loss is noticed, and operations fail fast with a retryable error.
    while (kv.status === 'ready') await new Promise((r) => setTimeout(r, 10));
    const error = await t.throwsAsync(kv.get('before'));
    t.is((error as KvError).code, 'KV_DISCONNECTED');
    t.true(isRetryable(error));
    const second = await startServer(scheme, { listen: [url] }); // the same address
    t.teardown(() => second.close());
    const deadline = Date.now() + slow(10_000);
    while ((kv.status as string) !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    t.is(kv.status as string, 'ready');
    t.deepEqual(statuses.slice(0, 1), ['reconnecting']);
    await kv.put('after', 'restart');
    t.is((await kv.get('after'))?.toString(), 'restart');
  });

  test(`${scheme}: close() settles everything and later calls fail with KV_DISCONNECTED`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    const ops = Array.from({ length: 200 }, (_, i) => kv.put(`c${i}`, `v${i}`));
    const closing = kv.close();
    const settled = await Promise.allSettled(ops);
    await closing;
    t.is(settled.length, 200);
    for (const s of settled) if (s.status === 'rejected') t.is((s.reason as KvError).code, 'KV_DISCONNECTED');
    const after = await t.throwsAsync(kv.get('c1'));
    t.is((after as KvError).code, 'KV_DISCONNECTED');
  });

  test(`${scheme}: event-mode polling gives the same answers`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server, { pollMode: 'event' });
    t.teardown(() => kv.close());
    await kv.putMany(Array.from({ length: 300 }, (_, i): [string, string] => [`e${i}`, `value ${i}`]));
    const got = await kv.getMany(Array.from({ length: 300 }, (_, i) => `e${i}`));
    t.true(got.every((v, i) => v?.toString() === `value ${i}`));
  });

  test(`${scheme}: superseded blocks are freed after the grace period`, async (t) => {
    const server = await startServer(scheme, { graceMs: 50 });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    for (let i = 0; i < 50; i++) await kv.put('same', `version ${i}`);
    await kv.delete('same');
    const deadline = Date.now() + slow(5000);
    while (server.stats().blocksFreed < 50 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    t.is(server.stats().blocksFreed, 50);
    t.is(server.stats().items, 0);
  });
}
