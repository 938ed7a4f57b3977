/**
 * YCSB's Client: validates the configuration, starts one client thread per -threads (each a
 * worker_thread with its own binding instance), times the phase from thread start to the last
 * thread's end, prints status lines (-s) and a load progress bar, samples throughput and
 * latency over time for the report, and gathers the measurements.
 */
import { Worker } from 'node:worker_threads';
import { randomInt } from 'node:crypto';
import cliProgress from 'cli-progress';
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { checkBindingName } from '../db/registry.js';
import { newWorkloadSharedState, parseCoreWorkloadConfig } from '../workload/core-config.js';
import { AggregatedMeasurements, summarize } from '../measurements/aggregate.js';
import { parseMeasurementInterval } from '../measurements/thread-measurements.js';
import { type MeasurementsExporter, exportMeasurements, parsePercentiles } from '../measurements/exporters.js';
import { splitOperationCount } from './split.js';
import { runClientThread } from './client-thread.js';
import { GcStats, mergeGc } from './gc-stats.js';
import { statusLine } from './status.js';
import { tuneGcForClientThreads, tuneJitForClientThreads } from './jit.js';
import { CONTROL_EPOCH, CONTROL_SLOTS, requestStop, type ClientThreadData, type GcCollector, type ThreadMessage } from './protocol.js';

export type Phase = 'load' | 'run';

export interface PhaseOptions {
  props: Properties;
  phase: Phase;
  /** overrides the db property */
  db?: string;
  /** overrides threadcount / target / status / label properties (-threads, -target, -s, -l) */
  threads?: number;
  target?: number;
  status?: boolean;
  label?: string;
  /** run client threads in the main thread instead of worker_threads (tests, debugging) */
  inProcess?: boolean;
  /** base seed for the generators; random when absent */
  seed?: number;
  /** where status lines and warnings go (default: process.stderr) */
  stderr?: (text: string) => void;
  /** where YCSB's stdout warnings go (default: process.stdout) */
  stdout?: (text: string) => void;
}

export interface TimeSample {
  /** ms since the phase started */
  tMs: number;
  /** operations completed in this sample interval, all threads */
  ops: number;
  /** per exported measurement name: latency stats of this interval (µs) */
  latency: { [name: string]: { count: number; mean: number; p50: number; p95: number; p99: number; max: number } };
}

export interface PhaseResult {
  phase: Phase;
  db: string;
  threads: number;
  target: number;
  startedAt: Date;
  runtimeMs: number;
  opsDone: number;
  measurements: AggregatedMeasurements;
  percentiles: number[];
  /** every isolate's collections during the phase (YCSB's TOTAL_GC_* lines) */
  gc: GcCollector[];
  /**
   * The same, split: the client threads' own isolates (summed; empty when they ran in-process)
   * and the main thread's (which runs in-process client threads, and whatever else the caller
   * runs there, such as the main job's server).
   */
  clientGc: GcCollector[];
  mainGc: GcCollector[];
  samples: TimeSample[];
  sampleIntervalMs: number;
}

/** A phase's measurements in YCSB's output format, through `exporter` (text, JSON, ...). */
export function exportPhase(exporter: MeasurementsExporter, result: PhaseResult, verbose = false): string {
  return exportMeasurements(exporter, {
    runtimeMs: result.runtimeMs,
    opsDone: result.opsDone,
    gc: { collectors: result.gc },
    measurements: result.measurements,
    percentiles: result.percentiles,
    verbose,
  });
}

