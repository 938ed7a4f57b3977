// kvctl: rdma-kv from a shell. get/put/del/incr go through KvClient, which
// routes each key to its member; stats and watch read each server's /stats
// over HTTP (kv-server --metrics-port); layout shows the slot map; forget
// removes an etcd member for good. The target is one server (--url), a static
// cluster (--servers) or an etcd cluster (--etcd). Output is for people by
// default and JSON with --json. Exit codes: 0 done, 1 failed (including a key
// that does not exist), 2 bad command line.
import { setTimeout as sleep } from 'node:timers/promises';

import type { Etcd3 } from 'etcd3';
import yargs from 'yargs';

import { type AliveRecord, DEFAULT_ETCD_PREFIX, checkMemberName, etcdKeys, openEtcd } from '../protocol/registry.js';
import { assignSlots } from '../protocol/hash-slots.js';
import {
  KvClient,
  type KvClientOptions,
  type KvError,
  KvTypeMismatchError,
  type KvStatusName,
  type MemberLayout,
  SLOT_COUNT,
  keySlot,
} from '../client/index.js';
import { StartupError, UsageError, formatBytes, packageVersion, parseCount, parseDuration, readTokenFile } from '../protocol/operator-input.js';
import { checkListenUrl } from '../protocol/providers.js';

export const KVCTL_DEFAULTS = {
  url: 'shm:///run/rdma-kv/kv.sock',
  metrics: 'http://127.0.0.1:9464',
  timeoutMs: '5000',
  etcdPrefix: DEFAULT_ETCD_PREFIX,
  interval: '1s',
} as const;

interface Io {
  stdout: (data: string | Buffer) => void;
  stderr: (text: string) => void;
  stdin: () => Promise<Buffer>;
  stdoutIsTTY: boolean;
}

/** Who kvctl talks to: exactly one of --url, --servers, --etcd. */
type Target =
  | { kind: 'url'; url: string }
  | { kind: 'servers'; urls: string[] }
  | { kind: 'etcd'; hosts: string[]; prefix: string };

interface CtlArgs {
  command: string;
  key?: string;
  value?: string;
  delta?: string;
  name?: string;
  target: Target;
  token?: string;
  tokenFile?: string;
  /** --metrics as given, split at commas; undefined when not given. */
  metrics?: string[];
  json: boolean;
  timeoutMs: number;
  intervalMs: number;
  count?: number;
  force: boolean;
}

class CtlUsageError extends Error {}
/** Not a failure of kvctl, but exit code 1 all the same (a missing key). */
class NotFound extends Error {}

