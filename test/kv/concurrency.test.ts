// KV conformance under concurrency: many processes against one server.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import test from 'ava';

import { startServer } from '../helpers/kv.js';
import { providersUnderTest, testScale } from '../helpers/providers.js';

const child = fileURLToPath(new URL('../helpers/kv-child.js', import.meta.url));

function run(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const proc = fork(child, args, { env: { ...process.env, RKV_QUIET: '1' } });
    let report: Record<string, unknown> | undefined;
    proc.on('message', (m: Record<string, unknown>) => (report = m));
    proc.on('exit', (code) => {
      if (report?.error) reject(new Error(String(report.error)));
      else if (code !== 0 || !report) reject(new Error(`child ${args[0]} exited with ${code}`));
      else resolve(report);
    });
  });
}

for (const scheme of providersUnderTest()) {
  const total = Math.round(100_000 * testScale());
  test(`${scheme}: ${total.toLocaleString('en-US')} random operations from 3 processes on disjoint keys match an in-memory model`, async (t) => {
    const server = await startServer(scheme, { memoryBytes: 128 << 20 });
    t.teardown(() => server.close());
    const url = server.urls[0]!;
    const share = [0, 1, 2].map((p) => Math.floor(total / 3) + (p < total % 3 ? 1 : 0));
    const reports = await Promise.all([0, 1, 2].map((p) => run(['model', url, `p${p}`, String(share[p]), String(1000 + p)])));
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
      run(['write', url, '1', '10', ms]),
      run(['write', url, '2', '10', ms]),
      run(['read', url, '10', ms]),
      run(['read', url, '10', ms]),
      run(['read', url, '10', ms]),
    ]);
    const reads = reports.slice(2).reduce((n, r) => n + Number(r.ops), 0);
    const writes = reports.slice(0, 2).reduce((n, r) => n + Number(r.ops), 0);
    t.log(`${writes} writes and ${reads} reads on 10 keys`);
    t.true(writes > 0 && reads > 0);
    for (const r of reports) t.deepEqual(r.bad, [], `bad values: ${r.badCount}`);
  });
}
