// kvctl's command line as yargs sees it: the options, the commands, the help
// text, and the marking that lets '-' and the words after '--' through yargs as
// plain words. What the parsed values mean is args.ts.
import yargs from 'yargs';

import { DEFAULT_ETCD_PREFIX } from '../../protocol/registry.js';
import { packageVersion } from '../../protocol/operator-input.js';
import { rejectMisspelledOptions } from '../misspelled-options.js';

export const KVCTL_DEFAULTS = {
  url: 'shm:///run/rdma-kv/kv.sock',
  metrics: 'http://127.0.0.1:9464',
  timeoutMs: '5000',
  etcdPrefix: DEFAULT_ETCD_PREFIX,
  interval: '1s',
} as const;

export function parser(argv: string[]) {
  return yargs(argv)
    .scriptName('kvctl')
    .usage('$0 [options] <command>\n\nrdma-kv from a shell: keys through KvClient, the cluster map, live server stats.')
    .parserConfiguration({ 'parse-numbers': false, 'parse-positional-numbers': false, 'dot-notation': false })
    .option('url', { alias: 'u', requiresArg: true, defaultDescription: KVCTL_DEFAULTS.url, describe: 'one server: shm:///path/to.sock or rdma://host:port' })
    .option('servers', { requiresArg: true, defaultDescription: 'none', describe: 'a static cluster: URL,URL,... (every client must list the same set)' })
    .option('etcd', { requiresArg: true, defaultDescription: 'none', describe: 'a cluster registered in etcd (kv-server --etcd): http://host:2379[,...]' })
    .option('etcd-prefix', { requiresArg: true, defaultDescription: KVCTL_DEFAULTS.etcdPrefix, describe: 'with --etcd: the cluster\'s key prefix' })
    .option('token', { requiresArg: true, defaultDescription: 'none', describe: 'the servers\' token (shows in ps: prefer --token-file)' })
    .option('token-file', { requiresArg: true, defaultDescription: 'none', describe: 'file holding the token (whitespace around it is trimmed)' })
    .option('namespace', { requiresArg: true, defaultDescription: 'the token\'s', describe: 'the namespace (kv-server --namespace) to open, and whose stats to show; the token must be one of it' })
    .option('metrics', {
      requiresArg: true,
      defaultDescription: `${KVCTL_DEFAULTS.metrics} with --url`,
      describe: 'kv-server --metrics-port address, for stats and watch (--servers: one each, in order; --etcd: from etcd)',
    })
    .option('timeout-ms', { requiresArg: true, default: KVCTL_DEFAULTS.timeoutMs, describe: 'milliseconds to wait for connecting and for each request' })
    .option('json', { type: 'boolean', default: false, describe: 'machine-readable output: JSON on stdout (watch: one object per line)' })
    .command('get <key>', 'print the value of KEY (raw bytes; missing: nothing on stdout, exit 1)', (y) => y.positional('key', { type: 'string' }))
    .command('put <key> <value>', 'store VALUE under KEY (VALUE - reads it from stdin)', (y) =>
      y
        .positional('key', { type: 'string' })
        .positional('value', { type: 'string' })
        .option('ttl', { requiresArg: true, defaultDescription: 'none (never expires)', describe: 'KEY expires this long after the put (500ms, 30s, 10m, 2h, 7d)' }),
    )
    .command('expire <key> <ttl>', 'give KEY\'s current value a TTL (a duration: 30s, 2h; missing key: exit 1)', (y) =>
      y.positional('key', { type: 'string' }).positional('ttl', { type: 'string' }),
    )
    .command('persist <key>', 'remove KEY\'s TTL (missing key: exit 1)', (y) => y.positional('key', { type: 'string' }))
    .command('ttl <key>', 'print the ms KEY has left, or "none" without a TTL (missing: exit 1)', (y) => y.positional('key', { type: 'string' }))
    .command(['del <key>', 'delete <key>'], 'delete KEY (missing: exit 1)', (y) => y.positional('key', { type: 'string' }))
    .command('incr <key> [delta]', 'add DELTA (default 1; negative subtracts) to counter KEY, created at DELTA; print the value', (y) =>
      y.positional('key', { type: 'string' }).positional('delta', { type: 'string' }),
    )
    .command('stats', 'each server\'s counters and sizes, from its metrics address (/stats)')
    .command('layout [key]', 'the cluster map: members, URL, state, slots owned; with KEY: its slot and member', (y) => y.positional('key', { type: 'string' }))
    .command('watch', 'each member\'s state, items, clients, load and notifications/s, live until Ctrl-C', (y) =>
      y
        .option('interval', { requiresArg: true, default: KVCTL_DEFAULTS.interval, describe: 'time between refreshes (250ms, 2s, ...)' })
        .option('count', { requiresArg: true, defaultDescription: 'until Ctrl-C', describe: 'stop after this many refreshes' }),
    )
    .command('forget <name>', 'with --etcd: remove member NAME for good (its slots move; its keys become unreachable)', (y) =>
      y.positional('name', { type: 'string' }).option('force', { type: 'boolean', default: false, describe: 'forget it even while it is alive' }),
    )
    .command('drain <name>', 'with --etcd: move every hash slot of member NAME, with its keys, to other members, then it can be stopped', (y) =>
      y
        .positional('name', { type: 'string' })
        .option('wait', { type: 'boolean', default: false, describe: 'print progress until NAME holds no hash slot' })
        .option('cancel', { type: 'boolean', default: false, describe: 'stop draining NAME (hash slots already moved stay moved)' })
        .option('max-mbps', { type: 'string', describe: 'while the drain runs, each copying member copies at most this many MB a second (also changes the rate of the drain in progress; 0: no cap)' }),
    )
    .command('rebalance', 'with --etcd: move hash slots, with their keys, to the placement the live members would be given (after a member joined)', (y) =>
      y
        .option('wait', { type: 'boolean', default: false, describe: 'print progress until every hash slot has moved' })
        .option('dry-run', { type: 'boolean', default: false, describe: 'print what would move, write nothing' })
        .option('cancel', { type: 'boolean', default: false, describe: 'stop the rebalance in progress (hash slots already moved stay moved)' })
        .option('max-mbps', { type: 'string', describe: 'each copying member copies at most this many MB a second (also changes the rate of one in progress; 0: no cap)' })
        .option('by', { type: 'string', choices: ['count', 'bytes'], describe: 'even out the hash slots each member holds (count), or the bytes (from the members\' load records); count by default' })
        .option('tolerance', { type: 'string', describe: 'with --by bytes: how far above the mean a member may stay, in percent (default 5)' })
        .option('auto', { type: 'string', choices: ['on', 'off'], describe: 'on: the controller starts a rebalance itself whenever a member joins the frozen cluster; off: only kvctl rebalance does (the default)' }),
    )
    .demandCommand(1, 'name a command: get, put, del, incr, expire, persist, ttl, stats, layout, watch, forget, drain or rebalance')
    .middleware(rejectMisspelledOptions(argv), true) // before .strict() says only "Unknown argument"
    .strict()
    .epilog(
      [
        'Targets: --url (one server, the default), --servers (a static list) or --etcd (members registered in etcd); give one.',
        'Keys and values given as arguments are UTF-8 text; words after -- are taken as they are (put -- -k -v).',
        'With --json, values that are not valid UTF-8 are shown in base64. docs/kvctl.md describes every command.',
        'Exit codes: 0 done, 1 failed or key not found, 2 bad command line (a misspelled option: the line names the one meant).',
        '',
        'Examples:',
        '  kvctl put greeting hello && kvctl get greeting',
        '  kvctl --url rdma://10.0.0.5:7471 --token-file /etc/rdma-kv/token put config - < config.json',
        '  kvctl incr visits && kvctl incr stock -3',
        '  kvctl put session:42 token --ttl 30m && kvctl ttl session:42',
        '  kvctl --metrics http://127.0.0.1:9464 stats --json',
        '  kvctl --namespace billing --token-file /etc/rdma-kv/tokens get invoice:7',
        '  kvctl --servers rdma://10.0.0.1:7471,rdma://10.0.0.2:7471 layout user:42',
        '  kvctl --etcd http://10.0.0.9:2379 watch --interval 2s',
        '  kvctl --etcd http://10.0.0.9:2379 forget kv-3',
        '  kvctl --etcd http://10.0.0.9:2379 drain kv-3 --max-mbps 100 --wait',
        '  kvctl --etcd http://10.0.0.9:2379 rebalance --dry-run',
        '  kvctl --etcd http://10.0.0.9:2379 rebalance --by bytes --tolerance 10 --dry-run',
        '  kvctl --etcd http://10.0.0.9:2379 rebalance --max-mbps 200 --wait',
      ].join('\n'),
    )
    .wrap(Math.max(100, Math.min(120, process.stdout.columns ?? 120)))
    .help()
    .alias('help', 'h')
    .version(packageVersion())
    .exitProcess(false);
}

/**
 * yargs turns a lone '-' into '' and leaves arguments after '--' out of the
 * positionals. Marked, they pass as plain words: `put KEY -` reads stdin and
 * `put -- -key -value` stores words that start with a dash.
 */
const MARK = '\u0001';

export function protect(argv: string[]): string[] {
  const out: string[] = [];
  let rest = false;
  for (const arg of argv) {
    if (rest || arg === '-') out.push(MARK + arg);
    else if (arg === '--') rest = true;
    else out.push(arg);
  }
  return out;
}

export function unprotect(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  const text = String(value);
  return text.startsWith(MARK) ? text.slice(1) : text;
}