/** Settings every phase derives from the properties, checked before any thread starts. */
export function resolvePhaseSettings(options: PhaseOptions) {
  const p = options.props;
  parseCoreWorkloadConfig(p);
  const db = options.db ?? p.get('db', 'basic');
  checkBindingName(db);
  const measurementType = p.get('measurementtype', 'hdrhistogram');
  if (measurementType !== 'hdrhistogram') {
    throw new UsageError(`measurementtype=${measurementType} is not supported: kv-bench measures with hdrhistogram (YCSB's default)`);
  }
  const interval = p.get('measurement.interval', 'op');
  if (parseMeasurementInterval(interval) === undefined) throw new UsageError(`unknown measurement.interval=${interval} (op, intended, both)`);
  const threads = options.threads ?? p.getInt('threadcount', 1);
  if (threads < 1) throw new UsageError('the thread count must be at least 1');
  const target = options.target ?? p.getInt('target', 0);
  const inflight = p.getInt('kvbench.inflight', 1);
  if (inflight < 1) throw new UsageError('kvbench.inflight must be at least 1');
  const transactions = options.phase === 'run';
  const opCount = transactions
    ? p.getInt('operationcount', 0)
    : p.has('insertcount')
      ? p.getInt('insertcount', 0)
      : p.getInt('recordcount', 0);
  const statusIntervalS = p.getInt('status.interval', 10);
  if (statusIntervalS < 1) throw new UsageError('status.interval must be at least 1 second');
  const sampleIntervalMs = p.getInt('kvbench.sampleinterval', 1000);
  if (sampleIntervalMs < 10) throw new UsageError('kvbench.sampleinterval must be at least 10 ms');
  return {
    db,
    threads,
    target,
    inflight,
    transactions,
    opCount,
    status: options.status ?? p.getBoolean('status', false),
    label: options.label ?? p.get('label', ''),
    statusIntervalMs: statusIntervalS * 1000,
    sampleIntervalMs,
    maxExecutionTimeS: p.getInt('maxexecutiontime', 0),
    percentiles: parsePercentiles(p.get('hdrhistogram.percentiles', '50,95,99')),
    progress: p.has('kvbench.progress') ? p.getBoolean('kvbench.progress', false) : !transactions && process.stderr.isTTY === true,
  };
}

interface ThreadHandle {
  start(): void;
  /** resolves when the thread has exited (worker) or returned (in-process) */
  finished: Promise<void>;
  terminate(): Promise<void>;
}

