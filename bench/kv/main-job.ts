/**
 * `npm start`: the store end to end in well under a minute. Starts a KvServer in this process
 * on the embedded default transport (shm, a socket in a fresh temporary directory, a 256 MiB
 * region), loads 10,000 YCSB records through kv-bench's rdma-kv binding, runs workloada for
 * 500,000 operations, prints kv-bench's YCSB output for both phases (stdout) and a short
 * summary, and stops the server. Progress goes to stderr.
 *
 * Why 500,000: each phase's client threads are new worker isolates, and their first ~0.5 s runs
 * the client and harness before V8 has optimised them (measured: 9–40k ops/s in the run's first
 * 0.5 s, 150–250k/s after). A run of 50,000 operations (the default until 2026-12-04) lasted
 * 0.7 s and measured mostly that; 500,000 take 3–4 s here and measure the store.
 *
 *   node dist/bench/kv/main-job.js [--workload a|b|c|…] [--records N] [--operations N]
 *                                  [--threads N] [--inflight K] [--pollmode busy|event] [--seed N]
 *                                  [--max-seconds N] [--json FILE]
 *
 * --inflight is kvbench.inflight: operations in flight per client thread (YCSB: 1).
 * --json writes the summary (throughput, GC share and latency per phase and operation) to FILE
 * (the data-path benchmark, bench/kv/data-path.ts, reads it for its `npm start` rows).
 * --max-seconds (default 40) is a budget for both phases, enforced with YCSB's
 * maxexecutiontime (load: half of it; run: what is left), so the job ends in under a minute
 * even on a slow or busy machine. A phase cut short says so on stderr and in the summary; when
 * the load was cut short, the run draws its keys from the records actually loaded.
 * The server runs in this process (not as `kv-server`): nothing to find on PATH, nothing left
 * behind if the job is interrupted. The client threads are kv-bench's worker_threads, each
 * with its own KvClient, so the clients do not share the server's event loop.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { KvServer } from '../../server/kv-server.js';
import { exportPhase, runPhase, type Phase, type PhaseResult } from '../ycsb/client/client.js';
import { gcTimeMs } from '../ycsb/client/gc-stats.js';
import { summarize } from '../ycsb/measurements/aggregate.js';
import { createExporter } from '../ycsb/measurements/exporters.js';
import { Properties } from '../ycsb/properties.js';
import { writeFileEnsuringDir } from '../ycsb/report/results.js';
import { markdownTable } from './markdown-table.js';

const WORKLOADS = fileURLToPath(new URL('../../../bench/workloads/', import.meta.url));
const REGION_BYTES = 256 << 20;

const USAGE = `usage: node dist/bench/kv/main-job.js [--workload a] [--records 10000] [--operations 500000]
                                     [--threads 2] [--inflight 1] [--pollmode busy|event] [--seed N] [--max-seconds 40] [--json FILE]`;

interface JobOptions {
  workload: string;
  records: number;
  operations: number;
  threads: number;
  inflight: number;
  pollMode: 'busy' | 'event';
  seed: number | undefined;
  maxSeconds: number;
  json: string | undefined;
}

function parseOptions(argv: string[]): JobOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      workload: { type: 'string', default: 'a' },
      records: { type: 'string', default: '10000' },
      operations: { type: 'string', default: '500000' },
      threads: { type: 'string', default: '2' },
      inflight: { type: 'string', default: '1' },
      pollmode: { type: 'string', default: 'busy' },
      seed: { type: 'string' },
      'max-seconds': { type: 'string', default: '40' },
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(USAGE + '\n');
    process.exit(0);
  }
  const count = (name: string, text: string, min: number): number => {
    if (!/^\d+$/.test(text) || Number(text) < min) throw new Error(`--${name} expects an integer >= ${min}, got "${text}"`);
    return Number(text);
  };
  const workload = values.workload!.replace(/^workload/, '');
  if (!/^[a-f]$/.test(workload)) throw new Error(`--workload expects one of a…f, got "${values.workload}"`);
  const pollMode = values.pollmode;
  if (pollMode !== 'busy' && pollMode !== 'event') throw new Error(`--pollmode expects busy or event, got "${pollMode}"`);
  return {
    workload,
    records: count('records', values.records!, 1),
    operations: count('operations', values.operations!, 1),
    threads: count('threads', values.threads!, 1),
    inflight: count('inflight', values.inflight!, 1),
    pollMode,
    seed: values.seed === undefined ? undefined : count('seed', values.seed, 0),
    maxSeconds: count('max-seconds', values['max-seconds']!, 2),
    json: values.json,
  };
}

const progress = (text: string): void => void process.stderr.write(`main-job: ${text}\n`);

function ycsbText(result: PhaseResult): string {
  return exportPhase(createExporter(undefined), result);
}

/** One Markdown table: per phase and operation, count, throughput and latency percentiles. */
function summaryTable(results: PhaseResult[]): string {
  const rows: string[][] = [];
  for (const r of results) {
    const throughput = ((1000 * r.opsDone) / r.runtimeMs).toFixed(0);
    for (const m of r.measurements.ordered()) {
      if (m.exportName === 'CLEANUP') continue;
      const s = summarize(m.total);
      rows.push([r.phase, m.exportName, String(s.count), throughput, s.mean.toFixed(1), String(s.percentile(50)), String(s.percentile(95)), String(s.percentile(99)), String(s.max)]);
    }
  }
  return markdownTable(['phase', 'op', 'count', 'phase ops/s', 'avg µs', 'p50 µs', 'p95 µs', 'p99 µs', 'max µs'], rows, 'll');
}

