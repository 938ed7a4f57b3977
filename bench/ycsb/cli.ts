/**
 * kv-bench command line. YCSB's options are accepted as YCSB spells them (-P file, -p k=v,
 * -threads n, -target n, -db name, -s, -l label), with `load`, `run` and `compare` as commands,
 * and `cache` (bench/ycsb/cache/: read-through against rdma-kv and Redis under eviction).
 * Bad input ends with one line on stderr and exit code 2; a failed run with exit code 1.
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import yargs from 'yargs';
import { UsageError } from '../../protocol/operator-input.js';
import { rejectMisspelledOptions } from '../../tools/misspelled-options.js';
import { Properties } from './properties.js';
import { bindingNames, checkBindingName } from './db/registry.js';
import { exportPhase, resolvePhaseSettings, runPhase, type Phase, type PhaseResult } from './client/client.js';
import { createExporter } from './measurements/exporters.js';
import { defaultResultsDir, resultsBaseName, resultsPaths, toResultsDocument, writeFileEnsuringDir } from './report/results.js';
import { compareReportHtml, phaseReportHtml } from './report/html.js';
import { runCompare } from './compare/compare.js';
import { CACHE_PROPERTY_HELP } from './cache/options.js';
import { cacheCommand } from './cache/command.js';

interface CommonArgs {
  P?: string[];
  p?: string[];
  threads?: string;
  target?: string;
  db?: string;
  s?: boolean;
  l?: string;
  seed?: string;
  eviction?: string;
}

const PROPERTY_HELP = [
  "Properties use YCSB's names and defaults:",
  '  recordcount, operationcount, fieldcount (10), fieldlength (100),',
  '  fieldlengthdistribution (constant|uniform|zipfian|histogram), minfieldlength (1),',
  '  readproportion (0.95), updateproportion (0.05), insertproportion (0), scanproportion (0),',
  '  readmodifywriteproportion (0), requestdistribution (uniform|zipfian|latest|hotspot|',
  '  sequential|exponential), insertorder (hashed|ordered), zeropadding (1), insertstart,',
  '  insertcount, hotspotdatafraction (0.2), hotspotopnfraction (0.8), minscanlength (1),',
  '  maxscanlength (1000), scanlengthdistribution (uniform|zipfian), readallfields (true),',
  '  readallfieldsbyname (false), writeallfields (false), dataintegrity (false), table,',
  '  measurementtype (hdrhistogram), measurement.interval (op|intended|both),',
  '  hdrhistogram.percentiles (50,95,99), measurement.histogram.verbose, status.interval',
  '  (10 s), maxexecutiontime (s), exporter (text|json|jsonarray or YCSB class names),',
  '  exportfile, threadcount, target, db, reportlatencyforeacherror, latencytrackederrors.',
  `Bindings: ${bindingNames().join(', ')}, or a path to a module exporting a DB class.`,
  '  basic: basicdb.verbose (true), basicdb.simulatedelay (0 ms), basicdb.randomizedelay (true)',
  '  redis: redis.host (localhost), redis.port (6379), redis.password, redis.timeout (ms)',
  '  memcached: memcached.hosts (host[:port],...; required)',
  '  rdma-kv: rdmakv.url (shm:///run/rdma-kv/kv.sock), rdmakv.token, rdmakv.pollmode (busy|event),',
  '    rdmakv.timeoutms (5000); compare starts its own kv-server on shm, rdmakv.memory (its --memory, 1GiB)',
  'kv-bench additions:',
  '  kvbench.inflight (operations in flight per thread, 1), kvbench.resultsdir (bench/results),',
  '  kvbench.report (true: JSON + HTML report there), kvbench.progress (load progress bar;',
  '  on when stderr is a terminal), kvbench.sampleinterval (1000 ms), kvbench.keycache (65536).',
  'Examples:',
  '  kv-bench load -P bench/workloads/workloada -db redis -p redis.port=6379',
  '  kv-bench run -P bench/workloads/workloada -db redis -threads 2 -target 10000 -s',
  '  kv-bench compare -P bench/workloads/workloadb --db rdma-kv,redis,memcached,basic',
  '  kv-bench cache --db rdma-kv,redis --eviction lru,lfu -p cache.memory=32MiB',
  ...CACHE_PROPERTY_HELP,
].join('\n');

/** YCSB writes -threads, -target, -db with one dash; yargs must not split them into letters. */
function parser(argv: string[]) {
  return yargs(argv)
    .scriptName('kv-bench')
    .parserConfiguration({ 'short-option-groups': false, 'camel-case-expansion': false, 'dot-notation': false, 'parse-numbers': false, 'parse-positional-numbers': false })
    .usage('$0 <load|run|compare|cache> [options]\n\nA YCSB-compatible load generator: same workloads, generators and output.')
    .option('P', { type: 'string', array: true, describe: 'property file (YCSB workload), several allowed, later override earlier', requiresArg: true })
    .option('p', { type: 'string', array: true, describe: 'property name=value, overrides the files', requiresArg: true })
    .option('threads', { type: 'string', describe: 'client threads (worker_threads), property threadcount', requiresArg: true })
    .option('target', { type: 'string', describe: 'target operations per second over all threads, property target', requiresArg: true })
    .option('db', { type: 'string', describe: `binding: ${bindingNames().join(', ')} (compare: comma-separated list)`, requiresArg: true })
    .option('s', { type: 'boolean', describe: 'status line to stderr every status.interval seconds' })
    .option('l', { type: 'string', describe: 'label prefixed to status lines', requiresArg: true })
    .option('seed', { type: 'string', describe: 'seed the generators (reproducible key sequences)', requiresArg: true })
    .option('eviction', { type: 'string', describe: 'cache: eviction policies, comma-separated: none, lru, lfu', requiresArg: true })
    .command('load', 'load phase: insert recordcount (or insertcount) records')
    .command('run', 'run (transaction) phase: operationcount operations')
    .command('compare', 'load + run on each --db (comma-separated), starting redis, memcached or kv-server on loopback; one table')
    .command('cache', 'read-through (GET, on a miss PUT) over zipfian keys larger than memory: rdma-kv --eviction vs redis allkeys-*; one table')
    .demandCommand(1, 'name a command: load, run, compare or cache')
    .middleware(rejectMisspelledOptions(argv), true) // before .strictOptions() says only "Unknown argument"
    .strictCommands()
    .strictOptions()
    .epilog(PROPERTY_HELP)
    .wrap(Math.max(100, Math.min(120, process.stdout.columns ?? 100)))
    .help()
    .version(false)
    .exitProcess(false);
}

