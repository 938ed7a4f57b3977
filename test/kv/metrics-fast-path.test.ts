// A client with a metrics registry keeps get, put, getMany and putMany on their fast paths
// (client/metrics.ts): getMany's values are still views of one Buffer, a batch is one latency
// sample under get_many or put_many with its keys' results counted at once, retries come from
// the op queue, and clients that share a registry are all counted.
import test from 'ava';
import { Registry } from 'prom-client';

import { connect, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';
import { seriesReader } from '../server/helpers.js';

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: with metrics, getMany still answers with views of one Buffer, and a batch is counted per call`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const registry = new Registry();
    const kv = await connect(server, { metrics: registry });
    t.teardown(() => kv.close());
    // Values above Buffer's pool size: separate GETs would answer with Buffers of their own.
    const value = (i: number) => Buffer.alloc(5000, 65 + i);
    await kv.putMany(Array.from({ length: 8 }, (_, i) => [`k${i}`, value(i)] as [string, Buffer]));
    const keys = [...Array.from({ length: 8 }, (_, i) => `k${i}`), 'absent 1', 'absent 2'];
    const values = await kv.getMany(keys);
    for (let i = 0; i < 8; i++) t.deepEqual(values[i], value(i));
    t.is(values[8], undefined);
    t.is(values[9], undefined);
    t.is(values[1]!.buffer, values[0]!.buffer, 'one Buffer for the batch: the fast path');
    t.is(values[1]!.byteOffset, values[0]!.byteOffset + values[0]!.length);
    await kv.put('k0', 'new');
    t.is((await kv.get('k0'))?.toString(), 'new');
    t.is(await kv.get('absent 3'), undefined);

    const value_ = seriesReader(await registry.metrics());
    t.is(value_('rdmakv_client_operation_seconds_count{op="get_many"}'), 1);
    t.is(value_('rdmakv_client_operation_seconds_count{op="put_many"}'), 1);
    t.is(value_('rdmakv_client_operation_seconds_count{op="get"}'), 2);
    t.is(value_('rdmakv_client_operation_seconds_count{op="put"}'), 1);
    t.is(value_('rdmakv_client_operations_total{op="put",result="ok"}'), 9);
    t.is(value_('rdmakv_client_operations_total{op="get",result="ok"}'), 9);
    t.is(value_('rdmakv_client_operations_total{op="get",result="not_found"}'), 3);
  });

  test.serial(`${scheme}: with metrics, a getMany that fails counts each of its keys under the error`, async (t) => {
    const server = await startServer(scheme);
    const registry = new Registry();
    const kv = await connect(server, { metrics: registry, reconnect: false });
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    await server.close();
    await eventually(() => kv.status !== 'ready', 'the client saw the server go');
    const error = await t.throwsAsync(kv.getMany(['k', 'k', 'k']));
    const code = (error as { code?: string }).code ?? 'error';
    const value_ = seriesReader(await registry.metrics());
    t.is(value_(`rdmakv_client_operations_total{op="get",result="${code}"}`), 3);
    t.is(value_('rdmakv_client_operation_seconds_count{op="get_many"}'), 1);
  });

  test.serial(`${scheme}: clients that share a registry are all counted (location cache, operations)`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const registry = new Registry();
    const a = await connect(server, { metrics: registry });
    const b = await connect(server, { metrics: registry });
    t.teardown(() => Promise.all([a.close(), b.close()]));
    await a.put('ka', 'v');
    await b.put('kb', 'v');
    t.is((await a.get('ka'))?.toString(), 'v');
    t.is((await b.get('kb'))?.toString(), 'v');
    const value_ = seriesReader(await registry.metrics());
    t.is(value_('rdmakv_client_get_location_cache_total{result="hit"}'), 2, "both clients' hits");
    t.is(value_('rdmakv_client_operations_total{op="get",result="ok"}'), 2);
  });

  test.serial(`${scheme}: with metrics, getWithVersion and cas answer on the fast path and are counted as get and put are (ok, not_found, mismatch, a bad value's error)`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const registry = new Registry();
    const kv = await connect(server, { metrics: registry });
    t.teardown(() => kv.close());
    await kv.put('k', 'one');
    const first = (await kv.getWithVersion('k'))!;
    t.is(first.value.toString(), 'one');
    t.is(typeof first.version, 'bigint');
    t.is(await kv.getWithVersion('absent'), undefined);
    t.true(await kv.cas('k', first.version, 'two'));
    t.false(await kv.cas('k', first.version, 'stale'), 'the version moved: a mismatch, not an error');
    t.false(await kv.cas('k', 0n, 'only if absent'));
    t.true(await kv.cas('new', 0n, 'created'));
    const second = (await kv.getWithVersion('k'))!;
    t.is(second.value.toString(), 'two');
    t.not(second.version, first.version);
    await t.throwsAsync(kv.cas('k', -1n, 'x'), { code: 'KV_INVALID_ARGUMENT' });
    await t.throwsAsync(kv.cas('k', second.version, 42 as unknown as string), { code: 'KV_INVALID_ARGUMENT' });
    t.is((await kv.get('k'))?.toString(), 'two', 'a refused cas wrote nothing');

    const value_ = seriesReader(await registry.metrics());
    t.is(value_('rdmakv_client_operations_total{op="get",result="ok"}'), 3);
    t.is(value_('rdmakv_client_operations_total{op="get",result="not_found"}'), 1);
    t.is(value_('rdmakv_client_operations_total{op="cas",result="ok"}'), 2);
    t.is(value_('rdmakv_client_operations_total{op="cas",result="mismatch"}'), 2);
    // As put's: a bad value fails inside the call and is counted; a bad version is refused before it.
    t.is(value_('rdmakv_client_operations_total{op="cas",result="KV_INVALID_ARGUMENT"}'), 1);
    t.is(value_('rdmakv_client_operation_seconds_count{op="cas"}'), 5);
  });
}