function parser(argv: string[]) {
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
    .option('metrics', {
      requiresArg: true,
      defaultDescription: `${KVCTL_DEFAULTS.metrics} with --url`,
      describe: 'kv-server --metrics-port address, for stats and watch (--servers: one each, in order; --etcd: from etcd)',
    })
    .option('timeout-ms', { requiresArg: true, default: KVCTL_DEFAULTS.timeoutMs, describe: 'milliseconds to wait for connecting and for each request' })
    .option('json', { type: 'boolean', default: false, describe: 'machine-readable output: JSON on stdout (watch: one object per line)' })
    .command('get <key>', 'print the value of KEY (raw bytes; missing: nothing on stdout, exit 1)', (y) => y.positional('key', { type: 'string' }))
    .command('put <key> <value>', 'store VALUE under KEY (VALUE - reads it from stdin)', (y) =>
      y.positional('key', { type: 'string' }).positional('value', { type: 'string' }),
    )
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
    .demandCommand(1, 'name a command: get, put, del, incr, stats, layout, watch or forget')
    .strict()
    .epilog(
      [
        'Targets: --url (one server, the default), --servers (a static list) or --etcd (members registered in etcd); give one.',
        'Keys and values given as arguments are UTF-8 text; words after -- are taken as they are (put -- -k -v).',
        'With --json, values that are not valid UTF-8 are shown in base64. docs/kvctl.md describes every command.',
        'Exit codes: 0 done, 1 failed or key not found, 2 bad command line.',
        '',
        'Examples:',
        '  kvctl put greeting hello && kvctl get greeting',
        '  kvctl --url rdma://10.0.0.5:7471 --token-file /etc/rdma-kv/token put config - < config.json',
        '  kvctl incr visits && kvctl incr stock -3',
        '  kvctl --metrics http://127.0.0.1:9464 stats --json',
        '  kvctl --servers rdma://10.0.0.1:7471,rdma://10.0.0.2:7471 layout user:42',
        '  kvctl --etcd http://10.0.0.9:2379 watch --interval 2s',
        '  kvctl --etcd http://10.0.0.9:2379 forget kv-3',
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

function protect(argv: string[]): string[] {
  const out: string[] = [];
  let rest = false;
  for (const arg of argv) {
    if (rest || arg === '-') out.push(MARK + arg);
    else if (arg === '--') rest = true;
    else out.push(arg);
  }
  return out;
}

function unprotect(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  const text = String(value);
  return text.startsWith(MARK) ? text.slice(1) : text;
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
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
    throw new CtlUsageError((error as Error).message.replace(/^--listen/, option));
  }
}

function resolveTarget(args: Record<string, unknown>): Target {
  const given = (['url', 'servers', 'etcd'] as const).filter((name) => args[name] !== undefined);
  if (given.length > 1) throw new CtlUsageError(`${given.map((n) => `--${n}`).join(' and ')} exclude each other: give one target`);
  if (args['etcd-prefix'] !== undefined && !given.includes('etcd')) throw new CtlUsageError('--etcd-prefix only means something with --etcd');
  if (given[0] === 'servers') {
    const given = list(args.servers)!;
    if (given.some((url) => url === '')) throw new CtlUsageError('--servers: an empty entry (expected URL,URL,...)');
    const urls = given.map((url) => checkUrl(url, '--servers'));
    const twice = urls.find((url, i) => urls.indexOf(url) !== i);
    if (twice) throw new CtlUsageError(`--servers lists ${twice} twice`);
    return { kind: 'servers', urls };
  }
  if (given[0] === 'etcd') {
    const hosts = list(args.etcd)!;
    for (const host of hosts) {
      if (!/^https?:\/\/[^/\s]+\/?$/.test(host)) throw new CtlUsageError(`--etcd ${host || "''"}: expected http://host:port (or https://)`);
    }
    const prefix = args['etcd-prefix'] === undefined ? KVCTL_DEFAULTS.etcdPrefix : String(args['etcd-prefix']);
    if (!prefix.startsWith('/') || prefix.length < 2) throw new CtlUsageError(`--etcd-prefix ${prefix}: expected an absolute key prefix such as /rdma-kv`);
    return { kind: 'etcd', hosts, prefix };
  }
  if (Array.isArray(args.url)) throw new CtlUsageError('--url is given more than once (a cluster is --servers URL,URL,...)');
  return { kind: 'url', url: checkUrl(args.url === undefined ? KVCTL_DEFAULTS.url : String(args.url), '--url') };
}

/** --metrics per target: a list only for --servers, and never for --etcd (etcd knows). */
function resolveMetrics(value: unknown, target: Target): string[] | undefined {
  const urls = list(value)?.map((url) => url.replace(/\/+$/, ''));
  if (urls === undefined) return undefined;
  if (target.kind === 'etcd') throw new CtlUsageError('--metrics: with --etcd each member\'s metrics address comes from its registration in etcd');
  for (const url of urls) if (!/^https?:\/\/[^/\s]+$/.test(url)) throw new CtlUsageError(`--metrics ${url || "''"}: expected http://host:port`);
  if (target.kind === 'url' && urls.length !== 1) throw new CtlUsageError('--metrics: one address with --url (a list goes with --servers)');
  if (target.kind === 'servers' && urls.length !== target.urls.length) {
    throw new CtlUsageError(`--metrics: ${urls.length} address${urls.length === 1 ? '' : 'es'} for ${target.urls.length} servers (one per server, in --servers order)`);
  }
  return urls;
}

async function parseArgs(argv: string[], io: Io): Promise<CtlArgs | number> {
  let failure: string | undefined;
  let args: Record<string, unknown> = {};
  try {
    args = (await parser(protect(argv))
      .fail((message, error) => {
        failure = message ?? error?.message ?? 'invalid arguments';
      })
      .parseAsync()) as Record<string, unknown>;
  } catch (error) {
    failure ??= (error as Error).message;
  }
  if (failure !== undefined) {
    io.stderr(`kvctl: ${oneLine(failure)} (see kvctl --help)\n`);
    return 2;
  }
  if (args.help === true || args.version === true) return 0;
  // --servers, --etcd and --metrics are lists: repeating them adds to the list.
  for (const name of ['token', 'token-file', 'timeout-ms', 'json', 'etcd-prefix', 'interval', 'count', 'force', 'key', 'value', 'delta', 'name']) {
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
    if (intervalMs === 0) throw new CtlUsageError('--interval: must be more than 0');
    return {
      command,
      key: unprotect(args.key),
      value: unprotect(args.value),
      delta: unprotect(args.delta),
      name: unprotect(args.name),
      target,
      token: args.token === undefined ? undefined : String(args.token),
      tokenFile: args['token-file'] === undefined ? undefined : String(args['token-file']),
      metrics: resolveMetrics(args.metrics, target),
      json: args.json === true,
      timeoutMs: parseDuration(String(args['timeout-ms']), '--timeout-ms'),
      intervalMs,
      count: args.count === undefined ? undefined : parseCount(String(args.count), '--count', 1, Number.MAX_SAFE_INTEGER),
      force: args.force === true,
    };
  } catch (error) {
    io.stderr(`kvctl: ${(error as Error).message}\n`);
    return 2;
  }
}

// ---- talking to the target ---------------------------------------------------------------

/** The target and credentials of the command line, plus how this command connects. */
function clientOptions(args: CtlArgs, connecting: Pick<KvClientOptions, 'reconnect' | 'requireReady'>): KvClientOptions {
  if (args.token !== undefined && args.tokenFile !== undefined) throw new CtlUsageError('--token and --token-file exclude each other');
  const token = args.tokenFile !== undefined ? readTokenFile(args.tokenFile) : args.token;
  const { target } = args;
  const where: KvClientOptions =
    target.kind === 'url' ? { url: target.url }
    : target.kind === 'servers' ? { servers: target.urls }
    : { etcd: { hosts: target.hosts, prefix: target.prefix } };
  return { ...where, token, timeoutMs: args.timeoutMs, ...connecting };
}

/**
 * One-shot commands: connect, run, close. Client warnings (a bad etcd record, say) go to stderr.
 * requireReady: false for commands that make sense with every member down (layout).
 */
async function withClient<T>(args: CtlArgs, io: Io, run: (kv: KvClient) => Promise<T>, requireReady = true): Promise<T> {
  const kv = await KvClient.connect(clientOptions(args, { reconnect: false, requireReady }));
  kv.on('error', (error) => io.stderr(`kvctl: warning: ${oneLine(error.message)}\n`));
  try {
    return await run(kv);
  } finally {
    await kv.close();
  }
}

interface EtcdCluster {
  /** Member names, sorted. */
  members: string[];
  /** Alive records by member name (fields may be missing in a malformed record). */
  alive: Map<string, Partial<AliveRecord>>;
}

/** The members and alive records under the prefix, in one read. */
async function readCluster(etcd: Etcd3, target: Extract<Target, { kind: 'etcd' }>): Promise<EtcdCluster> {
  const keys = etcdKeys(target.prefix);
  let entries: Record<string, string>;
  try {
    entries = await etcd.getAll().prefix(keys.root).strings();
  } catch (error) {
    throw new Error(`cannot read the cluster from etcd at ${target.hosts.join(',')} (prefix ${target.prefix}): ${(error as Error).message}`);
  }
  const members: string[] = [];
  const alive = new Map<string, Partial<AliveRecord>>();
  for (const [key, value] of Object.entries(entries)) {
    if (key.startsWith(keys.members)) members.push(key.slice(keys.members.length));
    if (key.startsWith(keys.alive)) {
      let record: Partial<AliveRecord> = {};
      try {
        record = JSON.parse(value) as Partial<AliveRecord>;
      } catch {
        // kept as alive with nothing known: the key's existence is what makes it alive
      }
      alive.set(key.slice(keys.alive.length), record);
    }
  }
  return { members: members.sort(), alive };
}

/** The metrics base URL of each member, by member name (undefined: none known). */
function staticMetrics(args: CtlArgs): Map<string, string | undefined> {
  const { target } = args;
  if (target.kind === 'url') return new Map([[target.url, args.metrics?.[0] ?? KVCTL_DEFAULTS.metrics]]);
  if (target.kind === 'servers') return new Map(target.urls.map((url, i) => [url, args.metrics?.[i]]));
  throw new Error('etcd members\' metrics come from etcd');
}

function etcdMetrics(cluster: EtcdCluster): Map<string, string | undefined> {
  return new Map(cluster.members.map((name) => [name, cluster.alive.get(name)?.metrics]));
}

/** GET <metrics>/stats as an object; errors say why in a way a person can act on. */
async function readStats(metrics: string, timeoutMs: number): Promise<Record<string, unknown>> {
  const url = `${metrics}/stats`;
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why =
      cause?.code === 'ECONNREFUSED' ? 'connection refused (is kv-server running with --metrics-port?)'
      : (error as Error).name === 'TimeoutError' ? `no answer within ${timeoutMs} ms`
      : cause?.code ?? cause?.message ?? (error as Error).message;
    throw new Error(`cannot reach ${url}: ${why}`);
  }
  const body = await response.text();
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${oneLine(body)}`);
  try {
    return JSON.parse(body) as Record<string, unknown>;
  } catch {
    throw new Error(`${url}: the answer is not JSON (is this a kv-server metrics port?)`);
  }
}

/** What people are told about a member: ready, reconnecting, or down (no connection and none coming). */
type MemberState = 'ready' | 'reconnecting' | 'down';

function memberState(status: KvStatusName | 'down'): MemberState {
  // 'connecting' after connect() returned means its first attempt failed (one-shot commands do not retry).
  return status === 'ready' ? 'ready' : status === 'reconnecting' ? 'reconnecting' : 'down';
}

const percent = (slots: number) => Math.round((slots / SLOT_COUNT) * 10_000) / 100;

/** Columns padded to their widest cell; numeric columns right-aligned. */
function table(rows: string[][], numeric: boolean[]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
  return rows
    .map((row) => row.map((cell, c) => (numeric[c] ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!))).join('  ').trimEnd())
    .join('\n') + '\n';
}

function clock(): string {
  return new Date().toTimeString().slice(0, 8);
}

// ---- commands ----------------------------------------------------------------------------

function jsonValue(value: Buffer): { value: string; encoding: 'utf8' | 'base64' } {
  const text = value.toString('utf8');
  return Buffer.from(text, 'utf8').equals(value) ? { value: text, encoding: 'utf8' } : { value: value.toString('base64'), encoding: 'base64' };
}

async function get(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const found = await withClient(args, io, (kv) => kv.getWithVersion(key));
  if (!found) throw new NotFound(`not found: ${key}`);
  if (args.json) {
    io.stdout(JSON.stringify({ key, ...jsonValue(found.value), version: found.version.toString() }) + '\n');
  } else {
    io.stdout(found.value);
    if (io.stdoutIsTTY) io.stdout('\n');
  }
}

async function put(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const value = args.value === '-' ? await io.stdin() : Buffer.from(args.value!, 'utf8');
  await withClient(args, io, (kv) => kv.put(key, value));
  if (args.json) io.stdout(JSON.stringify({ key, stored: true, bytes: value.length }) + '\n');
}

async function del(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const deleted = await withClient(args, io, (kv) => kv.delete(key));
  if (!deleted) throw new NotFound(`not found: ${key}`);
  if (args.json) io.stdout(JSON.stringify({ key, deleted: true }) + '\n');
}

const I64_MIN = -(1n << 63n);
const U64_MAX = (1n << 64n) - 1n;

/** A delta the counter can take: any signed or unsigned 64-bit integer (counters count modulo 2^63). */
function parseDelta(text: string | undefined): bigint {
  if (text === undefined) return 1n;
  if (!/^[+-]?\d+$/.test(text)) throw new CtlUsageError(`incr: DELTA '${text}' is not an integer`);
  const delta = BigInt(text);
  if (delta < I64_MIN || delta > U64_MAX) throw new CtlUsageError(`incr: DELTA ${text} is out of range (${I64_MIN} to ${U64_MAX})`);
  return delta;
}

async function incr(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const delta = parseDelta(args.delta);
  let value: bigint;
  try {
    value = await withClient(args, io, (kv) => kv.incr(key, delta));
  } catch (error) {
    // The client's wording is about reading a counter as bytes; here it is the other way round.
    if (error instanceof KvTypeMismatchError) throw new KvTypeMismatchError(`incr ${key}: the key holds a value (or a lock), not a counter`);
    throw error;
  }
  io.stdout(args.json ? JSON.stringify({ key, value: value.toString() }) + '\n' : `${value}\n`);
}

/** `a.b 12` lines, sizes in bytes also in human units. */
function statsTable(stats: Record<string, unknown>): string {
  const rows: Array<[string, string]> = [];
  const walk = (prefix: string, value: unknown) => {
    if (value !== null && typeof value === 'object') {
      const entries = Object.entries(value as Record<string, unknown>);
      if (entries.length === 0) rows.push([prefix, '-']);
      for (const [k, v] of entries) walk(prefix ? `${prefix}.${k}` : k, v);
      return;
    }
    const text = String(value);
    rows.push([prefix, typeof value === 'number' && /bytes/i.test(prefix) && value >= 1024 ? `${text} (${formatBytes(value)})` : text]);
  };
  walk('', stats);
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n') + '\n';
}

/**
 * One server (--url): its /stats, as before. A cluster: every member's, each
 * under its name; a member whose stats cannot be read makes the exit code 1.
 */
async function stats(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  if (target.kind === 'url') {
    const parsed = await readStats(args.metrics?.[0] ?? KVCTL_DEFAULTS.metrics, args.timeoutMs);
    io.stdout(args.json ? JSON.stringify(parsed) + '\n' : statsTable(parsed));
    return;
  }
  if (target.kind === 'servers' && args.metrics === undefined) {
    throw new CtlUsageError('stats with --servers needs --metrics URL,URL,... (one per server, in --servers order)');
  }
  let where: Map<string, string | undefined>;
  if (target.kind === 'etcd') {
    const etcd = openEtcd(target.hosts, args.timeoutMs);
    try {
      where = etcdMetrics(await readCluster(etcd, target));
    } finally {
      etcd.close();
    }
  } else {
    where = staticMetrics(args);
  }
  const members = await Promise.all(
    [...where].map(async ([name, metrics]) => {
      if (metrics === undefined) return { name, metrics: null, error: 'no metrics address (not alive, or no --metrics-port)' };
      try {
        return { name, metrics, stats: await readStats(metrics, args.timeoutMs) };
      } catch (error) {
        return { name, metrics, error: (error as Error).message };
      }
    }),
  );
  if (args.json) {
    io.stdout(JSON.stringify({ members }) + '\n');
  } else {
    io.stdout(members.map((m) => `# ${m.name}${m.metrics ? ` (${m.metrics})` : ''}\n${m.stats ? statsTable(m.stats) : `${m.error}\n`}`).join('\n'));
  }
  const failed = members.filter((m) => m.error !== undefined);
  if (failed.length > 0) throw new Error(`no stats from ${failed.map((m) => m.name).join(', ')}`);
}

