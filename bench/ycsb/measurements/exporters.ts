/**
 * YCSB's measurement exporters, byte for byte: TextMeasurementsExporter ("[READ], Operations,
 * 1000"), JSONMeasurementsExporter (Jackson-pretty-printed objects separated by a space) and
 * JSONArrayMeasurementsExporter (the same objects in an array). Numbers print as Java prints a
 * long or a double.
 */
import { UsageError } from '../../../protocol/operator-input.js';
import { javaDoubleToString, javaLongToString } from '../java-format.js';
import { summarize, type AggregatedMeasurements, type Histogram } from './aggregate.js';

export type NumberKind = 'long' | 'double';

export interface MeasurementsExporter {
  write(metric: string, measurement: string, value: number, kind: NumberKind): void;
  /** The complete output. */
  text(): string;
}

function javaNumber(value: number, kind: NumberKind): string {
  return kind === 'long' ? javaLongToString(value) : javaDoubleToString(value);
}

export class TextMeasurementsExporter implements MeasurementsExporter {
  private readonly lines: string[] = [];
  write(metric: string, measurement: string, value: number, kind: NumberKind): void {
    this.lines.push(`[${metric}], ${measurement}, ${javaNumber(value, kind)}`);
  }
  text(): string {
    return this.lines.map((l) => l + '\n').join('');
  }
}

function jacksonObject(metric: string, measurement: string, value: number, kind: NumberKind): string {
  return `{\n  "metric" : ${JSON.stringify(metric)},\n  "measurement" : ${JSON.stringify(measurement)},\n  "value" : ${javaNumber(value, kind)}\n}`;
}

export class JSONMeasurementsExporter implements MeasurementsExporter {
  private readonly objects: string[] = [];
  write(metric: string, measurement: string, value: number, kind: NumberKind): void {
    this.objects.push(jacksonObject(metric, measurement, value, kind));
  }
  text(): string {
    return this.objects.join(' ');
  }
}

export class JSONArrayMeasurementsExporter implements MeasurementsExporter {
  private readonly objects: string[] = [];
  write(metric: string, measurement: string, value: number, kind: NumberKind): void {
    this.objects.push(jacksonObject(metric, measurement, value, kind));
  }
  text(): string {
    return this.objects.length === 0 ? '[ ]' : `[ ${this.objects.join(', ')} ]`;
  }
}

const EXPORTERS: { [name: string]: () => MeasurementsExporter } = {
  text: () => new TextMeasurementsExporter(),
  json: () => new JSONMeasurementsExporter(),
  jsonarray: () => new JSONArrayMeasurementsExporter(),
};
const EXPORTER_CLASSES: { [name: string]: string } = {
  'site.ycsb.measurements.exporter.TextMeasurementsExporter': 'text',
  'site.ycsb.measurements.exporter.JSONMeasurementsExporter': 'json',
  'site.ycsb.measurements.exporter.JSONArrayMeasurementsExporter': 'jsonarray',
};

/** -p exporter=: YCSB's class names or the short names text, json, jsonarray. */
export function createExporter(name: string | undefined): MeasurementsExporter {
  const key = name === undefined ? 'text' : EXPORTER_CLASSES[name] ?? name.toLowerCase();
  const make = EXPORTERS[key];
  if (!make) throw new UsageError(`unknown exporter "${name}" (text, json, jsonarray or YCSB's exporter class names)`);
  return make();
}

/** hdrhistogram.percentiles ("50,95,99"), falling back to the default on bad input as YCSB does. */
export function parsePercentiles(text: string): number[] {
  const values = text.split(',').map((p) => Number(p.trim()));
  if (values.some((v) => !Number.isFinite(v)) || text.trim() === '') {
    process.stderr.write(`[WARN] Couldn't read hdrhistogram.percentiles value: '${text}', the default of '50,95,99' will be used.\n`);
    return [50, 95, 99];
  }
  return values;
}

/** OneMeasurementHdrHistogram.ordinal: 95 -> "95th", 99.9 -> "99.9". */
export function ordinal(p: number): string {
  if (p % 1 !== 0) return javaDoubleToString(p);
  const j = Math.trunc(p);
  const suffixes = ['th', 'st', 'nd', 'rd', 'th', 'th', 'th', 'th', 'th', 'th'];
  const mod100 = j % 100;
  if (mod100 === 11 || mod100 === 12 || mod100 === 13) return `${j}th`;
  return `${j}${suffixes[Math.abs(j % 10)]}`;
}

export interface GcTotals {
  /** per collector, as Java names its beans (spaces become underscores) */
  collectors: { name: string; count: number; timeMs: number }[];
}

export interface ExportInput {
  runtimeMs: number;
  opsDone: number;
  gc: GcTotals;
  measurements: AggregatedMeasurements;
  percentiles: readonly number[];
  /** measurement.histogram.verbose */
  verbose: boolean;
}

/** Client.exportMeasurements followed by each OneMeasurementHdrHistogram.exportMeasurements. */
export function exportMeasurements(exporter: MeasurementsExporter, input: ExportInput): string {
  const { runtimeMs } = input;
  exporter.write('OVERALL', 'RunTime(ms)', runtimeMs, 'long');
  exporter.write('OVERALL', 'Throughput(ops/sec)', (1000 * input.opsDone) / runtimeMs, 'double');
  let totalCount = 0;
  let totalTime = 0;
  for (const c of input.gc.collectors) {
    exporter.write(`TOTAL_GCS_${c.name}`, 'Count', c.count, 'long');
    exporter.write(`TOTAL_GC_TIME_${c.name}`, 'Time(ms)', Math.round(c.timeMs), 'long');
    exporter.write(`TOTAL_GC_TIME_%_${c.name}`, 'Time(%)', (Math.round(c.timeMs) / runtimeMs) * 100, 'double');
    totalCount += c.count;
    totalTime += Math.round(c.timeMs);
  }
  exporter.write('TOTAL_GCs', 'Count', totalCount, 'long');
  exporter.write('TOTAL_GC_TIME', 'Time(ms)', totalTime, 'long');
  exporter.write('TOTAL_GC_TIME_%', 'Time(%)', (totalTime / runtimeMs) * 100, 'double');
  for (const m of input.measurements.ordered()) {
    const s = summarize(m.total);
    const name = m.exportName;
    exporter.write(name, 'Operations', s.count, 'long');
    exporter.write(name, 'AverageLatency(us)', s.mean, 'double');
    exporter.write(name, 'MinLatency(us)', s.min, 'long');
    exporter.write(name, 'MaxLatency(us)', s.max, 'long');
    for (const p of input.percentiles) exporter.write(name, `${ordinal(p)}PercentileLatency(us)`, s.percentile(p), 'long');
    for (const st of m.orderedStatuses()) exporter.write(name, `Return=${st.name}`, st.count, 'long');
    if (input.verbose) exportRecordedValues(exporter, name, m.total);
  }
  return exporter.text();
}

function exportRecordedValues(exporter: MeasurementsExporter, name: string, h: Histogram): void {
  const js = h as unknown as { countsArrayLength: number; getCountAtIndex(i: number): number; valueFromIndex(i: number): number; highestEquivalentValue(v: number): number };
  for (let i = 0; i < js.countsArrayLength; i++) {
    const count = js.getCountAtIndex(i);
    if (count === 0) continue;
    const value = Math.min(js.highestEquivalentValue(js.valueFromIndex(i)), 2147483647);
    exporter.write(name, String(value), count, 'double');
  }
}
