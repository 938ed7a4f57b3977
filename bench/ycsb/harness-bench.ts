/**
 * Harness benchmark (not a test): how many operations per second one kv-bench client thread
 * drives through the no-op `basic` binding, per workload. This is the ceiling the harness
 * imposes on any store; the goal is >= 3 M ops/s per thread.
 *
 *   node dist/bench/ycsb/harness-bench.js [operations] [repetitions] [workload ...]
 *
 * Defaults: 10,000,000 operations (about 3 s: every worker_thread run starts with a cold JIT, and
 * a short run counts that warm-up more heavily), 5 repetitions, workloads a and c (names under
 * bench/workloads, with or without the "workload" prefix). Each run is one client thread, in a
 * worker_thread (what `kv-bench run` uses) and in the main thread. Besides wall-clock ops/s, the
 * in-process runs report ops per CPU-second of the process, which stays meaningful when other
 * jobs share the machine (for a worker_thread run the process's CPU time would also count the
 * thread's start). It then times the parts of an operation on their own (see `partCosts`), so the
 * docs can say what costs what. Writes bench/results/ycsb-harness.json.
 */
import { existsSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Properties } from './properties.js';
import { runPhase } from './client/client.js';
import { defaultResultsDir, writeFileEnsuringDir } from './report/results.js';
import { Random } from './random.js';
import { ScrambledZipfianGenerator, SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN, ZipfianGenerator } from './generators/zipfian.js';
import { fnvhash64Mod } from './hash.js';

const TARGET = 3_000_000;
const WORKLOADS = fileURLToPath(new URL('../../../bench/workloads/', import.meta.url));
const USAGE = 'usage: node dist/bench/ycsb/harness-bench.js [operations (10000000)] [repetitions (5)] [workload ... (a c)]';

function positiveInt(text: string | undefined, fallback: number, what: string): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text) || Number(text) < 1) {
    process.stderr.write(`harness-bench: ${what} must be a positive integer, got "${text}"\n${USAGE}\n`);
    process.exit(2);
  }
  return Number(text);
}

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(USAGE + '\n');
  process.exit(0);
}
const operations = positiveInt(args[0], 10_000_000, 'operations');
const repetitions = positiveInt(args[1], 5, 'repetitions');
const workloads = (args.length > 2 ? args.slice(2) : ['a', 'c']).map((w) => (w.startsWith('workload') ? w : `workload${w}`));
for (const w of workloads) {
  if (!existsSync(join(WORKLOADS, w))) {
    process.stderr.write(`harness-bench: no workload ${w} in ${WORKLOADS}\n${USAGE}\n`);
    process.exit(2);
  }
}

const quiet = { stderr: () => {}, stdout: () => {} };
const MODES = ['worker_thread', 'in-process'] as const;
type Mode = (typeof MODES)[number];

interface Run {
  workload: string;
  mode: Mode;
  opsPerSec: number;
  /** in-process runs only */
  opsPerCpuSec?: number;
  runtimeMs: number;
}
/** median and best of the repetitions */
interface Stat {
  median: number;
  best: number;
}

const stat = (xs: number[]): Stat => {
  const s = [...xs].sort((a, b) => a - b);
  return { median: s[Math.floor(s.length / 2)]!, best: s[s.length - 1]! };
};
const millions = (x: number): string => (x / 1e6).toFixed(2);

const runs: Run[] = [];
for (const workload of workloads) {
  const props = Properties.fromSources([join(WORKLOADS, workload)], ['basicdb.verbose=false', `operationcount=${operations}`]);
  await runPhase({ props, phase: 'load', db: 'basic', ...quiet });
  for (const mode of MODES) {
    for (let i = 0; i < repetitions; i++) {
      const cpu0 = process.cpuUsage();
      const r = await runPhase({ props, phase: 'run', db: 'basic', threads: 1, inProcess: mode === 'in-process', seed: i + 1, ...quiet });
      const cpu = process.cpuUsage(cpu0);
      const run: Run = { workload, mode, opsPerSec: (1000 * r.opsDone) / r.runtimeMs, runtimeMs: r.runtimeMs };
      if (mode === 'in-process') run.opsPerCpuSec = (1e6 * r.opsDone) / (cpu.user + cpu.system);
      runs.push(run);
      process.stdout.write(
        `${workload} ${mode.padEnd(13)} run ${i + 1}: ${millions(run.opsPerSec)} M ops/s per thread (${r.opsDone} ops in ${r.runtimeMs} ms)` +
          (run.opsPerCpuSec ? `, ${millions(run.opsPerCpuSec)} M ops per CPU-second` : '') +
          '\n',
      );
    }
  }
}

