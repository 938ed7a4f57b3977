import test from 'ava';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Properties } from '../../bench/ycsb/properties.js';
import { exportPhase, runPhase, type PhaseResult } from '../../bench/ycsb/client/client.js';
import {
  JSONArrayMeasurementsExporter,
  JSONMeasurementsExporter,
  ordinal,
  TextMeasurementsExporter,
  type MeasurementsExporter,
} from '../../bench/ycsb/measurements/exporters.js';
import { decimalFormat2, javaDoubleToString, javaHashOrderOfStrings } from '../../bench/ycsb/java-format.js';
import { formatRemaining, statusLine } from '../../bench/ycsb/client/status.js';
import { AggregatedMeasurements } from '../../bench/ycsb/measurements/aggregate.js';
import { LatencyRecorder } from '../../bench/ycsb/measurements/recorder.js';
import { main } from '../../bench/ycsb/cli.js';
import BasicDB from '../../bench/ycsb/db/basic.js';
import { Status } from '../../bench/ycsb/db/db.js';
import { ReadResult } from '../../bench/ycsb/db/read-result.js';
import { LazyFieldValues } from '../../bench/ycsb/workload/field-values.js';
import { Random } from '../../bench/ycsb/random.js';
import * as hdr from 'hdr-histogram-js';

const WORKLOADS = fileURLToPath(new URL('../../../bench/workloads/', import.meta.url));

function render(result: PhaseResult, exporter: MeasurementsExporter = new TextMeasurementsExporter()): string {
  return exportPhase(exporter, result);
}

/** Parses YCSB text output into metric -> measurement -> value text. */
function parseText(text: string): Map<string, Map<string, string>> {
  const out = new Map<string, Map<string, string>>();
  for (const line of text.trimEnd().split('\n')) {
    const m = /^\[([^\]]+)\], ([^,]+), (.+)$/.exec(line);
    if (!m) throw new Error(`not a YCSB line: ${line}`);
    if (!out.has(m[1]!)) out.set(m[1]!, new Map());
    out.get(m[1]!)!.set(m[2]!, m[3]!);
  }
  return out;
}

const quiet = { stderr: () => {}, stdout: () => {} };

test('run phase output parses back as YCSB text and the counts add up', async (t) => {
  const props = Properties.fromSources([join(WORKLOADS, 'workloada')], ['basicdb.verbose=false', 'operationcount=20000', 'recordcount=500']);
  const load = await runPhase({ props, phase: 'load', threads: 2, inProcess: true, seed: 1, ...quiet });
  const loadOut = parseText(render(load));
  t.is(loadOut.get('INSERT')!.get('Operations'), '500');
  t.is(loadOut.get('INSERT')!.get('Return=OK'), '500');

  const run = await runPhase({ props, phase: 'run', threads: 3, inProcess: true, seed: 2, ...quiet });
  const text = render(run);
  const out = parseText(text);
  const lines = text.trimEnd().split('\n');
  t.regex(lines[0]!, /^\[OVERALL\], RunTime\(ms\), \d+$/);
  t.regex(lines[1]!, /^\[OVERALL\], Throughput\(ops\/sec\), \d+(\.\d+)?(E\d+)?$/);
  const runtime = Number(out.get('OVERALL')!.get('RunTime(ms)'));
  const throughput = Number(out.get('OVERALL')!.get('Throughput(ops/sec)'));
  t.true(Math.abs(throughput - (1000 * 20000) / runtime) < 1e-6 * throughput);
  const reads = Number(out.get('READ')!.get('Operations'));
  const updates = Number(out.get('UPDATE')!.get('Operations'));
  t.is(reads + updates, 20000);
  t.is(out.get('READ')!.get('Return=OK'), String(reads));
  t.is(out.get('UPDATE')!.get('Return=OK'), String(updates));
  t.true(Math.abs(reads / 20000 - 0.5) < 0.03); // workloada is 50/50
  t.is(out.get('CLEANUP')!.get('Operations'), '3'); // one cleanup per thread, no return codes
  t.false(out.get('CLEANUP')!.has('Return=OK'));
  for (const op of ['READ', 'UPDATE']) {
    const m = out.get(op)!;
    t.deepEqual(
      [...m.keys()],
      ['Operations', 'AverageLatency(us)', 'MinLatency(us)', 'MaxLatency(us)', '50thPercentileLatency(us)', '95thPercentileLatency(us)', '99thPercentileLatency(us)', 'Return=OK'],
    );
    t.regex(m.get('AverageLatency(us)')!, /^\d+\.\d+(E-?\d+)?$/); // a Java double
    t.regex(m.get('MaxLatency(us)')!, /^\d+$/); // a Java long
    t.true(Number(m.get('MinLatency(us)')) <= Number(m.get('50thPercentileLatency(us)')));
    t.true(Number(m.get('95thPercentileLatency(us)')) <= Number(m.get('MaxLatency(us)')));
  }
  t.true(out.has('TOTAL_GCs'));
  // YCSB's ConcurrentHashMap prints READ, CLEANUP, UPDATE in this order
  t.deepEqual([...out.keys()].filter((k) => ['READ', 'UPDATE', 'CLEANUP'].includes(k)), ['READ', 'CLEANUP', 'UPDATE']);
});

