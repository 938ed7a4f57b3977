/**
 * End to end against real redis-server and memcached started on loopback. When a binary is
 * missing its cases are skipped, or fail under CI=true (../helpers/tools.ts).
 */
import test from 'ava';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createConnection } from 'node:net';
import { Redis } from 'ioredis';
import { Properties } from '../../bench/ycsb/properties.js';
import { runPhase } from '../../bench/ycsb/client/client.js';
import { startMemcached, startRedis } from '../../bench/ycsb/compare/servers.js';
import { runCompare } from '../../bench/ycsb/compare/compare.js';
import { javaStringHashCode } from '../../bench/ycsb/hash.js';
import { buildKeyName } from '../../bench/ycsb/workload/keys.js';
import { needing } from '../helpers/tools.js';

const WORKLOADS = fileURLToPath(new URL('../../../bench/workloads/', import.meta.url));
const quiet = { stderr: () => {}, stdout: () => {} };

function statusCount(result: Awaited<ReturnType<typeof runPhase>>, op: string, status: string): number {
  const m = result.measurements.get(op);
  return [...(m?.statuses.values() ?? [])].find((s) => s.name === status)?.count ?? 0;
}

function portIsClosed(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port });
    s.once('connect', () => (s.destroy(), resolve(false)));
    s.once('error', () => resolve(true));
  });
}

const redisTest = needing(test, 'redis-server').serial;
const memcachedTest = needing(test, 'memcached').serial;
const bothTest = needing(test, 'redis-server', 'memcached').serial;

redisTest('redis: load writes one hash per record plus the _indices zset; runs a, e succeed', async (t) => {
  const server = await startRedis();
  try {
    const props = Properties.fromSources([join(WORKLOADS, 'workloade')], ['recordcount=200', 'operationcount=400']).with(server.properties);
    const load = await runPhase({ props, phase: 'load', db: 'redis', threads: 2, seed: 1, ...quiet });
    t.is(statusCount(load, 'INSERT', 'OK'), 200);
    const client = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true });
    await client.connect();
    try {
      const key = buildKeyName(17, 1, false);
      const record = await client.hgetall(key);
      t.is(Object.keys(record).length, 10);
      t.true(Object.values(record).every((v) => v.length === 100));
      t.is(await client.zcard('_indices'), 200);
      t.is(Number(await client.zscore('_indices', key)), javaStringHashCode(key));
    } finally {
      client.disconnect();
    }
    const scan = await runPhase({ props, phase: 'run', db: 'redis', seed: 2, ...quiet });
    t.is(statusCount(scan, 'SCAN', 'OK') + statusCount(scan, 'INSERT', 'OK'), 400);
    const a = Properties.fromSources([join(WORKLOADS, 'workloada')], ['recordcount=200', 'operationcount=500']).with(server.properties);
    const run = await runPhase({ props: a, phase: 'run', db: 'redis', threads: 2, seed: 3, ...quiet });
    t.is(statusCount(run, 'READ', 'OK') + statusCount(run, 'UPDATE', 'OK'), 500);
    t.is(run.measurements.get('READ-FAILED'), undefined);
  } finally {
    await server.stop();
  }
  t.true(await portIsClosed(server.port));
});

memcachedTest('memcached: load and run succeed, SCAN is NOT_IMPLEMENTED as in YCSB', async (t) => {
  const server = await startMemcached();
  try {
    const props = Properties.fromSources([join(WORKLOADS, 'workloadb')], ['recordcount=200', 'operationcount=500']).with(server.properties);
    const load = await runPhase({ props, phase: 'load', db: 'memcached', threads: 2, seed: 4, ...quiet });
    t.is(statusCount(load, 'INSERT', 'OK'), 200);
    const run = await runPhase({ props, phase: 'run', db: 'memcached', seed: 5, ...quiet });
    t.is(statusCount(run, 'READ', 'OK') + statusCount(run, 'UPDATE', 'OK'), 500);
    const e = props.with([['scanproportion', '1'], ['readproportion', '0'], ['updateproportion', '0'], ['maxscanlength', '10']]);
    const scans = await runPhase({ props: e, phase: 'run', db: 'memcached', seed: 6, ...quiet });
    t.is(statusCount(scans, 'SCAN', 'NOT_IMPLEMENTED'), 500);
    t.is(scans.measurements.get('SCAN-FAILED')!.total.totalCount, 500); // latency of failed calls goes to <OP>-FAILED
  } finally {
    await server.stop();
  }
  t.true(await portIsClosed(server.port));
});

bothTest('compare: redis, memcached and basic side by side; peers stopped afterwards', async (t) => {
  const props = Properties.fromSources([join(WORKLOADS, 'workloadb')], ['recordcount=100', 'operationcount=300']);
  const result = await runCompare({ props, dbs: ['redis', 'memcached', 'basic'], seed: 7, stderr: () => {} });
  t.deepEqual(result.rows.map((r) => r.db), ['redis', 'memcached', 'basic']);
  for (const row of result.rows) {
    t.true(row.throughput > 0);
    t.is((row.operations['READ']?.count ?? 0) + (row.operations['UPDATE']?.count ?? 0), 300);
  }
  const lines = result.table.split('\n');
  t.regex(lines[0]!, /^\| db +\| throughput \(ops\/s\) \| READ avg \(µs\) \| READ p95 \(µs\) \| READ p99 \(µs\) \| UPDATE avg/);
  t.is(lines.length, 5);
});