interface LayoutEntry {
  name: string;
  url?: string;
  state: MemberState;
  slots: number;
  /** Its share of the 16,384 slots, in percent (two decimals). */
  percent: number;
}

function layoutEntries(members: MemberLayout[]): LayoutEntry[] {
  // No URL: etcd has no live registration for it, whatever its last connection is still trying.
  return members.map(({ name, url, status, slots }) => ({ name, ...(url ? { url } : {}), state: url ? memberState(status) : 'down', slots, percent: percent(slots) }));
}

function layoutTable(entries: LayoutEntry[]): string {
  // Static members are named by their URL: one column is enough.
  const named = entries.every((m) => m.url === m.name);
  const rows = entries.map((m) => [m.name, ...(named ? [] : [m.url ?? '-']), m.state, String(m.slots), `${m.percent.toFixed(1)}%`]);
  const header = named ? ['MEMBER', 'STATE', 'SLOTS', 'SHARE'] : ['MEMBER', 'URL', 'STATE', 'SLOTS', 'SHARE'];
  return table([header, ...rows], header.map((h) => h === 'SLOTS' || h === 'SHARE'));
}

async function layout(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key;
  const { members, owner } = await withClient(
    args,
    io,
    async (kv) => ({ members: layoutEntries(kv.layout()), owner: key === undefined ? undefined : kv.memberFor(key) }),
    false, // a cluster that is down still has a map
  );
  const slot = key === undefined ? undefined : keySlot(Buffer.from(key, 'utf8'));
  if (args.json) {
    io.stdout(JSON.stringify({ slots: SLOT_COUNT, members, ...(key === undefined ? {} : { key: { key, slot, member: owner ?? null } }) }) + '\n');
    return;
  }
  if (key === undefined) {
    io.stdout(layoutTable(members) + `${SLOT_COUNT} slots over ${members.length} member${members.length === 1 ? '' : 's'}\n`);
    return;
  }
  const m = members.find((entry) => entry.name === owner);
  const detail = m && (m.url === m.name ? m.state : `${m.url ?? 'no address'}, ${m.state}`);
  io.stdout(m ? `${key}: slot ${slot}, member ${m.name} (${detail})\n` : `${key}: slot ${slot}, no member (the cluster is empty)\n`);
}