test('worker_threads run: every thread runs its share and the totals add up', async (t) => {
  const props = Properties.fromSources([join(WORKLOADS, 'workloadb')], ['basicdb.verbose=false', 'operationcount=9001', 'recordcount=100']);
  const run = await runPhase({ props, phase: 'run', threads: 2, seed: 3, ...quiet });
  t.is(run.threads, 2);
  t.is(run.opsDone, 9001);
  const out = parseText(render(run));
  t.is(Number(out.get('READ')!.get('Operations')) + Number(out.get('UPDATE')!.get('Operations')), 9001);
  t.is(out.get('CLEANUP')!.get('Operations'), '2');
});

test('an unbounded run stops at maxexecutiontime, and busy threads answer sample requests while running', async (t) => {
  // threads read the control word once per millisecond of operation time, not per operation
  const props = Properties.fromSources(
    [join(WORKLOADS, 'workloadc')],
    ['basicdb.verbose=false', 'operationcount=0', 'recordcount=100', 'maxexecutiontime=1', 'kvbench.sampleinterval=50'],
  );
  const run = await runPhase({ props, phase: 'run', threads: 2, seed: 4, ...quiet });
  t.true(run.opsDone > 0);
  const withReads = run.samples.filter((s) => (s.latency['READ']?.count ?? 0) > 0);
  t.true(withReads.length >= 2, `${withReads.length} of ${run.samples.length} samples carry thread measurements`);
});

test('workloads d, e and f produce their operations; SCAN and READ-MODIFY-WRITE are measured', async (t) => {
  for (const [w, ops] of [['workloadd', ['READ', 'INSERT']], ['workloade', ['SCAN', 'INSERT']], ['workloadf', ['READ', 'UPDATE', 'READ-MODIFY-WRITE']]] as const) {
    const props = Properties.fromSources([join(WORKLOADS, w)], ['basicdb.verbose=false', 'operationcount=4000']);
    await runPhase({ props, phase: 'load', inProcess: true, seed: 4, ...quiet });
    const out = parseText(render(await runPhase({ props, phase: 'run', inProcess: true, seed: 5, ...quiet })));
    for (const op of ops) t.true(Number(out.get(op)?.get('Operations') ?? 0) > 0, `${w}: ${op}`);
    if (w === 'workloadf') {
      const reads = Number(out.get('READ')!.get('Operations'));
      const rmw = Number(out.get('READ-MODIFY-WRITE')!.get('Operations'));
      t.is(reads, 4000); // plain reads plus the read half of every read-modify-write
      t.is(Number(out.get('UPDATE')!.get('Operations')), rmw);
    }
  }
});

