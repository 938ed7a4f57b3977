// What kvctl's command line means: the target (exactly one of --url, --servers,
// --etcd), the metrics addresses that go with it, and every value checked
// before anything is sent anywhere. A bad command line is a UsageError (exit
// code 2) whose message names the option.
import { UsageError, parseCount, parseDuration } from '../../protocol/operator-input.js';
import { checkListenUrl } from '../../protocol/providers.js';
import { etcdPrefixProblem } from '../../protocol/registry.js';
import { namespaceNameProblem } from '../../protocol/tokens.js';
import { oneLine } from './format.js';
import type { Io } from './io.js';
import { KVCTL_DEFAULTS, parser, protect, unprotect } from './parser.js';

/** Who kvctl talks to: exactly one of --url, --servers, --etcd. */
export type Target =
  | { kind: 'url'; url: string }
  | { kind: 'servers'; urls: string[] }
  | { kind: 'etcd'; hosts: string[]; prefix: string };

export type EtcdTarget = Extract<Target, { kind: 'etcd' }>;

export interface CtlArgs {
  command: string;
  key?: string;
  value?: string;
  delta?: string;
  /** put --ttl, expire's TTL: a duration as given (commands/ttl.ts parses it). */
  ttl?: string;
  name?: string;
  target: Target;
  token?: string;
  tokenFile?: string;
  /** --namespace: the one to open and whose stats to read; undefined: the token's (stats: the default one's). */
  namespace?: string;
  /** --metrics as given, split at commas; undefined when not given. */
  metrics?: string[];
  json: boolean;
  timeoutMs: number;
  intervalMs: number;
  count?: number;
  force: boolean;
  /** drain and rebalance: --cancel, --wait; rebalance --dry-run. */
  cancel: boolean;
  wait: boolean;
  dryRun: boolean;
  /** rebalance and drain --max-mbps, in bytes a second (0: no cap); undefined when not given. */
  maxBytesPerSecond?: number;
  /** rebalance --auto on|off: whether the controller starts a rebalance itself when a member joins; undefined when not given. */
  auto?: boolean;
  /** rebalance --by: even out hash slot counts (the default) or the bytes the members hold; undefined when not given. */
  by?: 'count' | 'bytes';
  /** rebalance --tolerance, as a fraction (5 %: 0.05); undefined when not given. */
  tolerance?: number;
}

/** --namespace, a valid name. */
function resolveNamespace(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  const bad = namespaceNameProblem(String(value));
  if (bad !== undefined) throw new UsageError(`--namespace: ${bad}`);
  return String(value);
}

/** A list option: repeated and/or comma-separated. */
function list(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  return (Array.isArray(value) ? value : [value]).flatMap((v) => String(v).split(',')).map((v) => v.trim());
}

function checkUrl(url: string, option: string): string {
  try {
    return checkListenUrl(url);
  } catch (error) {
    throw new UsageError((error as Error).message.replace(/^--listen/, option));
  }
}

function resolveTarget(args: Record<string, unknown>): Target {
  const given = (['url', 'servers', 'etcd'] as const).filter((name) => args[name] !== undefined);
  if (given.length > 1) throw new UsageError(`${given.map((n) => `--${n}`).join(' and ')} exclude each other: give one target`);
  if (args['etcd-prefix'] !== undefined && !given.includes('etcd')) throw new UsageError('--etcd-prefix only means something with --etcd');
  if (given[0] === 'servers') {
    const given = list(args.servers)!;
    if (given.some((url) => url === '')) throw new UsageError('--servers: an empty entry (expected URL,URL,...)');
    const urls = given.map((url) => checkUrl(url, '--servers'));
    const twice = urls.find((url, i) => urls.indexOf(url) !== i);
    if (twice) throw new UsageError(`--servers lists ${twice} twice`);
    return { kind: 'servers', urls };
  }
  if (given[0] === 'etcd') {
    const hosts = list(args.etcd)!;
    for (const host of hosts) {
      if (!/^https?:\/\/[^/\s]+\/?$/.test(host)) throw new UsageError(`--etcd ${host || "''"}: expected http://host:port (or https://)`);
    }
    const prefix = args['etcd-prefix'] === undefined ? KVCTL_DEFAULTS.etcdPrefix : String(args['etcd-prefix']);
    const badPrefix = etcdPrefixProblem(prefix);
    if (badPrefix !== undefined) throw new UsageError(`--etcd-prefix ${prefix}: ${badPrefix}`);
    return { kind: 'etcd', hosts, prefix };
  }
  if (Array.isArray(args.url)) throw new UsageError('--url is given more than once (a cluster is --servers URL,URL,...)');
  return { kind: 'url', url: checkUrl(args.url === undefined ? KVCTL_DEFAULTS.url : String(args.url), '--url') };
}

