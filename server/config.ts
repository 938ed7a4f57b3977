// kv-server's configuration: the defaults, and the parsers that turn what an
// operator typed (sizes like 1GiB or 64M, durations like 250ms or 2s, listen
// URLs) into numbers KvServer takes. Every failure is one sentence that names
// the option and what it expected; cli.ts prints it as `kv-server: <reason>`.
import { hostname } from 'node:os';
import { basename } from 'node:path';

import { StartupError, UsageError, parseCount, parseDuration, parseSize } from '../protocol/operator-input.js';
import { DEFAULT_NAMESPACE, type TokenEntry, loadTokenFile, namespaceNameProblem } from '../protocol/tokens.js';
import { checkListenUrl } from '../protocol/providers.js';
import { DEFAULT_ETCD_PREFIX, checkMemberName, etcdPrefixProblem } from '../protocol/registry.js';

import { type NamespaceOption, checkReplicas, checkZone, defaultGraceMs } from './options.js';
import { LayoutError, type RegionLayout, planLayout } from './store/layout.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Every default in one place: `--help` and docs/operations.md show these (--grace-ms's depends on --eviction: options.ts, DEFAULT_GRACE_MS). */
export const DEFAULTS = {
  listen: ['shm:///run/rdma-kv/kv.sock'],
  memory: '1GiB',
  maxValue: '1MiB',
  keepaliveMs: '1000',
  maxClients: '256',
  metricsPort: '0',
  metricsHost: '127.0.0.1',
  logLevel: 'info' as LogLevel,
  etcdPrefix: DEFAULT_ETCD_PREFIX,
  etcdTtl: '10s',
  replaceAfter: '60s',
  repairRate: '200',
  eviction: 'none',
  evictionHigh: '90',
  evictionLow: '80',
  expirySweepMs: '1000',
} as const;

/** --eviction's values (server/options.ts checks what programs pass). */
const EVICTIONS = ['none', 'lru', 'lfu'] as const;

/** What cli.ts hands to KvServer.start and to the metrics server. */
export interface ServerConfig {
  listen: string[];
  /** the default namespace's region */
  memoryBytes: number;
  /** --namespace: the other namespaces, each with a region of its own */
  namespaces: NamespaceOption[];
  /** --token: one token that may write. */
  token: string | undefined;
  /** --token-file: its path (reread on SIGHUP), its tokens and roles, and what its permissions deserve. */
  tokenFile: { path: string; entries: TokenEntry[]; warning: string | undefined } | undefined;
  buckets: number | undefined;
  maxValueBytes: number;
  graceMs: number;
  keepaliveMs: number;
  maxClients: number;
  /** 0: no metrics HTTP server. */
  metricsPort: number;
  metricsHost: string;
  logLevel: LogLevel;
  regionFile: string | undefined;
  eviction: (typeof EVICTIONS)[number];
  /** percent of the heap */
  evictionHigh: number;
  evictionLow: number;
  expirySweepMs: number;
  /** Cluster membership (--etcd), if any. */
  etcd: EtcdConfig | undefined;
  /** --replicas: copies of each hash slot (1 without --etcd). */
  replicas: number;
}

export interface EtcdConfig {
  hosts: string[];
  prefix: string;
  /** The member name: stable across restarts, unique in the cluster. */
  name: string;
  /** The URL clients dial; undefined: the first URL the server listens on. */
  advertise: string | undefined;
  ttlSeconds: number;
  /** --replace-after: a hash slot short of a replica this long is repaired onto members that hold others (at once onto one that holds none). */
  replaceAfterMs: number;
  /** --repair-rate: bytes a second this member copies to members syncing into its hash slots (0: no limit). */
  repairRateBytes: number;
  /** --zone: this member's failure domain; undefined: its own. */
  zone: string | undefined;
}

/** What yargs hands over (every option as the string the operator wrote). */
export interface RawServerArgs {
  listen: string[];
  memory: string;
  namespace?: string[] | undefined;
  token?: string | undefined;
  tokenFile?: string | undefined;
  buckets?: string | undefined;
  maxValue: string;
  graceMs?: string | undefined;
  keepaliveMs: string;
  maxClients: string;
  metricsPort: string;
  metricsHost: string;
  logLevel: LogLevel;
  regionFile?: string | undefined;
  etcd?: string[] | undefined;
  etcdPrefix?: string | undefined;
  etcdTtl?: string | undefined;
  replaceAfter?: string | undefined;
  repairRate?: string | undefined;
  name?: string | undefined;
  advertise?: string | undefined;
  eviction?: string | undefined;
  evictionHigh?: string | undefined;
  evictionLow?: string | undefined;
  expirySweepMs?: string | undefined;
  replicas?: string | undefined;
  zone?: string | undefined;
}

