// Issue 7's check: after a kv-bench run, `curl /metrics` on the server shows
// every metric an operator needs, with values that reflect the run.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import test from 'ava';

import { METRICS } from '../../server/metrics.js';
import { freePort, run, sample, socketUrl, startServerProcess } from './helpers.js';

const KV_BENCH = fileURLToPath(new URL('../../../bin/kv-bench.js', import.meta.url));
const WORKLOAD_A = fileURLToPath(new URL('../../../bench/workloads/workloada', import.meta.url));

test('after kv-bench load and run, /metrics shows the store, its heap, clients and the run\'s writes', async (t) => {
  const url = socketUrl();
  const port = await freePort();
  const server = await startServerProcess(['--listen', url, '--memory', '64M', '--metrics-port', String(port), '--grace-ms', '100ms', '--log-level', 'warn']);
  // kv-bench's reports go to a directory of the test's own, not the checkout's bench/results
  const results = mkdtempSync(join(tmpdir(), 'rkv-metrics-bench-'));
  t.teardown(() => rmSync(results, { recursive: true, force: true }));
  try {
    const common = ['-P', WORKLOAD_A, '--db', 'rdma-kv', '-p', `rdmakv.url=${url}`, '-p', 'recordcount=2000', '-p', 'fieldcount=2', '-p', 'fieldlength=50', '-p', `kvbench.resultsdir=${results}`];
    const load = await run(KV_BENCH, ['load', ...common]);
    t.is(load.code, 0, load.stderr);
    const bench = await run(KV_BENCH, ['run', ...common, '-p', 'operationcount=4000']);
    t.is(bench.code, 0, bench.stderr);
    const updates = Number(/^\[UPDATE\], Operations, (\d+)$/m.exec(bench.stdout)?.[1]);
    t.true(updates > 0, 'workload a updated records');
    t.is(readdirSync(results).length, 4, 'a JSON and an HTML report per phase, in the test\'s directory');

    // Notices are drained asynchronously, and superseded blocks freed after the grace period.
    let text = '';
    for (let tries = 0; tries < 600; tries++) {
      text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      if (sample(text, 'rdmakv_notifications_total') === 2000 + updates && (sample(text, 'rdmakv_blocks_freed_total') ?? 0) >= updates) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    t.is(sample(text, 'rdmakv_items'), 2000);
    t.is(sample(text, 'rdmakv_notifications_total'), 2000 + updates);
    t.true(sample(text, 'rdmakv_blocks_freed_total')! >= updates, 'every superseded block freed');
    t.is(sample(text, 'rdmakv_region_bytes'), 64 << 20);
    t.true(sample(text, 'rdmakv_slot_load_factor')! > 0);
    t.true(sample(text, 'rdmakv_grants_total')! > 0);
    t.is(sample(text, 'rdmakv_connected_clients'), 0, 'the bench clients left');
    const classes = [...text.matchAll(/^rdmakv_heap_class_used_bytes\{class_bytes="(\d+)"\} (\d+)$/gm)];
    t.true(classes.some((m) => Number(m[2]) > 0), 'some size class holds the records');
    // Every metric the server defines is exposed (with HELP), zero-valued ones too.
    for (const def of METRICS) t.regex(text, new RegExp(`^# HELP ${def.name} `, 'm'), def.name);
    for (const name of ['rdmakv_lock_recoveries_total', 'rdmakv_keepalive_failures_total', 'rdmakv_fenced_clients_total']) {
      t.not(sample(text, name), undefined, name);
    }
  } finally {
    await server.stop();
  }
});
