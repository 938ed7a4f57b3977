// kv-server's command line: the options and their --help, and argv turned
// into RawServerArgs (config.ts checks the values) or a usage error of one
// line: `kv-server: <reason> (see kv-server --help)`, exit code 2. An unknown
// option that looks like a known one misspelled is named ("did you mean
// --memory?"): protocol/operator-input.ts guesses, as for kvctl and kv-bench.
import yargs from 'yargs';

import { type RawServerArgs, DEFAULTS, LOG_LEVELS } from './config.js';
import { DEFAULT_GRACE_MS } from './options.js';
import { closestMatch, optionFlag, optionSuggestion, packageVersion, unknownOptionNames } from '../protocol/operator-input.js';

const EPILOG = [
  'Sizes are bytes with an optional binary unit: K, M, G, T (KB, KiB, ... mean the same; 1K = 1024).',
  'Durations are milliseconds, or a number with ms, s, m or h (250ms, 2s).',
  'Exit codes: 0 stopped by SIGTERM/SIGINT, 1 could not start or failed, 2 bad command line.',
  'SIGHUP rereads --token-file: new tokens work at once; clients of removed or re-roled tokens are disconnected.',
  'A token file: one `<token> <role> [<namespace>]` per line, role read (get, getMany, getWithVersion) or write',
  '(everything), namespace one given with --namespace (none: the default namespace, sized by --memory).',
  '',
  'Examples:',
  '  kv-server --memory 4GiB --token-file /etc/rdma-kv/token --metrics-port 9464',
  '  kv-server --listen shm:///run/rdma-kv/kv.sock --listen rdma://0.0.0.0:7471 --memory 1GiB',
  '  kv-server --memory 256MiB --namespace billing:1GiB --namespace search:2GiB --token-file /etc/rdma-kv/tokens',
  '',
  'Operations guide: docs/operations.md',
].join('\n');