test('measurement.interval=both adds Intended- measurements; hdrhistogram.percentiles changes the lines', async (t) => {
  const props = Properties.fromSources([join(WORKLOADS, 'workloadc')], [
    'basicdb.verbose=false', 'operationcount=2000', 'measurement.interval=both', 'hdrhistogram.percentiles=90,99.9', 'target=100000',
  ]);
  const out = parseText(render(await runPhase({ props, phase: 'run', inProcess: true, seed: 6, ...quiet })));
  t.is(out.get('READ')!.get('Operations'), '2000');
  t.is(out.get('Intended-READ')!.get('Operations'), '2000');
  t.true(out.get('READ')!.has('90thPercentileLatency(us)'));
  t.true(out.get('READ')!.has('99.9PercentileLatency(us)'));
  t.false(out.get('READ')!.has('95thPercentileLatency(us)'));
});

test('JSON exporters: Jackson layout, parseable', async (t) => {
  const props = new Properties([['basicdb.verbose', 'false'], ['operationcount', '100'], ['recordcount', '10']]);
  const run = await runPhase({ props, phase: 'run', inProcess: true, seed: 7, ...quiet });
  const arr = render(run, new JSONArrayMeasurementsExporter());
  t.true(arr.startsWith('[ {\n  "metric" : "OVERALL",\n  "measurement" : "RunTime(ms)",\n  "value" : '));
  const parsed = JSON.parse(arr) as { metric: string; measurement: string; value: number }[];
  t.true(parsed.some((o) => o.metric === 'READ' && o.measurement === 'Operations'));
  const concatenated = render(run, new JSONMeasurementsExporter());
  const objects = concatenated.split('} {').length;
  t.is(objects, parsed.length);
});

test('Java number formatting', (t) => {
  t.is(javaDoubleToString(1234.5), '1234.5');
  t.is(javaDoubleToString(12.0), '12.0');
  t.is(javaDoubleToString(0.001), '0.001');
  t.is(javaDoubleToString(0.0001), '1.0E-4');
  t.is(javaDoubleToString(1e7), '1.0E7');
  t.is(javaDoubleToString(12345678.9), '1.23456789E7');
  t.is(javaDoubleToString(9999999.5), '9999999.5');
  t.is(javaDoubleToString(0), '0.0');
  t.is(javaDoubleToString(NaN), 'NaN');
  t.is(javaDoubleToString(1 / 3), '0.3333333333333333');
  t.is(decimalFormat2(2.5), '2.5');
  t.is(decimalFormat2(3), '3');
  t.is(decimalFormat2(0.125), '0.12'); // HALF_EVEN
  t.is(decimalFormat2(0.375), '0.38');
  t.is(decimalFormat2(66666.666), '66666.67');
  t.is(ordinal(95), '95th');
  t.is(ordinal(99.9), '99.9');
  t.is(ordinal(1), '1st');
  t.is(ordinal(12), '12th');
  t.is(ordinal(23), '23rd');
});

test('HashMap order of YCSB field names', (t) => {
  // java.util.HashMap with field0..field9 iterates in bucket order ((h ^ h >>> 16) & 15 of
  // String.hashCode): buckets 2, 3, 8, 9, ... 15 hold field1, field0, field7, field6, ... field4
  t.deepEqual(javaHashOrderOfStrings(['field0', 'field1', 'field2', 'field3', 'field4', 'field5', 'field6', 'field7', 'field8', 'field9']), [
    'field1', 'field0', 'field7', 'field6', 'field9', 'field8', 'field3', 'field2', 'field5', 'field4',
  ]);
});