/** --metrics per target: a list only for --servers, and never for --etcd (etcd knows). */
function resolveMetrics(value: unknown, target: Target): string[] | undefined {
  const urls = list(value)?.map((url) => url.replace(/\/+$/, ''));
  if (urls === undefined) return undefined;
  if (target.kind === 'etcd') throw new UsageError('--metrics: with --etcd each member\'s metrics address comes from its registration in etcd');
  for (const url of urls) if (!/^https?:\/\/[^/\s]+$/.test(url)) throw new UsageError(`--metrics ${url || "''"}: expected http://host:port`);
  if (target.kind === 'url' && urls.length !== 1) throw new UsageError('--metrics: one address with --url (a list goes with --servers)');
  if (target.kind === 'servers' && urls.length !== target.urls.length) {
    throw new UsageError(`--metrics: ${urls.length} address${urls.length === 1 ? '' : 'es'} for ${target.urls.length} servers (one per server, in --servers order)`);
  }
  return urls;
}

/** A line for what yargs refused; a misspelled option's line names the one meant, so it needs no pointer to --help. */
function refusal(message: string | null | undefined, error: Error | undefined): string {
  if (error instanceof UsageError) return error.message;
  return `${oneLine(message ?? error?.message ?? 'invalid arguments')} (see kvctl --help)`;
}

/** The command line as CtlArgs, or the exit code when there is nothing to run (--help, or a usage error already printed). */
export async function parseArgs(argv: string[], io: Io): Promise<CtlArgs | number> {
  let failure: string | undefined;
  let args: Record<string, unknown> = {};
  try {
    args = (await parser(protect(argv))
      .fail((message, error) => {
        failure = refusal(message, error);
      })
      .parseAsync()) as Record<string, unknown>;
  } catch (error) {
    failure ??= refusal(undefined, error as Error);
  }
  if (failure !== undefined) {
    io.stderr(`kvctl: ${failure}\n`);
    return 2;
  }
  if (args.help === true || args.version === true) return 0;
  // --servers, --etcd and --metrics are lists: repeating them adds to the list.
  for (const name of ['token', 'token-file', 'namespace', 'timeout-ms', 'json', 'etcd-prefix', 'interval', 'count', 'force', 'cancel', 'wait', 'dry-run', 'max-mbps', 'auto', 'by', 'tolerance', 'key', 'value', 'delta', 'ttl', 'name']) {
    if (Array.isArray(args[name])) {
      io.stderr(`kvctl: --${name} is given more than once (see kvctl --help)\n`);
      return 2;
    }
  }
  const positional = (args._ as unknown[]).map(String);
  const command = positional[0] === 'delete' ? 'del' : positional[0]!;
  try {
    const target = resolveTarget(args);
    const intervalMs = parseDuration(String(args.interval ?? KVCTL_DEFAULTS.interval), '--interval');
    if (intervalMs === 0) throw new UsageError('--interval: must be more than 0');
    return {
      command,
      key: unprotect(args.key),
      value: unprotect(args.value),
      delta: unprotect(args.delta),
      ttl: unprotect(args.ttl),
      name: unprotect(args.name),
      target,
      token: args.token === undefined ? undefined : String(args.token),
      tokenFile: args['token-file'] === undefined ? undefined : String(args['token-file']),
      namespace: resolveNamespace(args.namespace),
      metrics: resolveMetrics(args.metrics, target),
      json: args.json === true,
      timeoutMs: parseDuration(String(args['timeout-ms']), '--timeout-ms'),
      intervalMs,
      count: args.count === undefined ? undefined : parseCount(String(args.count), '--count', 1, Number.MAX_SAFE_INTEGER),
      force: args.force === true,
      cancel: args.cancel === true,
      wait: args.wait === true,
      dryRun: args['dry-run'] === true,
      maxBytesPerSecond: args['max-mbps'] === undefined ? undefined : parseMbps(String(args['max-mbps'])),
      auto: args.auto === undefined ? undefined : args.auto === 'on',
      by: args.by === undefined ? undefined : args.by === 'bytes' ? 'bytes' : 'count',
      tolerance: args.tolerance === undefined ? undefined : parseTolerance(String(args.tolerance)),
    };
  } catch (error) {
    io.stderr(`kvctl: ${(error as Error).message}\n`);
    return 2;
  }
}

/** --max-mbps: a number of MB (10^6 bytes) a second, 0 for no cap; in bytes a second. */
function parseMbps(text: string): number {
  const mbps = Number(text);
  if (text.trim() === '' || !Number.isFinite(mbps) || mbps < 0 || mbps > 1e6) throw new UsageError(`--max-mbps ${text}: expected a number of MB a second from 0 (no cap) to 1000000`);
  return Math.round(mbps * 1e6);
}

/** --tolerance: a percentage from 0 to 100; as a fraction. */
function parseTolerance(text: string): number {
  const percent = Number(text.trim().replace(/%$/, ''));
  if (text.trim() === '' || !Number.isFinite(percent) || percent < 0 || percent > 100) throw new UsageError(`--tolerance ${text}: expected a percentage from 0 to 100`);
  return percent / 100;
}