function parseIntArg(name: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text.trim())) throw new UsageError(`-${name} expects a non-negative integer, got "${text}"`);
  return Number(text);
}

function propertiesFrom(args: CommonArgs): Properties {
  const overrides: [string, string][] = [];
  for (const p of args.p ?? []) {
    const eq = p.indexOf('=');
    if (eq <= 0) throw new UsageError(`-p expects name=value (e.g. -p operationcount=99999), got "${p}"`);
    overrides.push([p.slice(0, eq), p.slice(eq + 1)]);
  }
  // YCSB stores -threads/-target/-db/-s/-l as properties, overriding files
  const threads = parseIntArg('threads', args.threads);
  const target = parseIntArg('target', args.target);
  if (threads !== undefined) overrides.push(['threadcount', String(threads)]);
  if (target !== undefined) overrides.push(['target', String(target)]);
  if (args.db !== undefined) overrides.push(['db', args.db]);
  if (args.s) overrides.push(['status', 'true']);
  if (args.l !== undefined) overrides.push(['label', args.l]);
  return Properties.fromSources(args.P ?? [], new Map(overrides));
}

function writeReports(result: PhaseResult, props: Properties, workloadFiles: string[], stderr: (t: string) => void): void {
  if (!props.getBoolean('kvbench.report', true)) return;
  const doc = toResultsDocument(result, props, workloadFiles);
  const dir = resolve(props.get('kvbench.resultsdir', defaultResultsDir()));
  const paths = resultsPaths(dir, resultsBaseName(doc));
  writeFileEnsuringDir(paths.json, JSON.stringify(doc, null, 2) + '\n');
  writeFileEnsuringDir(paths.html, phaseReportHtml(doc));
  stderr(`kv-bench: results ${paths.json}\nkv-bench: report  ${paths.html}\n`);
}