/** A member's numbers in one refresh of watch. */
interface MemberStats {
  items: number;
  clients: number;
  loadFactor: number;
  /** PUT and DELETE completions drained per second since the previous refresh; null when there is none to compare with. */
  notificationsPerSecond: number | null;
}

type Sample = { stats: MemberStats; error?: undefined } | { stats?: undefined; error: string };

/** Reads each member's /stats and turns its notification count into a rate since the previous read. */
class StatsSampler {
  private metricsOf: Map<string, string | undefined>;
  private readonly previous = new Map<string, { at: number; notifications: number }>();

  constructor(
    private readonly args: CtlArgs,
    private readonly io: Io,
    private readonly etcd?: { client: Etcd3; target: Extract<Target, { kind: 'etcd' }> },
  ) {
    this.metricsOf = etcd ? new Map() : staticMetrics(args);
  }

  /** The member's metrics address, as of the last sample. */
  metrics(name: string): string | undefined {
    return this.metricsOf.get(name);
  }

  async sample(names: string[]): Promise<Map<string, Sample>> {
    if (this.etcd) {
      // Read again each time: a member that restarts may serve metrics elsewhere.
      try {
        this.metricsOf = etcdMetrics(await readCluster(this.etcd.client, this.etcd.target));
      } catch (error) {
        this.io.stderr(`kvctl: warning: ${oneLine((error as Error).message)} (metrics addresses as last read)\n`);
      }
    }
    const samples = await Promise.all(
      names.map(async (name): Promise<Sample> => {
        const metrics = this.metricsOf.get(name);
        if (metrics === undefined) return { error: 'no stats' };
        try {
          return { stats: await this.read(metrics) };
        } catch (error) {
          return { error: oneLine((error as Error).message) };
        }
      }),
    );
    return new Map(names.map((name, i) => [name, samples[i]!]));
  }