export async function runPhase(options: PhaseOptions): Promise<PhaseResult> {
  const settings = resolvePhaseSettings(options);
  tuneJitForClientThreads();
  if (!options.inProcess) tuneGcForClientThreads(settings.threads);
  const stderr = options.stderr ?? ((t: string) => void process.stderr.write(t));
  const stdout = options.stdout ?? ((t: string) => void process.stdout.write(t));
  const config = parseCoreWorkloadConfig(options.props);
  const split = splitOperationCount(settings.opCount, settings.threads);
  if (split.lowered) stdout('Warning: the threadcount is bigger than recordcount, the threadcount will be recordcount!\n');
  const threadCount = split.threadCount;
  const targetPerThreadPerMs = settings.target > 0 ? settings.target / threadCount / 1000 : -1;

  const shared = newWorkloadSharedState(config);
  const control = new Int32Array(new SharedArrayBuffer(4 * CONTROL_SLOTS));
  const opsDoneShared = new Int32Array(new SharedArrayBuffer(4 * Math.max(1, threadCount)));
  const baseSeed = options.seed ?? randomInt(2 ** 31);
  const propsArray = [...options.props.entries()];
  const measurements = new AggregatedMeasurements();
  const clientGcTotals = new Map<string, GcCollector>();
  const mainGc = new GcStats();
  const pendingReplies = new Map<number, () => void>();
  const active = new Set<number>();
  const opsDoneByThread: number[] = new Array<number>(threadCount).fill(0);
  let failure: { message: string; usage: boolean } | undefined;
  let readyCount = 0;
  let onAllReady: () => void = () => {};
  const allReady = new Promise<void>((resolve) => (onAllReady = resolve));

  const onMessage = (m: ThreadMessage): void => {
    switch (m.type) {
      case 'ready':
        if (++readyCount === threadCount) onAllReady();
        break;
      case 'sample':
        measurements.merge(m.snapshots);
        pendingReplies.get(m.threadId)?.();
        break;
      case 'done':
        measurements.merge(m.snapshots);
        opsDoneByThread[m.threadId] = m.opsDone;
        mergeGc(clientGcTotals, m.gc);
        active.delete(m.threadId);
        pendingReplies.get(m.threadId)?.();
        break;
      case 'error':
        failure ??= { message: m.message, usage: m.usage };
        requestStop(control);
        active.delete(m.threadId);
        pendingReplies.get(m.threadId)?.();
        onAllReady();
        break;
    }
  };

  /** failures arrive in message callbacks, so read the variable through a function */
  const throwIfFailed = (): void => {
    const f = failure as { message: string; usage: boolean } | undefined;
    if (f) throw f.usage ? new UsageError(f.message) : new Error(f.message);
  };

  const handles: ThreadHandle[] = [];
  for (let threadId = 0; threadId < threadCount; threadId++) {
    const data: ClientThreadData = {
      props: propsArray,
      dbName: settings.db,
      transactions: settings.transactions,
      threadId,
      threadCount,
      opCount: split.perThread[threadId]!,
      targetPerThreadPerMs,
      inflight: settings.inflight,
      observeGc: options.inProcess !== true,
      seed: (baseSeed + Math.imul(threadId + 1, 0x9e3779b9)) >>> 0,
      shared,
      control,
      opsDone: opsDoneShared,
    };
    active.add(threadId);
    handles.push(options.inProcess ? inProcessThread(data, onMessage) : workerThread(data, onMessage));
  }

  const stopAll = async (): Promise<void> => {
    await Promise.all(handles.map((h) => h.terminate()));
  };
  try {
    await allReady;
    throwIfFailed();

    const startedAt = new Date();
    const startMs = Date.now();
    const startPerf = performance.now();
    mainGc.begin();
    for (const h of handles) h.start();
    const finished = Promise.all(handles.map((h) => h.finished));

    const terminator =
      settings.maxExecutionTimeS > 0 ? setTimeout(() => requestStop(control), settings.maxExecutionTimeS * 1000) : undefined;

    const totalOps = (): number => opsDoneShared.reduce((a, b) => a + b, 0);
    const todoOps = (): number => split.perThread.reduce((sum, n, i) => sum + Math.max(0, n - opsDoneShared[i]!), 0);

    // progress bar during load, on stderr
    let bar: cliProgress.SingleBar | undefined;
    let barTimer: NodeJS.Timeout | undefined;
    if (settings.progress && settings.opCount > 0) {
      bar = new cliProgress.SingleBar(
        {
          stream: process.stderr,
          format: 'load [{bar}] {percentage}% | {value}/{total} records | {eta_formatted} left',
          hideCursor: true,
          // asked for explicitly on a non-terminal: print a line every second instead of redrawing
          noTTYOutput: process.stderr.isTTY !== true,
          notTTYSchedule: 1000,
        },
        cliProgress.Presets.shades_classic,
      );
      bar.start(settings.opCount, 0);
      barTimer = setInterval(() => bar!.update(totalOps()), 200);
    }

    /** Asks every running thread for its interval data and waits (briefly) for the answers. */
    const collect = async (): Promise<void> => {
      const waiting = [...active];
      const replies = waiting.map((id) => new Promise<void>((resolve) => pendingReplies.set(id, resolve)));
      Atomics.add(control, CONTROL_EPOCH, 1);
      await Promise.race([Promise.all(replies), new Promise((resolve) => setTimeout(resolve, 250))]);
      for (const id of waiting) pendingReplies.delete(id);
    };

    const samples: TimeSample[] = [];
    let lastSampleOps = 0;
    let lastSampleMs = 0;
    const takeSample = (tMs: number): void => {
      const ops = totalOps();
      const latency: TimeSample['latency'] = {};
      for (const m of measurements.ordered()) {
        const s = summarize(m.sinceSample);
        if (s.count > 0) {
          latency[m.exportName] = { count: s.count, mean: s.mean, p50: s.percentile(50), p95: s.percentile(95), p99: s.percentile(99), max: s.max };
        }
        m.sinceSample.reset();
      }
      if (tMs > lastSampleMs) samples.push({ tMs, ops: ops - lastSampleOps, latency });
      lastSampleOps = ops;
      lastSampleMs = tMs;
    };

    let lastStatusOps = 0;
    let lastStatusMs = startMs;
    const printStatus = (): void => {
      const nowMs = Date.now();
      const ops = totalOps();
      stderr(
        statusLine({
          label: settings.label,
          now: new Date(nowMs),
          startMs,
          intervalStartMs: lastStatusMs,
          nowMs,
          totalOps: ops,
          lastTotalOps: lastStatusOps,
          todoOps: todoOps(),
          measurements: measurements.ordered(),
        }) + '\n',
      );
      lastStatusOps = ops;
      lastStatusMs = nowMs;
    };

    if (settings.status) printStatus();
    let done = false;
    void finished.then(() => (done = true));
    let nextStatusMs = settings.statusIntervalMs;
    let tick = 1;
    const ticker = (async () => {
      while (!done) {
        const wakeAt = tick * settings.sampleIntervalMs;
        await Promise.race([finished, new Promise((resolve) => setTimeout(resolve, Math.max(0, startPerf + wakeAt - performance.now())))]);
        if (done) break;
        tick++;
        await collect();
        takeSample(performance.now() - startPerf);
        if (settings.status && performance.now() - startPerf >= nextStatusMs) {
          printStatus();
          while (nextStatusMs <= performance.now() - startPerf) nextStatusMs += settings.statusIntervalMs;
        }
      }
    })();

    await finished;
    const runtimeMs = Date.now() - startMs;
    await ticker;
    if (terminator) clearTimeout(terminator);
    if (barTimer) clearInterval(barTimer);
    if (bar) {
      bar.update(totalOps());
      bar.stop();
    }
    throwIfFailed();
    takeSample(performance.now() - startPerf);
    if (settings.status) printStatus();
    const mainCollectors = await mainGc.finish();
    const gcTotals = new Map<string, GcCollector>();
    mergeGc(gcTotals, [...clientGcTotals.values()]);
    mergeGc(gcTotals, mainCollectors);

    return {
      phase: options.phase,
      db: settings.db,
      threads: threadCount,
      target: settings.target,
      startedAt,
      runtimeMs,
      opsDone: opsDoneByThread.reduce((a, b) => a + b, 0),
      measurements,
      percentiles: settings.percentiles,
      gc: [...gcTotals.values()],
      clientGc: options.inProcess ? [] : [...clientGcTotals.values()],
      mainGc: mainCollectors,
      samples,
      sampleIntervalMs: settings.sampleIntervalMs,
    };
  } catch (err) {
    requestStop(control);
    await stopAll();
    await mainGc.finish();
    throw err;
  }
}

function workerThread(data: ClientThreadData, onMessage: (m: ThreadMessage) => void): ThreadHandle {
  const worker = new Worker(new URL('./worker.js', import.meta.url), { workerData: data });
  worker.on('message', onMessage);
  const finished = new Promise<void>((resolve) => {
    worker.once('exit', (code) => {
      if (code !== 0) onMessage({ type: 'error', threadId: data.threadId, message: `client thread ${data.threadId} exited with code ${code}`, usage: false });
      resolve();
    });
    worker.once('error', (err) => onMessage({ type: 'error', threadId: data.threadId, message: err.message, usage: false }));
  });
  return {
    start: () => worker.postMessage('start'),
    finished,
    terminate: async () => {
      await worker.terminate();
    },
  };
}

function inProcessThread(data: ClientThreadData, onMessage: (m: ThreadMessage) => void): ThreadHandle {
  let start: () => void = () => {};
  const started = new Promise<void>((resolve) => (start = resolve));
  const finished = runClientThread(data, onMessage, started);
  return { start, finished, terminate: async () => {} };
}
