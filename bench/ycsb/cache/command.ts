/**
 * `kv-bench cache`: settings, the rows, the table and goals on stdout, the JSON under
 * kvbench.resultsdir (bench/results/kv-bench-cache-<time>.json; kvbench.report=false: none).
 * A row that failed makes the exit code 1; a row that is not built or whose server is missing
 * does not (the table says why).
 */
import { join, resolve } from 'node:path';

import type { CliIO } from '../cli.js';
import type { Properties } from '../properties.js';
import { installSignalHandlers } from '../compare/servers.js';
import { defaultResultsDir, writeFileEnsuringDir } from '../report/results.js';
import { cacheSettings } from './options.js';
import { cacheDocument, cacheTable, describeWorkload, goalLines } from './report.js';
import { cacheGoals, runCache } from './run.js';
import { CacheWorkload } from './workload.js';

export async function cacheCommand(props: Properties, flags: { db?: string; eviction?: string; seed?: number }, io: CliIO): Promise<void> {
  const settings = cacheSettings(props, flags);
  installSignalHandlers();
  const { keys, valueBytes, warmup, operations, theta, seed, memory, heapBytes, lanes } = settings;
  const workload = new CacheWorkload({ keys, valueBytes, warmup, operations, theta, seed });
  const description = describeWorkload(workload, memory, heapBytes, lanes);
  io.stderr(`kv-bench: cache: ${description}\n`);
  const rows = await runCache({ props, dbs: settings.dbs, policies: settings.policies, memory, workload, lanes, kvServerArgs: settings.kvServerArgs, stderr: io.stderr });
  const goals = cacheGoals(rows);
  const lines = [`kv-bench cache: ${description}`, '', cacheTable(rows), ''];
  lines.push('hit ratio: GETs that found the key over all GETs, measured part only; not cached: misses whose PUT was refused for lack of memory;');
  lines.push('server CPU: the server process\'s utime + stime (/proc/<pid>/stat) over the measured part, per request; resident keys: held at the end.');
  lines.push(...goalLines(goals));
  io.stdout(lines.join('\n') + '\n');
  if (props.getBoolean('kvbench.report', true)) {
    const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    const file = join(resolve(props.get('kvbench.resultsdir', defaultResultsDir())), `kv-bench-cache-${stamp}.json`);
    writeFileEnsuringDir(file, JSON.stringify(cacheDocument(rows, goals, workload, memory, heapBytes, lanes), null, 2) + '\n');
    io.stderr(`kv-bench: cache results ${file}\n`);
  }
  const failed = rows.filter((r) => r.unavailable?.startsWith('failed'));
  const wrong = rows.filter((r) => (r.result?.wrong ?? 0) > 0);
  if (failed.length > 0 || wrong.length > 0) {
    throw new Error(`cache: ${[...failed.map((r) => `${r.db} ${r.policy} ${r.unavailable}`), ...wrong.map((r) => `${r.db} ${r.policy}: ${r.result!.wrong} wrong values`)].join('; ')}`);
  }
}
