/**
 * Harness benchmark (not a test): how many operations per second one kv-bench client thread
 * drives through the no-op `basic` binding with workload A (zipfian, 50/50 read/update). This is
 * the ceiling the harness imposes on any store; the goal is >= 3 M ops/s per thread.
 *
 *   node dist/bench/ycsb/harness-bench.js [operations] [repetitions]
 *
 * Writes bench/results/ycsb-harness.json.
 */
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Properties } from './properties.js';
import { runPhase } from './client/client.js';
import { defaultResultsDir, writeFileEnsuringDir } from './report/results.js';

const operations = Number(process.argv[2] ?? 5_000_000);
const repetitions = Number(process.argv[3] ?? 5);
const workload = fileURLToPath(new URL('../../../bench/workloads/workloada', import.meta.url));
const props = Properties.fromSources([workload], ['basicdb.verbose=false', `operationcount=${operations}`]);
const quiet = { stderr: () => {}, stdout: () => {} };

await runPhase({ props, phase: 'load', db: 'basic', ...quiet });
/** wall-clock ops/s, and (in-process only) ops per second of process CPU time, which stays meaningful when other jobs share the machine */
const runs: { mode: string; opsPerSec: number; runtimeMs: number; opsPerCpuSec?: number }[] = [];
for (const mode of ['worker_thread', 'in-process'] as const) {
  for (let i = 0; i < repetitions; i++) {
    const cpu0 = process.cpuUsage();
    const r = await runPhase({ props, phase: 'run', db: 'basic', threads: 1, inProcess: mode === 'in-process', seed: i + 1, ...quiet });
    const cpu = process.cpuUsage(cpu0);
    const opsPerSec = (1000 * r.opsDone) / r.runtimeMs;
    const opsPerCpuSec = mode === 'in-process' ? (1e6 * r.opsDone) / (cpu.user + cpu.system) : undefined;
    runs.push({ mode, opsPerSec, runtimeMs: r.runtimeMs, ...(opsPerCpuSec ? { opsPerCpuSec } : {}) });
    process.stdout.write(
      `${mode.padEnd(13)} run ${i + 1}: ${(opsPerSec / 1e6).toFixed(3)} M ops/s per thread (${r.opsDone} ops in ${r.runtimeMs} ms)` +
        (opsPerCpuSec ? `, ${(opsPerCpuSec / 1e6).toFixed(3)} M ops per CPU-second` : '') +
        '\n',
    );
  }
}
const summary = (mode: string) => {
  const xs = runs.filter((r) => r.mode === mode).map((r) => r.opsPerSec).sort((a, b) => a - b);
  return { best: xs[xs.length - 1]!, median: xs[Math.floor(xs.length / 2)]! };
};
const worker = summary('worker_thread');
const inProcess = summary('in-process');
const cpuRates = runs.flatMap((r) => (r.opsPerCpuSec ? [r.opsPerCpuSec] : [])).sort((a, b) => a - b);
const perCpuSecond = { best: cpuRates[cpuRates.length - 1]!, median: cpuRates[Math.floor(cpuRates.length / 2)]! };
process.stdout.write(
  `\nworkloada, basic binding, 1 thread: median ${(worker.median / 1e6).toFixed(3)} M ops/s (best ${(worker.best / 1e6).toFixed(3)}) in a worker_thread; ` +
    `median ${(inProcess.median / 1e6).toFixed(3)} M ops/s in-process (${(perCpuSecond.median / 1e6).toFixed(3)} M ops per CPU-second); target 3 M ops/s\n`,
);
const out = join(defaultResultsDir(), 'ycsb-harness.json');
writeFileEnsuringDir(
  out,
  JSON.stringify(
    {
      benchmark: 'ycsb-harness',
      workload: 'workloada',
      db: 'basic',
      threads: 1,
      operationsPerRun: operations,
      node: process.version,
      cpu: cpus()[0]?.model ?? 'unknown',
      cpus: cpus().length,
      date: new Date().toISOString(),
      workerThreadOpsPerSec: worker,
      inProcessOpsPerSec: inProcess,
      inProcessOpsPerCpuSecond: perCpuSecond,
      targetOpsPerSec: 3_000_000,
      runs,
    },
    null,
    2,
  ) + '\n',
);
process.stdout.write(`wrote ${out}\n`);