test('status line and RemainingFormatter quirks', (t) => {
  t.is(formatRemaining(5n), '5 second ');
  t.is(formatRemaining(42n), '42 seconds ');
  t.is(formatRemaining(125n), '2 minutes ');
  t.is(formatRemaining(3700n), '1 hour 1 minute ');
  t.is(formatRemaining(9223372036854775807n), '106751991167300 days 15 hours ');
  const m = new AggregatedMeasurements();
  const rec = new LatencyRecorder();
  for (const v of [10, 20, 30, 40]) rec.record(v);
  m.merge([{ operation: 'READ', intended: false, exportName: 'READ', latencies: rec.takeInterval(), statuses: [{ name: 'OK', description: Status.OK.description, count: 4 }] }]);
  const line = statusLine({
    label: 'L ',
    now: new Date(2024, 0, 2, 3, 4, 5, 6),
    startMs: 0,
    intervalStartMs: 0,
    nowMs: 10_000,
    totalOps: 4,
    lastTotalOps: 0,
    todoOps: 6,
    measurements: m.ordered(),
  });
  t.is(line, 'L 2024-01-02 03:04:05:006 10 sec: 4 operations; 0.4 current ops/sec; est completion in 15 seconds [READ: Count=4, Max=40, Min=10, Avg=25, 50=20, 90=40, 99=40, 99.9=40, 99.99=40] ');
});

test('the hot-path recorder keeps HdrHistogram(3 digits) statistics exactly', (t) => {
  const rng = new Random(8);
  const rec = new LatencyRecorder();
  const reference = hdr.build({ numberOfSignificantValueDigits: 3, bitBucketSize: 64 });
  for (let i = 0; i < 50_000; i++) {
    const v = Math.floor(Math.exp(rng.nextDouble() * 20)); // 1 µs .. 485 s, every bucket range
    rec.record(v);
    reference.recordValue(v);
  }
  const m = new AggregatedMeasurements();
  m.merge([{ operation: 'X', intended: false, exportName: 'X', latencies: rec.takeInterval(), statuses: [] }]);
  const merged = m.get('X')!.total;
  t.is(merged.totalCount, reference.totalCount);
  t.is(merged.mean, reference.mean);
  t.is(merged.maxValue, reference.maxValue < 2048 ? reference.maxValue : merged.maxValue);
  for (const p of [0, 1, 50, 90, 95, 99, 99.9, 99.99, 100]) t.is(merged.getValueAtPercentile(p), reference.getValueAtPercentile(p), `p${p}`);
});

test('basic binding prints operations as BasicDB does', (t) => {
  const lines: string[] = [];
  const db = new BasicDB();
  db.setOutput((l) => lines.push(l));
  db.init(new Properties([['basicdb.verbose', 'true'], ['x', 'y']]));
  const values = new LazyFieldValues(new Random(9), false);
  values.reset('user1');
  values.add('field1', 4);
  values.add('field0', 2);
  t.is(db.read('usertable', 'user1', null, new ReadResult()), Status.OK);
  db.read('usertable', 'user1', ['field3'], new ReadResult());
  db.scan('usertable', 'user1', 7, null, []);
  db.update('usertable', 'user1', values);
  db.delete('usertable', 'user1');
  t.deepEqual(lines[0]!.split('\n'), ['***************** properties *****************', '"basicdb.verbose"="true"', '"x"="y"', '**********************************************']);
  t.is(lines[1], 'READ usertable user1 [ <all fields>]');
  t.is(lines[2], 'READ usertable user1 [ field3 ]');
  t.is(lines[3], 'SCAN usertable user1 7 [ <all fields>]');
  t.regex(lines[4]!, /^UPDATE usertable user1 \[ field1=[ -\x7f]{4} field0=[ -\x7f]{2} \]$/);
  t.is(lines[5], 'DELETE usertable user1');
});

