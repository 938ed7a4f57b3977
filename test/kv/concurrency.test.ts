// KV conformance under concurrency: many processes against one server.
import test from 'ava';

import { runKvChild, startServer } from '../helpers/kv.js';
import { providersUnderTest, testScale } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  const total = Math.round(100_000 * testScale());
  test(`${scheme}: ${total.toLocaleString('en-US')} random operations from 3 processes on disjoint keys match an in-memory model`, async (t) => {
    const server = await startServer(scheme, { memoryBytes: 128 << 20 });
    t.teardown(() => server.close());
    const url = server.urls[0]!;
    const share = [0, 1, 2].map((p) => Math.floor(total / 3) + (p < total % 3 ? 1 : 0));
    const reports = await Promise.all([0, 1, 2].map((p) => runKvChild(t, ['model', url, `p${p}`, String(share[p]), String(1000 + p)])));
    const done = reports.reduce((n, r) => n + Number(r.done), 0);
    t.is(done, total);
    for (const r of reports) t.deepEqual(r.mismatches, [], `mismatches: ${r.mismatchCount}`);
  });

  test(`${scheme}: racing writers and readers on 10 hot keys never see a torn value or one nobody wrote`, async (t) => {
    const server = await startServer(scheme, { memoryBytes: 128 << 20, graceMs: 100 });
    t.teardown(() => server.close());
    const url = server.urls[0]!;
    const ms = String(Math.max(1000, Math.round(3000 * testScale() * 4)));
    const reports = await Promise.all([
      runKvChild(t, ['write', url, '1', '10', ms]),
      runKvChild(t, ['write', url, '2', '10', ms]),
      runKvChild(t, ['read', url, '10', ms]),
      runKvChild(t, ['read', url, '10', ms]),
      runKvChild(t, ['read', url, '10', ms]),
    ]);
    const reads = reports.slice(2).reduce((n, r) => n + Number(r.ops), 0);
    const writes = reports.slice(0, 2).reduce((n, r) => n + Number(r.ops), 0);
    t.log(`${writes} writes and ${reads} reads on 10 keys`);
    t.true(writes > 0 && reads > 0);
    for (const r of reports) t.deepEqual(r.bad, [], `bad values: ${r.badCount}`);
  });
}