  private async read(metrics: string): Promise<MemberStats> {
    const raw = await readStats(metrics, this.args.timeoutMs);
    const at = performance.now();
    const notifications = Number(raw.notifications);
    const before = this.previous.get(metrics);
    this.previous.set(metrics, { at, notifications });
    // A smaller count means the server restarted: no rate until the next refresh.
    const rate = before && notifications >= before.notifications && at > before.at ? ((notifications - before.notifications) * 1000) / (at - before.at) : null;
    const items = Number(raw.items);
    const slots = Number(raw.slots);
    return { items, clients: Number(raw.clients), loadFactor: slots > 0 ? items / slots : 0, notificationsPerSecond: rate };
  }
}

function watchLine(name: string, state: MemberState, sample: Sample | undefined): string {
  const s = sample?.stats;
  if (!s) return `${name}  ${state.padEnd(12)}  ${sample?.error ?? 'no stats'}`;
  const rate = s.notificationsPerSecond === null ? '-' : s.notificationsPerSecond.toFixed(1);
  return `${name}  ${state.padEnd(12)}  items ${s.items}  clients ${s.clients}  load ${(s.loadFactor * 100).toFixed(2)}%  notifications ${rate}/s`;
}

/**
 * Refreshes every --interval until --count refreshes or Ctrl-C (SIGINT or
 * SIGTERM: exit 0). The client reconnects in the background, so states are
 * live; membership changes are printed as the client reports them.
 */
