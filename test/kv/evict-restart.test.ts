// Eviction and a region file (issue 16): the access table is part of the region's layout
// (region format 4), so a region file created with eviction restarts with it, keeps its data
// and evicts again; started without eviction, the server refuses it with the option to give.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import { KvConfigError } from '../../server/kv-server.js';
import { FailureLog, ReconnectingClient, connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, testScale } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a region file made with --eviction lru restarts with it, and only with eviction on`, async (t) => {
    const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-evict-file-')), 'region');
    const options = { memoryBytes: 16 << 20, graceMs: 50, regionFile };
    const first = await startServer(scheme, { ...options, eviction: 'lru' });
    t.true(first.layout.accessOffset > 0);
    const kv = await connect(first);
    for (let i = 0; i < 100; i++) await kv.put(`k${i}`, `value ${i}`);
    await kv.close();
    await first.close();
    const error = await t.throwsAsync(startServer(scheme, options), { instanceOf: KvConfigError });
    t.regex(error!.message, /--eviction/);
    const again = await startServer(scheme, { ...options, eviction: 'lfu' });
    t.teardown(() => again.close());
    const kv2 = await connect(again);
    t.teardown(() => kv2.close());
    for (let i = 0; i < 100; i++) t.is((await kv2.get(`k${i}`))?.toString(), `value ${i}`);
    // The restarted server evicts: heaps of writes (3 in the shrunk guest runs), no KV_OUT_OF_MEMORY.
    const count = Math.ceil(((testScale() < 1 ? 3 : 10) * again.layout.heapBytes) / 4000);
    const failures = new FailureLog(again);
    const writer = new ReconnectingClient(kv2, again);
    for (let i = 0; i < count; i += 64) {
      await Promise.all(
        Array.from({ length: Math.min(64, count - i) }, (_, k) =>
          writer.put(`f${i + k}`, Buffer.alloc(4000, k)).catch((error: Error) => failures.record(error, `f${i + k}`)),
        ),
      );
    }
    for (const note of writer.notes) t.log(note);
    t.deepEqual(failures.summary, []);
    t.true(again.stats().evictions.watermark + again.stats().evictions.grant > 0);
  });
}