async function phaseCommand(phase: Phase, args: CommonArgs, io: CliIO): Promise<void> {
  const props = propertiesFrom(args);
  const seed = parseIntArg('seed', args.seed);
  resolvePhaseSettings({ props, phase }); // fail on bad input before printing anything
  io.stderr(`Command line: ${io.argv.join(' ')}\nkv-bench (YCSB-compatible client)\n\nLoading workload...\nStarting test.\n`);
  const exporter = createExporter(props.get('exporter'));
  const result = await runPhase({ props, phase, seed, stderr: io.stderr, stdout: io.stdout });
  const text = exportPhase(exporter, result, props.getBoolean('measurement.histogram.verbose', false));
  const exportFile = props.get('exportfile');
  if (exportFile !== undefined) writeFileSync(exportFile, text);
  else io.stdout(text);
  writeReports(result, props, args.P ?? [], io.stderr);
}

async function compareCommand(args: CommonArgs, io: CliIO): Promise<void> {
  const dbs = (args.db ?? '').split(',').map((d) => d.trim()).filter((d) => d !== '');
  if (dbs.length === 0) throw new UsageError('compare needs --db with a comma-separated list, e.g. --db redis,memcached,basic');
  dbs.forEach(checkBindingName);
  const props = propertiesFrom({ ...args, db: undefined });
  const seed = parseIntArg('seed', args.seed);
  const workloadFiles = args.P ?? [];
  const { rows, table } = await runCompare({
    props,
    dbs,
    seed,
    stderr: io.stderr,
    onPhase: (_db, result, phaseProps) => writeReports(result, phaseProps, workloadFiles, io.stderr),
  });
  io.stdout(table + '\n');
  if (props.getBoolean('kvbench.report', true)) {
    const dir = resolve(props.get('kvbench.resultsdir', defaultResultsDir()));
    const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    const workload = workloadFiles.map((f) => f.split(/[\\/]/).pop()).join('+') || 'default';
    const base = `ycsb-compare-${workload}-${stamp}`;
    const paths = resultsPaths(dir, base);
    writeFileEnsuringDir(paths.json, JSON.stringify({ tool: 'kv-bench', kind: 'compare', workloadFiles, dbs, rows }, null, 2) + '\n');
    writeFileEnsuringDir(paths.html, compareReportHtml(`kv-bench compare — ${workload}`, rows, table));
    io.stderr(`kv-bench: compare results ${paths.json}\nkv-bench: compare report  ${paths.html}\n`);
  }
}

/** A line for what yargs refused; a misspelled option's line names the one meant, so it needs no pointer to --help. */
function refusal(message: string | null | undefined, error: Error | undefined): string {
  if (error instanceof UsageError) return error.message;
  return `${(message ?? error?.message ?? 'invalid arguments').split('\n')[0]} (see kv-bench --help)`;
}

export interface CliIO {
  argv: string[];
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

/** Runs the CLI; resolves to the process exit code. */
export async function main(argv: string[], io?: Partial<CliIO>): Promise<number> {
  const out: CliIO = {
    argv,
    stdout: io?.stdout ?? ((t) => void process.stdout.write(t)),
    stderr: io?.stderr ?? ((t) => void process.stderr.write(t)),
  };
  let usageFailure: string | undefined;
  let args: CommonArgs & { _: (string | number)[]; help?: boolean };
  try {
    args = (await parser(argv)
      .fail((msg, err) => {
        usageFailure = refusal(msg, err);
      })
      .parseAsync()) as typeof args;
  } catch (err) {
    usageFailure ??= refusal(undefined, err as Error);
    args = { _: [] };
  }
  if (usageFailure !== undefined) {
    out.stderr(`kv-bench: ${usageFailure}\n`);
    return 2;
  }
  if (argv.includes('--help') || argv.includes('-h') || argv.includes('-help')) return 0;
  const command = String(args._[0]);
  if (args._.length > 1) {
    out.stderr(`kv-bench: unexpected argument "${args._[1]}" (see kv-bench --help)\n`);
    return 2;
  }
  try {
    if (args.eviction !== undefined && command !== 'cache') throw new UsageError('--eviction is an option of kv-bench cache');
    if (command === 'compare') await compareCommand(args, out);
    else if (command === 'cache') await cacheCommand(propertiesFrom({ ...args, db: undefined }), { db: args.db, eviction: args.eviction, seed: parseIntArg('seed', args.seed) }, out);
    else await phaseCommand(command === 'load' ? 'load' : 'run', args, out);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      out.stderr(`kv-bench: ${err.message}\n`);
      return 2;
    }
    out.stderr(`kv-bench: error: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}