test('CLI: bad input is one line on stderr and exit code 2', async (t) => {
  const cases: [string[], RegExp][] = [
    [['run', '-db', 'nosuchdb'], /unknown db "nosuchdb"/],
    [['run', '-P', '/nonexistent/workloadz'], /cannot read property file/],
    [['run', '-threads', 'four'], /-threads expects a non-negative integer/],
    [['run', '-p', 'operationcount=lots'], /operationcount="lots" is not an integer/],
    [['run', '-p', 'requestdistribution=pareto'], /Unknown request distribution/],
    [['frobnicate'], /Unknown command/],
    [['run', '--no-such-option'], /Unknown argument/],
    [['compare', '-P', join(WORKLOADS, 'workloada')], /compare needs --db/],
    [['compare', '--db', 'basic,bogus'], /unknown db "bogus"/],
  ];
  for (const [argv, pattern] of cases) {
    let err = '';
    let out = '';
    const code = await main(argv, { stderr: (s) => (err += s), stdout: (s) => (out += s) });
    t.is(code, 2, argv.join(' '));
    t.regex(err, pattern, argv.join(' '));
    t.is(err.trimEnd().split('\n').length, 1, `one line for ${argv.join(' ')}: ${err}`);
    t.false(err.includes('    at '), 'no stack trace');
  }
});

/** kv-bench's exit code and what it printed. */
async function cli(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const printed = { stdout: '', stderr: '' };
  const code = await main(argv, { stdout: (s) => (printed.stdout += s), stderr: (s) => (printed.stderr += s) });
  return { code, ...printed };
}

test('CLI: a misspelled flag is one line naming the flag meant, exit code 2; -p takes any property, as in YCSB', async (t) => {
  const cases: [string[], string][] = [
    [['run', '-thread', '4'], 'kv-bench: unknown option -thread: did you mean -threads?\n'],
    [['load', '--tagret', '100'], 'kv-bench: unknown option --tagret: did you mean --target?\n'],
    [['run', '-seeed', '1'], 'kv-bench: unknown option -seeed: did you mean -seed?\n'],
    [['compare', '-dbs', 'basic,redis'], 'kv-bench: unknown option -dbs: did you mean -db?\n'],
    [['run', '-bogus'], 'kv-bench: Unknown argument: bogus (see kv-bench --help)\n'],
  ];
  for (const [argv, line] of cases) {
    t.deepEqual(await cli(argv), { code: 2, stdout: '', stderr: line }, argv.join(' '));
  }
  // YCSB passes properties it does not know to the workload and the binding: so does kv-bench.
  const free = await cli(['run', '-db', 'basic', '-p', 'basicdb.verbose=false', '-p', 'operationcount=10', '-p', 'kvbench.report=false', '-p', 'nosuchproperty=1', '-p', 'threadcnt=4']);
  t.is(free.code, 0, free.stderr);
});

test('CLI: run prints YCSB text and writes JSON + HTML results', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kvb-cli-'));
  let out = '';
  const code = await main(
    ['run', '-P', join(WORKLOADS, 'workloadb'), '-db', 'basic', '-threads', '1', '-p', 'basicdb.verbose=false', '-p', 'operationcount=3000', '-p', `kvbench.resultsdir=${dir}`, '-s'],
    { stdout: (s) => (out += s), stderr: () => {} },
  );
  t.is(code, 0);
  const parsed = parseText(out);
  t.is(Number(parsed.get('READ')!.get('Operations')) + Number(parsed.get('UPDATE')!.get('Operations')), 3000);
  const files = readdirSync(dir);
  const json = files.find((f) => f.endsWith('.json'))!;
  const html = files.find((f) => f.endsWith('.html'))!;
  t.truthy(json);
  const doc = JSON.parse(readFileSync(join(dir, json), 'utf8')) as { operations: number; measurements: { name: string }[]; ycsb: unknown[] };
  t.is(doc.operations, 3000);
  t.true(doc.measurements.some((m) => m.name === 'READ'));
  t.true(doc.ycsb.length > 0);
  const page = readFileSync(join(dir, html), 'utf8');
  t.true(page.startsWith('<!DOCTYPE html>'));
  t.true(page.includes('<svg'));
  t.false(page.includes('<script'));
});
