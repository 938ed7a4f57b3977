/**
 * The access-control benchmark (bench/kv/access-control.ts) end to end, as short as it goes, on
 * shm: it starts its servers as it says (windows on, off, two namespaces; it checks each server's
 * memoryWindows and that its read client cannot PUT, and exits non-zero otherwise), prints one
 * table with a row per client and batch, and writes its JSON. No timing thresholds: a
 * benchmark's numbers are not a test.
 */
import test from 'ava';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { run } from '../server/helpers.js';

const SCRIPT = fileURLToPath(new URL('../../bench/kv/access-control.js', import.meta.url));

/** The benchmark to its end (a guard against a hang, not a timing assertion). */
const bench = (args: string[]) => run(SCRIPT, args, { guardMs: 110_000 });

test('access-control: four clients × two batch sizes, each with a rate and a ratio to the no-windows client, JSON beside it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-acl-bench-test-'));
  try {
    const json = join(dir, 'access-control.json');
    const { code, stdout, stderr } = await bench(['--rounds', '1', '--seconds', '0.05', '--keys', '300', '--json', json]);
    t.is(code, 0, stderr);
    const rows = stdout.split('\n').filter((l) => l.startsWith('|')).slice(2).map((l) => l.slice(1, -1).split('|').map((c) => c.trim()));
    t.deepEqual(rows.map((r) => `${r[0]!.slice(0, 3)} ${r[1]}`), ['(1)', '(2)', '(3)', '(4)', '(1)', '(2)', '(3)', '(4)'].map((c, i) => `${c} ${i < 4 ? 'one at a time' : 'batches of 32'}`));
    for (const row of rows) {
      t.regex(row[2]!, /^[\d,]+$/, row[0]);
      t.regex(row[4]!, /^\d+\.\d{3}$/, row[0]);
    }
    t.deepEqual(rows.filter((r) => r[0]!.startsWith('(2)')).map((r) => r[4]), ['1.000', '1.000'], 'the no-windows client is the reference');
    const saved = JSON.parse(readFileSync(json, 'utf8')) as { benchmark: string; results: { cell: string; batch: number; medianOps: number }[] };
    t.is(saved.benchmark, 'access-control');
    t.is(saved.results.length, 8);
    t.true(saved.results.every((r) => r.medianOps > 0));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
