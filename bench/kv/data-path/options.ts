/**
 * The data-path benchmark's command line (bench/kv/data-path.ts). Bad input is a UsageError
 * (one line, exit code 2); `--quick` shrinks every size so the whole run takes seconds (the
 * test runs it so: the numbers then mean nothing, the table's shape does).
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { UsageError, optionSuggestion, parseCount } from '../../../protocol/operator-input.js';
import { PHASE_NAMES, type PhaseName } from './phases.js';

export const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));

/** The most value bytes a run holds (workload.ts makes them all up front). */
const MAX_VALUE_BYTES = 2 ** 30;

/**
 * What a run can leave out: the ioredis columns, the `npm start` rows, the transport floor
 * (the Soft-RoCE guest measures its own against perftest: bench-ratio.sh).
 */
const SKIPPABLE = ['redis', 'main-job', 'floor'] as const;
export type Skippable = (typeof SKIPPABLE)[number];

export interface DataPathOptions {
  /** measured seconds per phase (each after a warm-up of a quarter of it, at most 1 s) */
  seconds: number;
  keys: number;
  valueBytes: number;
  quick: boolean;
  pollMode: 'busy' | 'event';
  /** where the rdma-kv server child listens; undefined: a private shm socket */
  listen: string | undefined;
  phases: PhaseName[];
  skip: Set<Skippable>;
  json: string;
}

export const USAGE = `usage: node dist/bench/kv/data-path.js [--seconds 3] [--keys 100000] [--value-bytes 1024] [--quick]
         [--pollmode busy|event] [--listen shm:///path.sock|rdma://host:port] [--phases ${PHASE_NAMES.join(',')}]
         [--skip ${SKIPPABLE.join(',')}] [--json bench/results/data-path.json]`;

const OPTIONS = {
  seconds: { type: 'string' },
  keys: { type: 'string' },
  'value-bytes': { type: 'string' },
  quick: { type: 'boolean', default: false },
  pollmode: { type: 'string', default: 'busy' },
  listen: { type: 'string' },
  phases: { type: 'string', default: PHASE_NAMES.join(',') },
  skip: { type: 'string', default: '' },
  json: { type: 'string', default: join(ROOT, 'bench/results/data-path.json') },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

/** Each item of a comma-separated list, checked against the names allowed. */
function listOf<T extends string>(text: string, option: string, allowed: readonly T[]): T[] {
  const items = text.split(',').map((s) => s.trim()).filter((s) => s !== '');
  for (const item of items) {
    if (!allowed.includes(item as T)) throw new UsageError(`${option}: unknown '${item}' (one of ${allowed.join(', ')})`);
  }
  return items as T[];
}

/** The options, or undefined after --help (printed). */
export function parseOptions(argv: string[]): DataPathOptions | undefined {
  let values;
  try {
    ({ values } = parseArgs({ args: argv, options: OPTIONS, strict: true }));
  } catch (error) {
    const unknown = /Unknown option '(-+[^']+)'/.exec((error as Error).message)?.[1];
    const hint = unknown === undefined ? undefined : optionSuggestion(unknown, Object.keys(OPTIONS));
    throw new UsageError(`${(error as Error).message}${hint ? `: ${hint}` : ''}`);
  }
  if (values.help) {
    process.stdout.write(USAGE + '\n');
    return undefined;
  }
  const quick = values.quick;
  const seconds = Number(values.seconds ?? (quick ? '0.3' : '3'));
  if (!(seconds > 0 && seconds <= 3600)) throw new UsageError(`--seconds: '${values.seconds}' is not a number of seconds between 0 and 3600`);
  const pollMode = values.pollmode;
  if (pollMode !== 'busy' && pollMode !== 'event') throw new UsageError(`--pollmode: '${pollMode}' is not busy or event`);
  const phases = listOf(values.phases, '--phases', PHASE_NAMES);
  if (phases.length === 0) throw new UsageError('--phases: name at least one phase');
  const keys = parseCount(values.keys ?? (quick ? '2000' : '100000'), '--keys', 64, 10_000_000);
  const valueBytes = parseCount(values['value-bytes'] ?? '1024', '--value-bytes', 4, 1 << 20);
  if (keys * valueBytes > MAX_VALUE_BYTES) {
    throw new UsageError(`--keys ${keys} × --value-bytes ${valueBytes} is more than 1 GiB of values (this process holds them all, the server child 4 copies)`);
  }
  return {
    seconds,
    keys,
    valueBytes,
    quick,
    pollMode,
    listen: values.listen,
    phases,
    skip: new Set(listOf(values.skip, '--skip', SKIPPABLE)),
    json: values.json,
  };
}