/**
 * GC shares of a phase. Each client thread is its own isolate and a collection pauses only
 * that thread, so the share of the run spent in GC is the client threads' pauses over their
 * time (threads x runtime): `client`, the headline (the goal's "GC share"). `server` is this
 * thread's (the KvServer's and the harness's) over the runtime. `ycsb` is YCSB's
 * TOTAL_GC_TIME_%, every isolate's pauses over the wall time: with N threads it can reach
 * N × 100 %, so it is printed for comparison with older runs only. Collections count from the
 * phase's start (not a thread's set-up).
 */
function gcShares(r: PhaseResult) {
  const clientMs = gcTimeMs(r.clientGc);
  const serverMs = gcTimeMs(r.mainGc);
  return {
    clientMs,
    serverMs,
    client: (100 * clientMs) / (r.threads * r.runtimeMs),
    server: (100 * serverMs) / r.runtimeMs,
    ycsb: (100 * (clientMs + serverMs)) / r.runtimeMs,
  };
}

function gcLine(r: PhaseResult): string {
  const g = gcShares(r);
  return `${r.phase} ${g.client.toFixed(1)} % (${g.clientMs.toFixed(0)} ms over ${r.threads} × ${(r.runtimeMs / 1000).toFixed(2)} s), ` +
    `server thread ${g.server.toFixed(1)} % (${g.serverMs.toFixed(0)} ms), YCSB's TOTAL_GC_TIME_% ${g.ycsb.toFixed(1)} %`;
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  // This thread has said whether the addon lacks verbs (once, at import); the client threads
  // need not say it again.
  process.env.RKV_QUIET ??= '1';
  const started = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'rdma-kv-main-'));
  let server: KvServer | undefined;
  const cleanup = (): void => rmSync(dir, { recursive: true, force: true });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      progress(`${signal}: stopping`);
      cleanup();
      process.exit(signal === 'SIGINT' ? 130 : 143);
    });
  }
  try {
    server = await KvServer.start({ listen: [`shm://${join(dir, 'kv.sock')}`], memoryBytes: REGION_BYTES });
    const url = server.urls[0]!;
    progress(`KvServer listening on ${url} (${REGION_BYTES >> 20} MiB region, ${server.layout.bucketCount} buckets)`);

    const workloadFile = join(WORKLOADS, `workload${options.workload}`);
    const props = Properties.fromSources([workloadFile], [
      `recordcount=${options.records}`,
      `operationcount=${options.operations}`,
      `threadcount=${options.threads}`,
      `kvbench.inflight=${options.inflight}`,
      'db=rdma-kv',
      `rdmakv.url=${url}`,
      `rdmakv.pollmode=${options.pollMode}`,
      'kvbench.report=false',
      'kvbench.progress=false',
    ]);
    const results: PhaseResult[] = [];
    const notes: string[] = [];
    const budgetEnd = performance.now() + options.maxSeconds * 1000;
    let loaded = options.records;
    for (const phase of ['load', 'run'] as Phase[]) {
      const count = phase === 'load' ? options.records : options.operations;
      const left = (budgetEnd - performance.now()) / 1000;
      const maxSeconds = Math.max(1, Math.floor(phase === 'load' ? options.maxSeconds / 2 : left));
      const phaseProps: [string, string][] = [['status.interval', '5'], ['maxexecutiontime', String(maxSeconds)]];
      if (phase === 'run' && loaded < options.records) phaseProps.push(['recordcount', String(loaded)]);
      progress(`${phase}: workload${options.workload}, ${count.toLocaleString('en-US')} ${phase === 'load' ? 'records' : 'operations'}, ${options.threads} client thread(s), ${options.pollMode} polling, at most ${maxSeconds} s`);
      const t0 = performance.now();
      const result = await runPhase({
        props: props.with(phaseProps),
        phase,
        status: true,
        ...(options.seed !== undefined ? { seed: options.seed + (phase === 'run' ? 1 : 0) } : {}),
        // kv-bench's status lines (-s), minus the one printed before the first operation
        stderr: (text) => void process.stderr.write(text.split('\n').filter((l) => l && !/ 0 operations;/.test(l)).map((l) => `main-job:   ${l}\n`).join('')),
        stdout: (text) => void process.stdout.write(text),
      });
      results.push(result);
      if (phase === 'load') loaded = result.opsDone;
      if (result.opsDone < count) {
        const note = `${phase} stopped after ${maxSeconds} s (maxexecutiontime) with ${result.opsDone.toLocaleString('en-US')} of ${count.toLocaleString('en-US')} operations done` +
          (phase === 'load' ? '; the run reads and updates the records loaded' : '');
        progress(`WARNING: ${note}`);
        notes.push(note);
      }
      const failed = [...result.measurements.ordered()].filter((m) => m.exportName.endsWith('-FAILED'));
      progress(`${phase}: ${result.opsDone.toLocaleString('en-US')} operations in ${((performance.now() - t0) / 1000).toFixed(1)} s` +
        (failed.length ? ` (FAILED: ${failed.map((m) => `${m.exportName} ${summarize(m.total).count}`).join(', ')})` : ''));
      process.stdout.write(`\n# kv-bench ${phase} -db rdma-kv -P workload${options.workload} (${result.threads} threads)\n`);
      process.stdout.write(ycsbText(result));
    }
    const stats = server.stats();
    process.stdout.write(`\n# Summary (rdma-kv over shm, in-process KvServer, ${os()})\n${summaryTable(results)}\n`);
    for (const note of notes) process.stdout.write(`note: ${note}\n`);
    process.stdout.write(`\nGC share of the client threads' time (the server thread's, and every thread's over the wall time as YCSB sums it, beside it):\n`);
    for (const r of results) process.stdout.write(`GC: ${gcLine(r)}\n`);
    process.stdout.write(`server: ${stats.items.toLocaleString('en-US')} items, ${(stats.heapUsedBytes / 2 ** 20).toFixed(1)} MiB of ${(stats.heapBytes / 2 ** 20).toFixed(0)} MiB heap used, ${stats.notifications.toLocaleString('en-US')} write notifications, ${stats.clients} clients connected\n`);
    if (options.json !== undefined) {
      const file = resolve(options.json);
      writeFileEnsuringDir(file, JSON.stringify(summaryJson(options, results, notes), null, 2) + '\n');
      progress(`summary ${file}`);
    }
    const anyFailed = results.some((r) => [...r.measurements.ordered()].some((m) => m.exportName.endsWith('-FAILED')));
    if (anyFailed) process.exitCode = 1;
  } finally {
    if (server) {
      progress('stopping the server');
      await server.close();
    }
    cleanup();
    progress(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
}

function summaryJson(options: JobOptions, results: PhaseResult[], notes: string[]) {
  return {
    benchmark: 'kv-main-job',
    date: new Date().toISOString(),
    machine: { cpu: cpus()[0]?.model ?? 'unknown', vcpus: cpus().length, node: process.version, loadavg: loadavg() },
    config: { ...options, transport: 'shm', regionBytes: REGION_BYTES, server: 'in-process KvServer' },
    phases: results.map((r) => ({
      phase: r.phase,
      threads: r.threads,
      runtimeMs: r.runtimeMs,
      operations: r.opsDone,
      throughput: (1000 * r.opsDone) / r.runtimeMs,
      // gcPercent: the client threads' share (see gcShares); the others for comparison
      gcMs: gcShares(r).clientMs,
      gcPercent: gcShares(r).client,
      serverGcMs: gcShares(r).serverMs,
      serverGcPercent: gcShares(r).server,
      ycsbGcPercent: gcShares(r).ycsb,
      latencyUs: Object.fromEntries(
        [...r.measurements.ordered()]
          .filter((m) => m.exportName !== 'CLEANUP')
          .map((m) => {
            const s = summarize(m.total);
            return [m.exportName, { count: s.count, avg: s.mean, p50: s.percentile(50), p95: s.percentile(95), p99: s.percentile(99), max: s.max }];
          }),
      ),
    })),
    notes,
  };
}

function os(): string {
  return `Node ${process.version}, ${process.platform}/${process.arch}`;
}

main().catch((error: unknown) => {
  process.stderr.write(`main-job: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
