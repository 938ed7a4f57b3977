// Eviction (issue 16, server side): with --eviction lru|lfu a full heap evicts instead of failing
// PUTs; with none (the default) a PUT still fails with KV_OUT_OF_MEMORY.
import test from 'ava';
import { Registry } from 'prom-client';

import { IndexView, slotBlock } from '../../protocol/index-format.js';
import type { KvError } from '../../client/index.js';
import { FailureLog, ReconnectingClient, connect, selfValidating, startServer, validate } from '../helpers/kv.js';
import { eventually, providersUnderTest, testScale } from '../helpers/providers.js';

/** 16 MiB region (about 13.6 MB of heap), a short grace period so evicted blocks come back soon. */
const SMALL = { memoryBytes: 16 << 20, graceMs: 50 };
const VALUE = 4000;
/** Heaps' worth of writes: 10 here, 3 where the suites run shrunk (the Soft-RoCE guest: each heap takes ~5 s there). */
const HEAPS_WRITTEN = testScale() < 1 ? 3 : 10;

for (const scheme of providersUnderTest()) {
  for (const eviction of ['lru', 'lfu'] as const) {
    test(`${scheme}: --eviction ${eviction} takes ${HEAPS_WRITTEN}x the heap of writes without KV_OUT_OF_MEMORY`, async (t) => {
      const server = await startServer(scheme, { ...SMALL, eviction });
      t.teardown(() => server.close());
      const kv = await connect(server);
      t.teardown(() => kv.close());
      const { heapBytes } = server.layout;
      const writes = Math.ceil((HEAPS_WRITTEN * heapBytes) / VALUE);
      const failures = new FailureLog(server);
      const writer = new ReconnectingClient(kv, server);
      for (let i = 0; i < writes; i += 64) {
        await Promise.all(
          Array.from({ length: Math.min(64, writes - i) }, async (_, k) => {
            try {
              await writer.put(`k${i + k}`, selfValidating(1, i + k, VALUE));
            } catch (error) {
              failures.record(error, `k${i + k}`);
            }
          }),
        );
      }
      for (const note of writer.notes) t.log(note);
      t.deepEqual(failures.summary, []);
      const stats = server.stats();
      t.true(stats.evictions.watermark + stats.evictions.grant > 0, 'items were evicted');
      t.true(stats.heapUsedBytes <= heapBytes);
      // The newest writes (inside the grace period of the last ones, or just before) are there, whole.
      const last = await kv.get(`k${writes - 1}`);
      t.truthy(last);
      t.deepEqual(validate(last!), { writer: 1, seq: writes - 1 });
    });
  }

  test(`${scheme}: --eviction none (the default) still answers KV_OUT_OF_MEMORY`, async (t) => {
    const server = await startServer(scheme, SMALL);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    let code: string | undefined;
    for (let i = 0; code === undefined && i < 100_000; i += 64) {
      await Promise.all(
        Array.from({ length: 64 }, async (_, k) => {
          try {
            await kv.put(`k${i + k}`, Buffer.alloc(VALUE, 1));
          } catch (error) {
            code = (error as KvError).code;
          }
        }),
      );
    }
    t.is(code, 'KV_OUT_OF_MEMORY');
    t.deepEqual(server.stats().evictions, { watermark: 0, grant: 0 });
  });

  test(`${scheme}: client metrics count GET hits and misses (a cache's hit ratio)`, async (t) => {
    const server = await startServer(scheme, { ...SMALL, eviction: 'lru' });
    t.teardown(() => server.close());
    const registry = new Registry();
    const kv = await connect(server, { metrics: registry });
    t.teardown(() => kv.close());
    await kv.put('here', 'value');
    await kv.get('here');
    await kv.get('absent');
    await kv.getMany(['here', 'absent', 'gone']);
    await kv.getWithVersion('here');
    await kv.getInto('here', Buffer.alloc(16)); // getInto counts as any GET does
    await kv.getInto('absent', Buffer.alloc(16));
    const gets = (await registry.getSingleMetric('rdmakv_client_gets_total')!.get()).values;
    const count = (result: string) => gets.find((v) => v.labels.result === result)?.value;
    t.is(count('hit'), 4);
    t.is(count('miss'), 4);
  });

  test(`${scheme}: with eviction, large values find room in a heap full of small ones`, async (t) => {
    const server = await startServer(scheme, { ...SMALL, eviction: 'lru' });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const small = Math.ceil((2 * server.layout.heapBytes) / 1000);
    const failures = new FailureLog(server);
    const writer = new ReconnectingClient(kv, server);
    const put = async (key: string, value: Buffer) => {
      try {
        await writer.put(key, value);
      } catch (error) {
        failures.record(error, key);
      }
    };
    for (let i = 0; i < small; i += 64) await Promise.all(Array.from({ length: 64 }, (_, k) => put(`s${i + k}`, Buffer.alloc(1000, k))));
    // Freed small blocks are scattered: a 256 KiB block needs 256 KiB of neighbours freed.
    for (let i = 0; i < 20; i++) await put(`big${i}`, selfValidating(2, i, 256 << 10));
    for (const note of writer.notes) t.log(note);
    t.deepEqual(failures.summary, []);
    t.deepEqual(validate((await kv.get('big19'))!), { writer: 2, seq: 19 });
  });

  test(`${scheme}: with eviction, a large value's GET marks it read too and reads it whole`, async (t) => {
    const server = await startServer(scheme, { memoryBytes: 128 << 20, maxValueBytes: 16 << 20, graceMs: 50, eviction: 'lru' });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const value = selfValidating(3, 1, 8 << 20);
    await kv.put('large', value);
    const { accessOffset, heapOffset, heapBytes, indexOffset, bucketCount } = server.layout;
    t.true(accessOffset >= heapOffset + heapBytes);
    const index = new IndexView(server.region, indexOffset, bucketCount);
    const blocks: number[] = [];
    for (let b = 0; b < bucketCount; b++) for (let i = 0; i < 7; i++) if (index.slot(b, i) !== 0n) blocks.push(slotBlock(index.slot(b, i)));
    t.is(blocks.length, 1);
    // The server's stamp of the block (reached into, as failures.test.ts reaches its client table):
    // set when the notice is drained, fresher once the server has read the GET's hint.
    const stamp = () => (server as unknown as { use: { stamp: Uint32Array } }).use.stamp[blocks[0]!]!;
    await eventually(() => stamp() !== 0, 'the PUT is published');
    const published = stamp();
    await new Promise((resolve) => setTimeout(resolve, 50));
    t.is(stamp(), published, 'nothing read it yet');
    const into = kv.allocBuffer(8 << 20);
    t.is(await kv.getInto('large', into), value.length);
    t.true(into.equals(value));
    await eventually(() => stamp() > published, 'the hint of the large GET reached the server');
    kv.freeBuffer(into);
  });
}
