// KV conformance: a full table says so late, and loses nothing.
import test from 'ava';

import { type KvError } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, slow } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme}: the first KV_TABLE_FULL comes after at least 90% of slots are used, and nothing stored is lost`, async (t) => {
    const buckets = 64;
    const server = await startServer(scheme, { buckets, memoryBytes: 16 << 20, maxValueBytes: 4096 });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const slots = buckets * 7;
    const stored = new Map<string, string>();
    let full: KvError | undefined;
    for (let i = 0; i < slots * 2 && !full; i++) {
      const key = `random-${(i * 2654435761) >>> 0}-${i}`;
      try {
        await kv.put(key, `value of ${key}`);
        stored.set(key, `value of ${key}`);
      } catch (error) {
        full = error as KvError;
      }
    }
    t.truthy(full, 'the table never filled');
    t.is(full!.code, 'KV_TABLE_FULL');
    t.log(`first KV_TABLE_FULL after ${stored.size} of ${slots} slots (${((100 * stored.size) / slots).toFixed(1)}%)`);
    t.true(stored.size >= 0.9 * slots, `only ${stored.size} of ${slots} slots used`);
    // The server counts items from the notices it drains, asynchronously: let it catch up.
    const deadline = Date.now() + slow(10_000);
    while (server.stats().items !== stored.size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    t.is(server.stats().items, stored.size);
    for (const [key, value] of stored) t.is((await kv.get(key))?.toString(), value, key);
    // A full table still takes updates of keys it holds.
    const [someKey] = stored.keys();
    await kv.put(someKey!, 'updated while full');
    t.is((await kv.get(someKey!))?.toString(), 'updated while full');
  });
}