function parser(argv: string[]) {
  return yargs(argv)
    .scriptName('kv-server')
    .usage('$0 [options]\n\nThe rdma-kv server: registers one memory region holding the hash index and the item heap,\naccepts clients, and stays out of their GETs.')
    .parserConfiguration({ 'parse-numbers': false, 'parse-positional-numbers': false, 'dot-notation': false })
    .option('listen', {
      alias: 'l',
      type: 'string',
      array: true,
      requiresArg: true,
      default: [...DEFAULTS.listen],
      describe: 'URL to serve, repeatable: shm:///path/to.sock (this host) or rdma://host:port (RDMA device)',
    })
    .option('memory', {
      alias: 'm',
      requiresArg: true,
      default: DEFAULTS.memory,
      describe: 'region size, bytes with unit (rings, hash index and item heap); with --namespace, the default namespace\'s',
    })
    .option('namespace', {
      type: 'string',
      array: true,
      requiresArg: true,
      defaultDescription: 'none: the default namespace alone',
      describe: 'NAME:SIZE, repeatable: one more isolated store with a region of its own (a token opens the namespace its file line names)',
    })
    .option('token', {
      requiresArg: true,
      defaultDescription: 'none: every client is accepted',
      describe: 'token clients must present (shows in ps: prefer --token-file)',
    })
    .option('token-file', {
      requiresArg: true,
      defaultDescription: 'none',
      describe: 'file of tokens, one `<token> <role>` per line (role read or write; # comments), or one bare token (write); reread on SIGHUP',
    })
    .option('buckets', {
      requiresArg: true,
      defaultDescription: 'memory / 1 KiB, rounded down to a power of two',
      describe: 'hash index buckets of 7 slots (count, a power of two)',
    })
    .option('max-value', {
      requiresArg: true,
      default: DEFAULTS.maxValue,
      describe: 'largest value, bytes with unit',
    })
    .option('grace-ms', {
      requiresArg: true,
      // No default value: without one given, config.ts takes the one for --eviction.
      defaultDescription: `${DEFAULT_GRACE_MS.none}; ${DEFAULT_GRACE_MS.evicting} with --eviction lru|lfu`,
      describe: 'milliseconds a freed heap block stays unused, so slow readers never see it reused',
    })
    .option('keepalive-ms', {
      requiresArg: true,
      default: DEFAULTS.keepaliveMs,
      describe: 'milliseconds between client pings; a client silent for 3 is fenced, its locks released',
    })
    .option('max-clients', {
      requiresArg: true,
      default: DEFAULTS.maxClients,
      describe: 'clients connected at once (count, 1 to 65536)',
    })
    .option('region-file', {
      requiresArg: true,
      defaultDescription: 'none: anonymous memory, gone at exit',
      describe: 'keep the region in this file; restarting on it serves the same data',
    })
    .option('eviction', {
      requiresArg: true,
      default: DEFAULTS.eviction,
      describe: 'when the heap is full: none (a PUT fails with KV_OUT_OF_MEMORY), lru or lfu (evict the least recently / least often read items)',
    })
    .option('eviction-high', {
      requiresArg: true,
      default: DEFAULTS.evictionHigh,
      describe: 'with --eviction lru|lfu: heap use, in percent, above which items are evicted',
    })
    .option('eviction-low', {
      requiresArg: true,
      default: DEFAULTS.evictionLow,
      describe: 'with --eviction lru|lfu: heap use, in percent, eviction brings it down to',
    })
    .option('expiry-sweep-ms', {
      requiresArg: true,
      default: DEFAULTS.expirySweepMs,
      describe: 'milliseconds between the background passes that give expired items\' memory back',
    })
    .option('metrics-port', {
      requiresArg: true,
      default: DEFAULTS.metricsPort,
      describe: 'TCP port for /metrics (Prometheus) and /stats (JSON); 0: off',
    })
    .option('metrics-host', {
      requiresArg: true,
      default: DEFAULTS.metricsHost,
      describe: 'address the metrics port binds (0.0.0.0: every interface)',
    })
    .option('etcd', {
      type: 'string',
      array: true,
      requiresArg: true,
      defaultDescription: 'none: a standalone server',
      describe: 'register in etcd for cluster membership: http://host:2379 (repeat, or comma-separate, for more endpoints); docs/cluster.md',
    })
    .option('etcd-prefix', {
      requiresArg: true,
      defaultDescription: DEFAULTS.etcdPrefix,
      describe: 'with --etcd: the cluster\'s key prefix (one cluster per prefix)',
    })
    .option('name', {
      requiresArg: true,
      defaultDescription: '<hostname>-<port or socket name>',
      describe: 'with --etcd: this member\'s name, stable across restarts (it owns slots)',
    })
    .option('advertise', {
      requiresArg: true,
      defaultDescription: 'the first --listen URL',
      describe: 'with --etcd: the URL clients dial (needed when listening on 0.0.0.0)',
    })
    .option('etcd-ttl', {
      requiresArg: true,
      defaultDescription: DEFAULTS.etcdTtl,
      describe: 'with --etcd: lease time; a crashed server shows as down after this',
    })
    .option('replace-after', {
      requiresArg: true,
      defaultDescription: DEFAULTS.replaceAfter,
      describe: 'with --etcd and --replicas > 1: a hash slot short of a replica this long is copied to a member holding others (at once to one holding none)',
    })
    .option('repair-rate', {
      requiresArg: true,
      defaultDescription: DEFAULTS.repairRate,
      describe: 'with --etcd: MB a second this member copies to members syncing into its hash slots (repair, drain, rebalance; 0: no limit)',
    })
    .option('replicas', {
      requiresArg: true,
      defaultDescription: '1',
      describe: 'copies of each hash slot, 1 to 3, the same on every member; above 1 needs --etcd (experimental, issue 17)',
    })
    .option('zone', {
      requiresArg: true,
      defaultDescription: 'none: its own',
      describe: 'with --etcd: this member\'s failure domain; a hash slot\'s replicas go to distinct zones',
    })
    .option('log-level', {
      requiresArg: true,
      choices: LOG_LEVELS,
      default: DEFAULTS.logLevel,
      describe: 'JSON logs on stderr, one line per lifecycle event',
    })
    .strict()
    .epilog(EPILOG)
    .wrap(Math.max(100, Math.min(120, process.stdout.columns ?? 120)))
    .help()
    .alias('help', 'h')
    .version(packageVersion())
    .exitProcess(false);
}

