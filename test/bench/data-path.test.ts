/**
 * The data-path benchmark (bench/kv/data-path.ts) end to end with --quick on shm: it runs,
 * prints one table of the rows and columns docs/benchmarks.md describes, and every row has a
 * number or says honestly why not. No timing thresholds: a benchmark's numbers are not a test.
 */
import test from 'ava';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { run } from '../server/helpers.js';

const SCRIPT = fileURLToPath(new URL('../../bench/kv/data-path.js', import.meta.url));

/** The benchmark to its end (a guard against a hang, not a timing assertion). */
const bench = (args: string[]) => run(SCRIPT, args, { guardMs: 110_000 });

const ROWS = [
  /^floor: batch-1 READ 64 B \(shm\)$/,
  /^floor: batch-64 READ 1 KiB, per READ$/,
  /^floor: batch-1 READ 1 KiB at random in 256 MiB$/,
  /^floor: batch-64 READ 1 KiB at random, per READ$/,
  /^sequential get$/,
  /^64-in-flight get$/,
  /^getMany\(64\), per key$/,
  /^sequential put$/,
  /^64-in-flight put$/,
  /^putMany\(64\), per key$/,
  /^server CPU per GET/,
  /^server CPU per PUT/,
  /^client CPU per GET/,
  /^client CPU per PUT/,
  /^1-RTT GET hit rate$/,
  /^`npm start` run ops\/s$/,
  /^`npm start` GC share$/,
  /^guest: batch-1 READ \/ ib_read_lat$/,
  /^guest: GET \/ ib_read_lat$/,
  /^guest: cached GET \/ ib_read_lat$/,
];
/** A cell that has a number, or says why it has none. */
const MEASURED = /\d|^not built$|^missing$/;
const VERDICT = /^(yes|NO|not built|missing|—)$/;