async function watch(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const etcd = target.kind === 'etcd' ? { client: openEtcd(target.hosts, args.timeoutMs), target } : undefined;
  const emit = (json: Record<string, unknown>, text: string) =>
    io.stdout(args.json ? JSON.stringify({ time: new Date().toISOString(), ...json }) + '\n' : `${clock()}  ${text}\n`);
  let kv: KvClient | undefined;
  try {
    kv = await KvClient.connect(clientOptions(args, { reconnect: true, requireReady: false })); // watch a cluster come up, too
    kv.on('error', (error) => io.stderr(`kvctl: warning: ${oneLine(error.message)}\n`));
    kv.on('member', (name, status) => emit({ type: 'member', name, state: memberState(status) }, `member ${name}: ${memberState(status)}`));
    kv.on('layout', (members) => {
      const entries = layoutEntries(members);
      const text = entries.map((m) => `${m.name} (${m.slots} slots, ${m.percent.toFixed(1)}%)`).join(', ');
      emit({ type: 'layout', members: entries }, `layout: ${entries.length} member${entries.length === 1 ? '' : 's'}: ${text || 'none'}`);
    });

    const sampler = new StatsSampler(args, io, etcd);
    // A first sample gives every printed refresh a rate to show.
    await sampler.sample(kv.layout().map((m) => m.name));
    for (let n = 1; args.count === undefined || n <= args.count; n++) {
      await sleep(args.intervalMs, undefined, { signal: stop.signal }).catch(() => undefined);
      if (stop.signal.aborted) break;
      const entries = layoutEntries(kv.layout());
      const samples = await sampler.sample(entries.map((m) => m.name));
      if (args.json) {
        const members = entries.map((m) => ({ ...m, ...(sampler.metrics(m.name) ? { metrics: sampler.metrics(m.name) } : {}), ...samples.get(m.name) }));
        emit({ type: 'refresh', refresh: n, members }, '');
        continue;
      }
      const width = Math.max(...entries.map((m) => m.name.length));
      for (const m of entries) emit({}, watchLine(m.name.padEnd(width), m.state, samples.get(m.name)));
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    // Closing makes every member 'closed': that is kvctl leaving, not news.
    kv?.removeAllListeners('member').removeAllListeners('layout');
    await kv?.close();
    etcd?.client.close();
  }
}

/**
 * Removes <prefix>/members/<name>: from then on clients map its slots to the
 * other members. Refused while its alive key exists (unless --force); the
 * delete is conditional on that in one transaction, so a member that comes
 * back in between is not forgotten.
 */
async function forget(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  if (target.kind !== 'etcd') throw new CtlUsageError('forget works on an etcd cluster: give --etcd (a --servers cluster is the list you pass)');
  let name: string;
  try {
    name = checkMemberName(args.name!);
  } catch (error) {
    throw new CtlUsageError((error as Error).message);
  }
  const etcd = openEtcd(target.hosts, args.timeoutMs);
  try {
    const keys = etcdKeys(target.prefix);
    const cluster = await readCluster(etcd, target);
    if (!cluster.members.includes(name)) {
      throw new NotFound(`no member '${name}' under etcd prefix ${target.prefix} (members: ${cluster.members.join(', ') || 'none'})`);
    }
    const alive = cluster.alive.get(name);
    const where = alive ? `at ${alive.url ?? 'an unknown address'}${alive.host ? `, host ${alive.host} pid ${alive.pid}` : ''}` : '';
    if (alive && !args.force) {
      throw new Error(`'${name}' is alive (${where}): stop it first, or give --force to forget a running member (its keys become unreachable)`);
    }
    let txn = etcd.if(keys.member(name), 'Create', '>', 0);
    if (!args.force) txn = txn.and(keys.aliveKey(name), 'Create', '==', 0);
    const result = await txn.then(etcd.delete().key(keys.member(name))).commit();
    if (!result.succeeded) throw new Error(`'${name}' changed while being forgotten (it came alive, or someone else forgot it): look again with kvctl layout`);

    // Where its slots go: the map every client computes for the remaining members.
    const before = assignSlots(cluster.members);
    const remaining = cluster.members.filter((m) => m !== name);
    const after = assignSlots(remaining);
    const index = before.members.indexOf(name);
    const movedTo = new Map<string, number>(remaining.map((m) => [m, 0]));
    let slots = 0;
    for (let slot = 0; slot < SLOT_COUNT; slot++) {
      if (before.owner[slot] !== index) continue;
      slots++;
      const heir = after.members[after.owner[slot]!];
      if (heir !== undefined) movedTo.set(heir, movedTo.get(heir)! + 1);
    }
    if (args.json) {
      io.stdout(JSON.stringify({ forgotten: name, slots, movedTo: Object.fromEntries(movedTo), alive: alive !== undefined, members: remaining }) + '\n');
      return;
    }
    const to = remaining.length > 0 ? `now belong to ${[...movedTo].map(([m, n]) => `${m} (${n})`).join(', ')}` : 'belong to nobody: the cluster has no members left';
    io.stdout(
      `forgot member ${name}: its ${slots} slots (${percent(slots).toFixed(1)}%) ${to}.\n` +
        `The keys it held are no longer reachable through the cluster; a server that registers as '${name}' again rejoins with its region file.\n` +
        (alive ? `It is still running (${where}): stop it.\n` : ''),
    );
  } finally {
    etcd.close();
  }
}

const COMMANDS: Record<string, (args: CtlArgs, io: Io) => Promise<void>> = { get, put, del, incr, stats, layout, watch, forget };

function readStdin(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    process.stdin.on('data', (chunk: Buffer) => chunks.push(chunk));
    process.stdin.once('end', () => resolve(Buffer.concat(chunks)));
    process.stdin.once('error', reject);
  });
}

