/**
 * The machine-readable result of a phase (kv-bench's own JSON, written under bench/results/ by
 * default), from which the HTML report and the compare table are drawn. It embeds the YCSB
 * exporter lines too, so one file holds everything a YCSB user would look at.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { summarize } from '../measurements/aggregate.js';
import { JSONArrayMeasurementsExporter, ordinal } from '../measurements/exporters.js';
import { exportPhase, type PhaseResult, type TimeSample } from '../client/client.js';
import type { Properties } from '../properties.js';

export interface MeasurementResult {
  name: string;
  operations: number;
  averageLatencyUs: number;
  minLatencyUs: number;
  maxLatencyUs: number;
  /** "95th" -> µs, keyed like YCSB's line names */
  percentilesUs: { [ordinal: string]: number };
  returns: { [status: string]: number };
}

export interface ResultsDocument {
  tool: 'kv-bench';
  formatVersion: 1;
  db: string;
  phase: 'load' | 'run';
  workloadFiles: string[];
  startedAt: string;
  threads: number;
  target: number;
  runtimeMs: number;
  operations: number;
  throughputOpsPerSec: number;
  node: string;
  properties: { [name: string]: string };
  measurements: MeasurementResult[];
  samples: TimeSample[];
  sampleIntervalMs: number;
  /** the same numbers as YCSB's JSONArrayMeasurementsExporter writes them */
  ycsb: { metric: string; measurement: string; value: number }[];
}

export function toResultsDocument(result: PhaseResult, props: Properties, workloadFiles: string[]): ResultsDocument {
  const measurements: MeasurementResult[] = result.measurements.ordered().map((m) => {
    const s = summarize(m.total);
    const percentilesUs: { [k: string]: number } = {};
    for (const p of result.percentiles) percentilesUs[ordinal(p)] = s.percentile(p);
    const returns: { [k: string]: number } = {};
    for (const st of m.orderedStatuses()) returns[st.name] = st.count;
    return { name: m.exportName, operations: s.count, averageLatencyUs: s.mean, minLatencyUs: s.min, maxLatencyUs: s.max, percentilesUs, returns };
  });
  const ycsbJson = exportPhase(new JSONArrayMeasurementsExporter(), result);
  return {
    tool: 'kv-bench',
    formatVersion: 1,
    db: result.db,
    phase: result.phase,
    workloadFiles,
    startedAt: result.startedAt.toISOString(),
    threads: result.threads,
    target: result.target,
    runtimeMs: result.runtimeMs,
    operations: result.opsDone,
    throughputOpsPerSec: (1000 * result.opsDone) / result.runtimeMs,
    node: process.version,
    properties: props.toObject(),
    measurements,
    samples: result.samples,
    sampleIntervalMs: result.sampleIntervalMs,
    // Java prints NaN unquoted; JSON.parse would reject it, so NaN (0 ms runtime) becomes null
    ycsb: JSON.parse(ycsbJson.replace(/: NaN|: -?Infinity/g, ': null')) as ResultsDocument['ycsb'],
  };
}

/** <repo>/bench/results, found from this module's location in dist/bench/ycsb/report/. */
export function defaultResultsDir(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '../../../../bench/results');
}

export function resultsBaseName(doc: { db: string; phase: string; workloadFiles: string[]; startedAt: string }): string {
  const workload = doc.workloadFiles.length > 0 ? doc.workloadFiles.map((f) => f.split(/[\\/]/).pop()).join('+') : 'default';
  const stamp = doc.startedAt.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  return `ycsb-${doc.db.replace(/[^\w.-]+/g, '_')}-${workload}-${doc.phase}-${stamp}`;
}

export function writeFileEnsuringDir(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
}

export function resultsPaths(dir: string, base: string): { json: string; html: string } {
  return { json: join(dir, `${base}.json`), html: join(dir, `${base}.html`) };
}
