/**
 * The `npm start` rows: the main job (bench/kv/main-job.ts: an in-process KvServer, kv-bench's
 * workloada through the rdma-kv binding, 2 client threads) run as a child with its defaults,
 * its summary read from the JSON it writes. Its own YCSB output is not shown here; `npm start`
 * prints it.
 */
import { readFileSync } from 'node:fs';

import { runScript } from './processes.js';

export interface NpmStart {
  /** the run phase's throughput, ops/s */
  runOpsPerSec: number;
  /** the run phase's GC share: the client threads' collection time over their time in the phase, % (main-job.ts, gcShares) */
  runGcPercent: number;
  operations: number;
  json: string;
  /** set when a phase was cut short by the job's time budget */
  notes: string[];
}

interface MainJobSummary {
  phases: Array<{ phase: string; operations: number; throughput: number; gcPercent?: number }>;
  notes: string[];
}

/** Runs the main job; its summary goes to `json`. */
export async function runNpmStart(quick: boolean, pollMode: string, json: string): Promise<NpmStart> {
  const size = quick ? ['--records', '300', '--operations', '600', '--max-seconds', '20'] : [];
  const { code, stderr } = await runScript('dist/bench/kv/main-job.js', [...size, '--pollmode', pollMode, '--json', json], 120_000);
  if (code !== 0) throw new Error(`the main job failed (code ${code}): ${stderr.trim().split('\n').pop()}`);
  const summary = JSON.parse(readFileSync(json, 'utf8')) as MainJobSummary;
  const run = summary.phases.find((p) => p.phase === 'run');
  if (!run || run.gcPercent === undefined) throw new Error(`${json} has no run phase with its GC share`);
  return { runOpsPerSec: run.throughput, runGcPercent: run.gcPercent, operations: run.operations, json, notes: summary.notes };
}