const SCALAR_OPTIONS = [
  'memory', 'token', 'token-file', 'buckets', 'max-value', 'grace-ms', 'keepalive-ms', 'max-clients',
  'region-file', 'metrics-port', 'metrics-host', 'log-level', 'etcd-prefix', 'name', 'advertise', 'etcd-ttl', 'replace-after', 'repair-rate',
  'eviction', 'eviction-high', 'eviction-low', 'expiry-sweep-ms', 'replicas', 'zone',
] as const;


/** Options given as arrays (repeatable); every other is scalar. */
const ARRAY_OPTIONS = ['listen', 'etcd', 'namespace'] as const;
/** One-letter aliases and yargs' own options: known, never suggested. */
const OTHER_NAMES = ['l', 'm', 'h', 'help', 'version'];

/**
 * What a misspelled option probably meant — "did you mean --memory?" — for the unknown
 * options of a command line that failed, or undefined. The unknown names come from a parse
 * without checks (yargs' own message names them too, but in the user's locale).
 */
function misspelledOptions(argv: string[]): string | undefined {
  let keys: string[];
  try {
    keys = Object.keys(parser(argv).strict(false).help(false).version(false).fail(() => {}).parseSync());
  } catch {
    return undefined;
  }
  const options = [...ARRAY_OPTIONS, ...SCALAR_OPTIONS];
  const unknown = unknownOptionNames(keys, [...options, ...OTHER_NAMES]);
  if (unknown.length === 1) return optionSuggestion(unknown[0]!, options);
  const guesses = unknown.flatMap((name) => {
    const meant = closestMatch(name, options);
    return meant === undefined ? [] : [`${optionFlag(meant)} for ${optionFlag(name)}`];
  });
  return guesses.length > 0 ? `did you mean ${guesses.join(', ')}?` : undefined;
}

/** One line, whatever the message holds. */
export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

export type Parsed = { ok: true; args: RawServerArgs } | { ok: false; code: number };

/** The arguments, or the exit code once --help or --version has printed (0) or a usage error has (2). */
export async function parseArgs(argv: string[]): Promise<Parsed> {
  let failure: string | undefined;
  let args: Record<string, unknown> = {};
  try {
    args = (await parser(argv)
      .fail((message, error) => {
        failure = message ?? error?.message ?? 'invalid arguments';
      })
      .parseAsync()) as Record<string, unknown>;
  } catch (error) {
    failure ??= (error as Error).message;
  }
  if (failure !== undefined) {
    const meant = misspelledOptions(argv);
    process.stderr.write(`kv-server: ${oneLine(failure)}${meant ? `; ${meant}` : ''} (see kv-server --help)\n`);
    return { ok: false, code: 2 };
  }
  if (args.help === true || args.version === true) return { ok: false, code: 0 };
  for (const name of SCALAR_OPTIONS) {
    if (Array.isArray(args[name])) {
      process.stderr.write(`kv-server: --${name} is given more than once (see kv-server --help)\n`);
      return { ok: false, code: 2 };
    }
    if (args[name] !== undefined) args[name] = String(args[name]);
  }
  return {
    ok: true,
    args: {
      listen: args.listen as string[],
      memory: args.memory as string,
      namespace: args.namespace as string[] | undefined,
      token: args.token as string | undefined,
      tokenFile: args['token-file'] as string | undefined,
      buckets: args.buckets as string | undefined,
      maxValue: args['max-value'] as string,
      graceMs: args['grace-ms'] as string | undefined,
      keepaliveMs: args['keepalive-ms'] as string,
      maxClients: args['max-clients'] as string,
      metricsPort: args['metrics-port'] as string,
      metricsHost: args['metrics-host'] as string,
      logLevel: args['log-level'] as RawServerArgs['logLevel'],
      regionFile: args['region-file'] as string | undefined,
      etcd: args.etcd as string[] | undefined,
      etcdPrefix: args['etcd-prefix'] as string | undefined,
      etcdTtl: args['etcd-ttl'] as string | undefined,
      replaceAfter: args['replace-after'] as string | undefined,
      repairRate: args['repair-rate'] as string | undefined,
      name: args.name as string | undefined,
      advertise: args.advertise as string | undefined,
      eviction: args.eviction as string | undefined,
      evictionHigh: args['eviction-high'] as string | undefined,
      evictionLow: args['eviction-low'] as string | undefined,
      expirySweepMs: args['expiry-sweep-ms'] as string | undefined,
      replicas: args.replicas as string | undefined,
      zone: args.zone as string | undefined,
    },
  };
}