/** The whole configuration, or a UsageError / StartupError for the first thing wrong. */
export function resolveConfig(args: RawServerArgs): ServerConfig {
  const listen = args.listen.map(checkListenUrl);
  const seen = new Set<string>();
  for (const url of listen) {
    if (seen.has(url)) throw new UsageError(`--listen ${url} is given twice`);
    seen.add(url);
  }
  if (listen.length === 0) throw new UsageError('--listen: give at least one URL');
  if (args.token !== undefined && args.tokenFile !== undefined) throw new UsageError('--token and --token-file exclude each other');
  if (args.token !== undefined && args.token.trim() === '') throw new UsageError('--token must not be empty');
  const buckets = args.buckets === undefined ? undefined : parseCount(args.buckets, '--buckets', 2, 2 ** 32);
  if (buckets !== undefined && (buckets & (buckets - 1)) !== 0 && buckets !== 2 ** 32) {
    throw new UsageError(`--buckets: ${buckets} is not a power of two`);
  }
  const eviction = resolveEviction(args);
  const etcd = resolveEtcd(args, listen);
  const config: ServerConfig = {
    listen,
    memoryBytes: parseSize(args.memory, '--memory'),
    namespaces: resolveNamespaces(args.namespace),
    token: args.token?.trim(),
    tokenFile: undefined,
    buckets,
    maxValueBytes: parseSize(args.maxValue, '--max-value'),
    graceMs: args.graceMs === undefined ? defaultGraceMs(eviction.eviction) : parseDuration(args.graceMs, '--grace-ms'),
    keepaliveMs: parseDuration(args.keepaliveMs, '--keepalive-ms'),
    maxClients: parseCount(args.maxClients, '--max-clients', 1, 65536),
    metricsPort: parseCount(args.metricsPort, '--metrics-port', 0, 65535),
    metricsHost: args.metricsHost,
    logLevel: args.logLevel,
    regionFile: args.regionFile,
    etcd,
    replicas: checkReplicas(args.replicas === undefined ? 1 : /^\s*\d+\s*$/.test(args.replicas) ? Number(args.replicas) : NaN, etcd !== undefined),
    ...eviction,
  };
  if (config.maxValueBytes < 1) throw new UsageError('--max-value must be at least 1 byte');
  if (config.keepaliveMs < 10) throw new UsageError('--keepalive-ms must be at least 10 ms');
  planRegion(config);
  for (const { name, memoryBytes } of config.namespaces) planRegion({ ...config, memoryBytes, buckets: undefined }, `--namespace ${name}: `);
  if (args.tokenFile !== undefined) {
    config.tokenFile = { path: args.tokenFile, ...loadTokenFile(args.tokenFile) };
    checkTokenNamespaces(config.tokenFile.path, config.tokenFile.entries, config.namespaces);
  }
  return config;
}

/** --namespace NAME:SIZE, each name once, never the default one (--memory sizes that). */
function resolveNamespaces(given: string[] | undefined): NamespaceOption[] {
  const namespaces: NamespaceOption[] = [];
  for (const spec of given ?? []) {
    const colon = spec.lastIndexOf(':');
    if (colon <= 0) throw new UsageError(`--namespace ${spec}: expected NAME:SIZE, e.g. billing:1GiB`);
    const name = spec.slice(0, colon);
    const bad = namespaceNameProblem(name);
    if (bad !== undefined) throw new UsageError(`--namespace ${spec}: ${bad}`);
    if (name === DEFAULT_NAMESPACE) throw new UsageError(`--namespace ${spec}: the default namespace is always there; --memory sizes it`);
    if (namespaces.some((n) => n.name === name)) throw new UsageError(`--namespace ${name} is given twice`);
    namespaces.push({ name, memoryBytes: parseSize(spec.slice(colon + 1), `--namespace ${name}`) });
  }
  return namespaces;
}

/** Every token of the file opens a namespace this server hosts; a StartupError naming the first that does not. */
export function checkTokenNamespaces(path: string, entries: readonly TokenEntry[], namespaces: readonly NamespaceOption[]): void {
  const hosted = [DEFAULT_NAMESPACE, ...namespaces.map((n) => n.name)];
  const unknown = entries.find((e) => !hosted.includes(e.namespace ?? DEFAULT_NAMESPACE));
  if (unknown) throw new StartupError(`--token-file ${path}: a token for namespace '${unknown.namespace}', which this server does not host (it hosts ${hosted.join(', ')}): add --namespace ${unknown.namespace}:SIZE, or fix the line`);
}