/** Runs kvctl; resolves to the process exit code. */
export async function main(argv: string[], io: Partial<Io> = {}): Promise<number> {
  const out: Io = {
    stdout: io.stdout ?? ((data) => void process.stdout.write(data)),
    stderr: io.stderr ?? ((text) => void process.stderr.write(text)),
    stdin: io.stdin ?? readStdin,
    stdoutIsTTY: io.stdoutIsTTY ?? process.stdout.isTTY === true,
  };
  const args = await parseArgs(argv, out);
  if (typeof args === 'number') return args;
  const command = COMMANDS[args.command];
  if (!command) {
    out.stderr(`kvctl: unknown command '${args.command}' (see kvctl --help)\n`);
    return 2;
  }
  try {
    await command(args, out);
    return 0;
  } catch (error) {
    if (error instanceof CtlUsageError || error instanceof UsageError) {
      out.stderr(`kvctl: ${error.message}\n`);
      return 2;
    }
    if (error instanceof NotFound || error instanceof StartupError) {
      out.stderr(`kvctl: ${error.message}\n`);
      return 1;
    }
    const code = (error as KvError).code;
    const message = oneLine((error as Error).message ?? String(error));
    out.stderr(`kvctl: ${message}${typeof code === 'string' && code.startsWith('KV_') && !message.includes(code) ? ` (${code})` : ''}\n`);
    return 1;
  }
}