test('data-path --quick: one table, every row measured or honestly absent, JSON beside it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-data-path-test-'));
  try {
    const json = join(dir, 'data-path.json');
    const { code, stdout, stderr } = await bench(['--quick', '--json', json]);
    t.is(code, 0, stderr);
    const lines = stdout.split('\n').filter((l) => l.startsWith('|'));
    const table = lines.map((l) => l.slice(1, -1).split('|').map((c) => c.trim()));
    t.deepEqual(table[0], ['what', 'rdma-kv', 'floor (×)', 'ioredis (×)', 'goal', 'met?']);
    t.true(table[1]!.every((c) => /^-+:?$/.test(c)), 'the rule under the header');
    const rows = table.slice(2);
    t.is(rows.length, ROWS.length, stdout);
    rows.forEach((row, i) => {
      const [what, rdmaKv, floor, ioredis, goal, met] = row as [string, string, string, string, string, string];
      t.is(row.length, 6, what);
      t.regex(what, ROWS[i]!);
      // the floor rows have their number in the floor column, every other row in rdma-kv's
      t.regex(what.startsWith('floor:') ? floor : rdmaKv, MEASURED, what);
      t.regex(ioredis, /\d|^missing$|^—$/, `${what}: ioredis`);
      const verdicts = met.split('; ');
      t.is(verdicts.length, goal === '—' ? 1 : goal.split('; ').length, `${what}: a verdict per goal`);
      for (const v of verdicts) t.regex(v, VERDICT, what);
    });
    t.regex(rows[14]![1]!, /^not built$|%$/, 'the 1-RTT hit rate is a share, or not built');
    // the GET rows also say how they compare with the same READs at random (the cold floor)
    t.regex(rows[4]![2]!, /^[\d.]+× 1 READ · [\d.]+× cold READ$/, 'sequential get against both floors');
    t.regex(rows[6]![2]!, /^[\d.]+× 2 READs@64 · [\d.]+× cold 2 READs@64$/, 'getMany against both floors');
    if (!/^ioredis: redis-server is not installed/m.test(stdout)) t.regex(stdout, /ioredis on redis-server \d/);

    const doc = JSON.parse(readFileSync(json, 'utf8')) as {
      rows: unknown[];
      floor: { read1: { usPerRead: number }; spreadMiB: number; cold1: { usPerRead: number; bytes: number }; cold64: { usPerRead: number; batch: number } };
      phases: { rdmaKv: Record<string, { keys: number; wrong: number }> };
    };
    t.is(doc.rows.length, ROWS.length);
    t.true(doc.floor.read1.usPerRead > 0);
    t.true(doc.floor.cold1.usPerRead > 0 && doc.floor.cold64.usPerRead > 0);
    t.is(doc.floor.spreadMiB, 256, 'the cold floor READs across a region as large as the server child region');
    t.is(doc.floor.cold1.bytes, 1024);
    t.is(doc.floor.cold64.batch, 64);
    for (const [phase, r] of Object.entries(doc.phases.rdmaKv)) {
      t.true(r.keys > 0, phase);
      t.is(r.wrong, 0, `${phase}: every GET answered its key's value`);
    }
    const mainJob = JSON.parse(readFileSync(join(dir, 'kv-main-job.json'), 'utf8')) as { phases: Array<{ phase: string; gcPercent: number }> };
    t.true(mainJob.phases.every((p) => typeof p.gcPercent === 'number' && p.gcPercent >= 0), 'the main job reports its GC share');
    const socketDir = /rdma-kv server pid \d+ on shm:\/\/(\S+)\/kv\.sock/.exec(stderr)?.[1];
    t.truthy(socketDir, stderr);
    t.false(existsSync(socketDir!), 'the server child removed its socket directory');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('data-path as the Soft-RoCE guest runs it (bench-ratio.sh: sequential gets only, no redis, main job or floor): the JSON has what bench-ratio.sh reads', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-data-path-test-'));
  try {
    const json = join(dir, 'data-path.json');
    const { code, stdout, stderr } = await bench(['--quick', '--phases', 'get', '--skip', 'redis,main-job,floor', '--keys', '500', '--json', json]);
    t.is(code, 0, stderr);
    t.notRegex(stderr, /transport floor/, 'no floor was measured');
    const rows = stdout.split('\n').filter((l) => l.startsWith('|')).slice(2).map((l) => l.slice(1, -1).split('|').map((c) => c.trim()));
    const row = (what: RegExp): string[] => {
      const found = rows.find((r) => what.test(r[0]!));
      if (found === undefined) throw new Error(`no row ${what} in:\n${stdout}`);
      return found;
    };
    t.deepEqual(row(/^floor: batch-1 READ 64 B$/).slice(2, 3), ['skipped']);
    t.deepEqual(row(/^floor: batch-64 READ 1 KiB, per READ$/).slice(2, 3), ['skipped']);
    t.deepEqual(row(/^floor: batch-1 READ 1 KiB at random$/).slice(2, 3), ['skipped']);
    const get = row(/^sequential get$/);
    t.regex(get[1]!, /\d/, 'the sequential get was measured');
    t.is(get[5], 'skipped', 'its goal against the floor cannot be judged without one');
    t.is(row(/^64-in-flight get$/)[1], 'skipped');
    t.is(row(/^`npm start` run ops\/s$/)[1], 'skipped');
    t.false(existsSync(join(dir, 'kv-main-job.json')), 'the main job did not run');

    // bench-ratio.sh's GET row: the median sequential GET, the hit rate, the run's size and server
    const doc = JSON.parse(readFileSync(json, 'utf8')) as {
      floor: unknown;
      oneRoundTripPercent: unknown;
      config: { keys: number; valueBytes: number; secondsPerPhase: number; server: string };
      phases: { rdmaKv: Record<string, { latencyUs: { p50: number }; wrong: number }>; ioredis: unknown };
    };
    t.is(doc.floor, 'skipped');
    t.is(doc.phases.ioredis, 'skipped');
    t.deepEqual(Object.keys(doc.phases.rdmaKv), ['get']);
    t.true(doc.phases.rdmaKv['get']!.latencyUs.p50 > 0);
    t.is(doc.phases.rdmaKv['get']!.wrong, 0);
    t.true(typeof doc.oneRoundTripPercent === 'number' || doc.oneRoundTripPercent === 'not built');
    t.like(doc.config, { keys: 500, valueBytes: 1024 });
    t.true(doc.config.secondsPerPhase > 0);
    t.regex(doc.config.server, /^shm:\/\//);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('data-path: bad options exit with code 2 and say what was wrong', async (t) => {
  for (const [args, message] of [
    [['--phases', 'get,scan'], /--phases: unknown 'scan'/],
    [['--skip', 'redis,flor'], /--skip: unknown 'flor' \(one of redis, main-job, floor\)/],
    [['--seconds', '0'], /--seconds/],
    [['--keyz', '10'], /did you mean --keys\?/],
    [['--keys', '2000', '--value-bytes', '1048576'], /more than 1 GiB of values/],
  ] as const) {
    const { code, stderr } = await bench([...args]);
    t.is(code, 2, stderr);
    t.regex(stderr, message);
  }
});
