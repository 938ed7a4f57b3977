/**
 * `kv-bench cache` end to end, as a user runs it (bin/kv-bench.js in a child process, TMPDIR
 * private): one table with a row per store and policy, each measured or saying why not (a
 * kv-server without --eviction: "not built"), the JSON beside it with counts that add up, and
 * nothing left behind. That case needs redis-server: without it, it is skipped with one line, or
 * fails under CI=true (../helpers/tools.ts). Bad input: one line, exit code 2.
 * Sizes are tiny: the numbers mean nothing here, only the shape and the counts.
 */
import test from 'ava';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { needing } from '../helpers/tools.js';

const KV_BENCH = fileURLToPath(new URL('../../../bin/kv-bench.js', import.meta.url));

function kvBench(args: string[], tmp: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [KV_BENCH, ...args], { env: { ...process.env, TMPDIR: tmp, RKV_QUIET: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 100_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

interface JsonRow {
  db: string;
  policy: string;
  unavailable?: string;
  result?: { operations: number; hits: number; misses: number; notCached: number; wrong: number };
  hitRatioPercent?: number;
  serverCpuUsPerOp?: number;
  resident?: { keys: number };
}

needing(test, 'redis-server')('kv-bench cache: a row per store and policy, measured or honestly absent; JSON counts add up; nothing left behind', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'kv-bench-cache-test-'));
  try {
    const results = join(tmp, 'results');
    // 20,000 keys of 1 KiB against a heap of about 5.5 MiB: the key space is ~3.5× the heap
    const { code, stdout, stderr } = await kvBench(
      ['cache', '--db', 'rdma-kv,redis', '--eviction', 'none,lru', '-p', 'cache.memory=8MiB', '-p', 'recordcount=20000', '-p', 'cache.warmupcount=5000', '-p', 'operationcount=20000', '-p', `kvbench.resultsdir=${results}`],
      tmp,
    );
    t.is(code, 0, stderr);
    const lines = stdout.split('\n');
    t.regex(lines[0]!, /^kv-bench cache: read-through over 20,000 keys × 1024 B values/);
    const rows = lines.filter((l) => /^\| (rdma-kv|redis)/.test(l));
    t.is(rows.length, 4, stdout);
    const cell = (line: string, i: number): string => line.split('|')[i + 1]!.trim();
    for (const line of rows) {
      t.regex(cell(line, 2), /^\d+\.\d\d %$|^not built \(server has no --eviction\)$/, line);
    }
    t.regex(cell(rows.find((l) => cell(l, 0) === 'rdma-kv' && cell(l, 1) === 'none')!, 2), /^\d+\.\d\d %$/, 'eviction none runs on every server');

    const files = readdirSync(results);
    t.is(files.length, 1);
    t.regex(files[0]!, /^kv-bench-cache-\d{8}T\d{6}Z\.json$/);
    const doc = JSON.parse(readFileSync(join(results, files[0]!), 'utf8')) as { kind: string; workload: { keys: number; itemMemoryBytes: number }; rows: JsonRow[] };
    t.is(doc.kind, 'cache');
    t.is(doc.workload.keys, 20_000);
    t.deepEqual(doc.rows.map((r) => `${r.db} ${r.policy}`), ['rdma-kv none', 'redis none', 'rdma-kv lru', 'redis lru']);
    for (const r of doc.rows) {
      if (r.unavailable !== undefined) {
        t.regex(r.unavailable, /^not built/); // redis-server is here: never missing
        continue;
      }
      const c = r.result!;
      t.is(c.operations, 20_000);
      t.is(c.hits + c.misses, 20_000);
      t.is(c.wrong, 0);
      t.true(c.hits > 0, `${r.db} ${r.policy}: the zipfian's hot keys hit`);
      t.true(r.serverCpuUsPerOp! >= 0);
      t.true(r.resident!.keys > 0 && r.resident!.keys < 20_000, `${r.db} ${r.policy}: holds part of the key space`);
      if (r.policy === 'none') t.true(c.notCached > 0, `${r.db}: without eviction a full store refuses PUTs, counted as not cached`);
      else t.is(c.notCached, 0, `${r.db} ${r.policy}: with eviction every PUT is taken`);
    }
    t.deepEqual(readdirSync(tmp), ['results'], 'no socket directory left');
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test('kv-bench cache: bad input is one line and exit code 2', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'kv-bench-cache-test-'));
  try {
    const cases: [string[], RegExp][] = [
      [['cache', '--eviction', 'lru2'], /^kv-bench: --eviction: unknown 'lru2' \(one of none, lru, lfu\)\n$/],
      [['cache', '--db', 'memcached'], /^kv-bench: --db: unknown 'memcached' \(one of rdma-kv, redis\)\n$/],
      [['run', '--eviction', 'lru'], /^kv-bench: --eviction is an option of kv-bench cache\n$/],
      [['cache', '-p', 'cache.memory=1MiB'], /^kv-bench: cache\.memory 1MiB: memory too small/],
      [['cache', '-p', 'cache.kvserverargs=--memory 1GiB'], /^kv-bench: cache\.kvserverargs: --memory is set by kv-bench cache itself/],
      [['cache', '-p', 'cache.theta=1'], /^kv-bench: cache\.theta: 1 is not between 0 and 1/],
      [['cache', '-p', 'cache.valuebytes=2'], /^kv-bench: cache\.valuebytes: 2 is out of range/],
    ];
    for (const [args, message] of cases) {
      const { code, stdout, stderr } = await kvBench(args, tmp);
      t.is(code, 2, args.join(' '));
      t.regex(stderr, message, args.join(' '));
      t.is(stdout, '');
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