/** --eviction, its watermarks (percent of the heap, low below high) and the expiry sweep's interval. */
function resolveEviction(args: RawServerArgs): Pick<ServerConfig, 'eviction' | 'evictionHigh' | 'evictionLow' | 'expirySweepMs'> {
  const eviction = args.eviction ?? DEFAULTS.eviction;
  if (!(EVICTIONS as readonly string[]).includes(eviction)) throw new UsageError(`--eviction must be none, lru or lfu (got '${eviction}')`);
  const evictionHigh = parseCount(args.evictionHigh ?? DEFAULTS.evictionHigh, '--eviction-high', 2, 99);
  const evictionLow = parseCount(args.evictionLow ?? DEFAULTS.evictionLow, '--eviction-low', 1, 98);
  if (evictionLow >= evictionHigh) throw new UsageError(`--eviction-low (${evictionLow}) must be below --eviction-high (${evictionHigh})`);
  const expirySweepMs = parseDuration(args.expirySweepMs ?? DEFAULTS.expirySweepMs, '--expiry-sweep-ms');
  if (expirySweepMs < 10) throw new UsageError('--expiry-sweep-ms must be at least 10 ms');
  return { eviction: eviction as ServerConfig['eviction'], evictionHigh, evictionLow, expirySweepMs };
}

/** --etcd and its companions; they mean nothing without it. */
function resolveEtcd(args: RawServerArgs, listen: string[]): EtcdConfig | undefined {
  if (!args.etcd || args.etcd.length === 0) {
    for (const [value, option] of [[args.name, '--name'], [args.advertise, '--advertise'], [args.etcdPrefix, '--etcd-prefix'], [args.etcdTtl, '--etcd-ttl'], [args.replaceAfter, '--replace-after'], [args.repairRate, '--repair-rate'], [args.zone, '--zone']] as const) {
      if (value !== undefined) throw new UsageError(`${option} only means something with --etcd`);
    }
    return undefined;
  }
  const hosts = args.etcd.flatMap((h) => h.split(',')).map((h) => h.trim()).filter((h) => h !== '');
  for (const host of hosts) {
    if (!/^https?:\/\/[^/\s]+\/?$/.test(host)) throw new UsageError(`--etcd ${host}: expected http://host:port (or https://)`);
  }
  let advertise: string | undefined;
  if (args.advertise !== undefined) {
    try {
      advertise = checkListenUrl(args.advertise);
    } catch (error) {
      throw new UsageError((error as Error).message.replace(/^--listen/, '--advertise'));
    }
  }
  const dialed = advertise ?? listen[0]!;
  if (unroutable(dialed)) throw new UsageError(`--etcd: clients cannot dial ${dialed}; give --advertise rdma://<this host's address>:<port>`);
  const name = args.name ?? defaultMemberName(dialed);
  try {
    checkMemberName(name);
  } catch (error) {
    throw new UsageError(`--name: ${(error as Error).message}`);
  }
  const prefix = args.etcdPrefix ?? DEFAULTS.etcdPrefix;
  const badPrefix = etcdPrefixProblem(prefix);
  if (badPrefix !== undefined) throw new UsageError(`--etcd-prefix ${prefix}: ${badPrefix}`);
  const ttlMs = parseDuration(args.etcdTtl ?? DEFAULTS.etcdTtl, '--etcd-ttl');
  if (ttlMs < 2000 || ttlMs % 1000 !== 0) throw new UsageError('--etcd-ttl: a whole number of seconds, at least 2s');
  const replaceAfterMs = parseDuration(args.replaceAfter ?? DEFAULTS.replaceAfter, '--replace-after');
  const repairRateBytes = parseCount(args.repairRate ?? DEFAULTS.repairRate, '--repair-rate', 0, 1_000_000) * 1e6;
  return { hosts, prefix, name, advertise, ttlSeconds: ttlMs / 1000, replaceAfterMs, repairRateBytes, zone: args.zone === undefined ? undefined : checkZone(args.zone) };
}

/** A wildcard address: fine to listen on, useless to dial. */
export function unroutable(url: string): boolean {
  return /^rdma:\/\/(0\.0\.0\.0|\[::\])(:|$)/.test(url);
}

/** host-port for rdma://, host-<socket name> for shm://: the same on every restart. */
function defaultMemberName(url: string): string {
  const where = url.startsWith('rdma://') ? url.replace(/^rdma:\/\/.*:(\d+)$/, '$1') : basename(url).replace(/\.sock$/, '');
  return `${hostname()}-${where}`.replace(/[^A-Za-z0-9._:@-]/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 128);
}

/** The region KvServer will lay out for this configuration; a UsageError when it cannot (memory too small, ...). */
export function planRegion(config: Pick<ServerConfig, 'memoryBytes' | 'buckets' | 'maxClients' | 'maxValueBytes'> & Partial<Pick<ServerConfig, 'eviction'>>, where = ''): RegionLayout {
  try {
    return planLayout({ regionBytes: config.memoryBytes, buckets: config.buckets, maxClients: config.maxClients, maxValueBytes: config.maxValueBytes, accessTable: (config.eviction ?? 'none') !== 'none' });
  } catch (error) {
    if (error instanceof LayoutError) throw new UsageError(where + error.message);
    throw error;
  }
}