/**
 * CPU nanoseconds per call of the parts every operation pays for, each timed in its own loop
 * (best of 5). In the harness they overlap somewhat and add call and bookkeeping costs, so they
 * explain the per-operation cost rather than sum to it.
 */
function partCosts(): { [part: string]: number } {
  const n = 2_000_000;
  let sink = 0;
  /** each loop sums into a local and returns it: a captured accumulator would allocate per call */
  const time = (loop: () => number): number => {
    let best = Infinity;
    for (let r = 0; r < 5; r++) {
      const c0 = process.cpuUsage();
      sink += loop();
      const c = process.cpuUsage(c0);
      best = Math.min(best, ((c.user + c.system) * 1000) / n);
    }
    return best;
  };
  const rng = new Random(1);
  const zipfian = new ZipfianGenerator(new Random(2), 0, SCRAMBLED_ITEM_COUNT, 0.99, SCRAMBLED_ZETAN);
  const scrambled = new ScrambledZipfianGenerator(new Random(3), 0, 999);
  const ranks = Float64Array.from({ length: 1 << 16 }, () => 65536 + zipfian.nextValue()); // all outside the hash cache
  const control = new Int32Array(new SharedArrayBuffer(8)); // like the client thread's stop/sample word
  const costs = {
    'performance.now()': time(() => {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += performance.now();
      return sum;
    }),
    'Atomics.load of the shared control word': time(() => {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += Atomics.load(control, 0);
      return sum;
    }),
    'Random.nextDouble()': time(() => {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += rng.nextDouble();
      return sum;
    }),
    'zipfian draw over 10^10 items (exp, log)': time(() => {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += zipfian.nextValue();
      return sum;
    }),
    'FNV-1a 64 mod 1000 of an uncached rank': time(() => {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += fnvhash64Mod(ranks[i & 0xffff]!, 1000);
      return sum;
    }),
    'scrambled zipfian key choice (1000 records)': time(() => {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += scrambled.nextValue();
      return sum;
    }),
  };
  if (sink === -1) process.stdout.write('\n'); // keeps the loops from being optimised away
  return costs;
}

const parts = partCosts();
const summary = workloads.map((workload) => {
  const of = (mode: Mode) => runs.filter((r) => r.workload === workload && r.mode === mode);
  return {
    workload,
    workerThreadOpsPerSec: stat(of('worker_thread').map((r) => r.opsPerSec)),
    inProcessOpsPerSec: stat(of('in-process').map((r) => r.opsPerSec)),
    inProcessOpsPerCpuSecond: stat(of('in-process').map((r) => r.opsPerCpuSec!)),
  };
});

const both = (x: Stat): string => `${millions(x.median)} (${millions(x.best)})`;
const rows = summary.map(
  (s) =>
    `| ${s.workload} | ${both(s.workerThreadOpsPerSec)} | ${both(s.inProcessOpsPerSec)} | ${both(s.inProcessOpsPerCpuSecond)} | ${(1e9 / s.inProcessOpsPerCpuSecond.median).toFixed(0)} |`,
);
process.stdout.write(
  [
    '',
    `basic binding, 1 client thread, ${operations.toLocaleString('en-US')} operations per run, median (best) of ${repetitions}; target ${millions(TARGET)} M ops/s per thread`,
    '',
    '| workload | M ops/s, worker_thread | M ops/s, in-process | M ops per CPU-second, in-process | CPU ns per op |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    '| part of an operation | CPU ns per call |',
    '| --- | ---: |',
    ...Object.entries(parts).map(([part, ns]) => `| ${part} | ${ns.toFixed(1)} |`),
    '',
  ].join('\n'),
);

const out = join(defaultResultsDir(), 'ycsb-harness.json');
writeFileEnsuringDir(
  out,
  JSON.stringify(
    {
      benchmark: 'ycsb-harness',
      db: 'basic',
      threads: 1,
      operationsPerRun: operations,
      repetitions,
      node: process.version,
      cpu: cpus()[0]?.model ?? 'unknown',
      cpus: cpus().length,
      loadAverage1m: loadavg()[0],
      date: new Date().toISOString(),
      targetOpsPerSec: TARGET,
      workloads: summary,
      partCostsNs: parts,
      runs,
    },
    null,
    2,
  ) + '\n',
);
process.stdout.write(`wrote ${out}\n`);
