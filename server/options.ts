// What KvServer.start accepts: the option names, their defaults, and the
// checks that turn a bad value or a misspelled name into a KvConfigError of
// one line for the operator. The CLI (cli.ts, config.ts) checks what people
// type; this checks what programs pass.
import type { Logger } from 'pino';

import { KvLayout } from '../protocol/constants.js';
import { StartupError, UsageError, closestMatch } from '../protocol/operator-input.js';
import { MAX_REPLICAS } from '../protocol/registry.js';
import { DEFAULT_NAMESPACE, ROLES, type TokenEntry, namespaceNameProblem } from '../protocol/tokens.js';

/** A namespace besides the default one: its own region of `memoryBytes` (docs/operations.md, "Namespaces"). */
export interface NamespaceOption {
  name: string;
  memoryBytes: number;
}

/**
 * The grace period's defaults (ms): 1 s without eviction; 100 ms with it, where every miss of a
 * cache frees a block and a grace period of them is heap no item can use (docs/operations.md,
 * `--grace-ms`: why a shorter one is as safe, and what it costs a slow reader).
 */
export const DEFAULT_GRACE_MS = { none: 1000, evicting: 100 } as const;

/** The grace period a server runs with when none is given. */
export function defaultGraceMs(eviction: KvServerOptions['eviction']): number {
  return eviction === undefined || eviction === 'none' ? DEFAULT_GRACE_MS.none : DEFAULT_GRACE_MS.evicting;
}

export interface KvServerOptions {
  /** URLs to listen on: shm:///path/to.sock, rdma://host:port. */
  listen: string[];
  /** The default namespace's region size in bytes (index + heap + rings). */
  memoryBytes: number;
  /**
   * More namespaces, each an isolated store with a region of its own (its own registration,
   * index, heap and clients); a token opens the one its entry names. @default none
   */
  namespaces?: NamespaceOption[];
  /** Clients must present this token (it may write); none: no authentication. */
  token?: string;
  /**
   * Clients must present one of these tokens; each gives its role (read or write). Excludes
   * `token`. Replace them while serving with KvServer.setTokens.
   */
  tokens?: TokenEntry[];
  /** The default namespace's bucket count (a power of two). @default about memoryBytes / 1024 (each namespace's own size, for the others) */
  buckets?: number;
  /** @default 1 MiB */
  maxValueBytes?: number;
  /** How long a freed block stays unused. @default 1000, or 100 with eviction (DEFAULT_GRACE_MS) */
  graceMs?: number;
  /** @default 256 */
  maxClients?: number;
  /** Clients ping this often; one silent for 3 intervals is fenced and its locks released. @default 1000 */
  keepaliveMs?: number;
  /**
   * Keep the region in this file (a shared mapping): a server restarted on it
   * after a crash or SIGKILL releases every lock, rebuilds its heap from
   * the live slots and serves the same data. Namespace NAME's region is kept
   * next to it, in `<regionFile>.NAME` (namespaceRegionFile).
   */
  regionFile?: string;
  /**
   * What to do when the heap is full: 'none' fails a PUT with KV_OUT_OF_MEMORY; 'lru' and 'lfu'
   * evict the least recently or least frequently read items instead. @default 'none'
   */
  eviction?: 'none' | 'lru' | 'lfu';
  /** With eviction: heap use (percent) above which items are evicted. @default 90 */
  evictionHighPercent?: number;
  /** With eviction: heap use (percent) eviction brings it down to. @default 80 */
  evictionLowPercent?: number;
  /** Milliseconds between passes of the expiry sweep (expired items' memory back to the heap). @default 1000 */
  expirySweepMs?: number;
  /**
   * A replica of a cluster with --replicas > 1: a new region starts its session numbers at a random
   * point (sessions/session-numbers.ts), so versions are large (no longer safe JS numbers). @default false
   */
  replica?: boolean;
  logger?: Logger;
  /**
   * Tests only: recovery of a region file first waits for this (a deterministic slow
   * recovery). It gets the URLs the server listens on (a port 0 resolved).
   */
  beforeRecovery?: (urls: readonly string[]) => Promise<void>;
}

/** The environment variable that lets tests start members with --replicas above 1 before replicated writes exist. */
export const EXPERIMENTAL_REPLICAS_ENV = 'RKV_EXPERIMENTAL_REPLICAS';

/**
 * --replicas (already a number, or NaN for text that is none), checked against --etcd and the
 * environment; throws StartupError (exit 1): docs/cluster.md, "Replicas and zones".
 */
export function checkReplicas(replicas: number, withEtcd: boolean, env: NodeJS.ProcessEnv = process.env): number {
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > MAX_REPLICAS) {
    throw new StartupError(`--replicas must be a whole number from 1 to ${MAX_REPLICAS} (got ${Number.isNaN(replicas) ? 'something else' : replicas})`);
  }
  if (replicas > 1 && !withEtcd) throw new StartupError(`--replicas ${replicas} needs --etcd: the replicas of a hash slot are placed by the cluster's controller`);
  if (replicas > 1 && env[EXPERIMENTAL_REPLICAS_ENV] !== '1') {
    throw new StartupError(`--replicas ${replicas} is experimental (issue 17): writes are replicated, a dead member's hash slots fail over to their backups, a member cut off from etcd fences itself, hash slots short of a replica are copied back (repair) and locks are replicated, but placement never changes after a failover (members join only as repair targets) and a returning member is copied every key; RKV_EXPERIMENTAL_REPLICAS=1 runs it anyway`);
  }
  return replicas;
}

/** --zone: a failure domain's name, recorded in etcd. */
export function checkZone(zone: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$/.test(zone)) throw new UsageError(`--zone '${zone}': use 1-64 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit`);
  return zone;
}

/** Bad configuration: one clear line for the operator. */
export class KvConfigError extends Error {
  override name = 'KvConfigError';
}

/** The options with their defaults, checked. */
export type ServerSettings = KvServerOptions &
  Required<Pick<KvServerOptions, 'maxValueBytes' | 'graceMs' | 'maxClients' | 'keepaliveMs' | 'eviction' | 'evictionHighPercent' | 'evictionLowPercent' | 'expirySweepMs'>>;

/** --eviction's values. */
export const EVICTION_POLICIES = ['none', 'lru', 'lfu'] as const;

/** Every option name (a Record, so the compiler keeps it complete). */
const OPTION_NAMES: Record<keyof KvServerOptions, true> = {
  listen: true, memoryBytes: true, namespaces: true, token: true, tokens: true, buckets: true, maxValueBytes: true, graceMs: true,
  maxClients: true, keepaliveMs: true, regionFile: true, logger: true, beforeRecovery: true,
  eviction: true, evictionHighPercent: true, evictionLowPercent: true, expirySweepMs: true, replica: true,
};

/** A name no option has: the one probably meant, or the list of them. */
function unknownOption(name: string): KvConfigError {
  const names = Object.keys(OPTION_NAMES);
  const meant = closestMatch(name, names);
  return new KvConfigError(`unknown option '${name}': ${meant !== undefined ? `did you mean '${meant}'?` : `the options are ${names.join(', ')}`}`);
}

/** The options checked, defaults applied; throws KvConfigError. (The layout's own checks come with planLayout.) */
export function checkOptions(options: KvServerOptions): ServerSettings {
  for (const name of Object.keys(options)) {
    if (!Object.hasOwn(OPTION_NAMES, name)) throw unknownOption(name);
  }
  const settings: ServerSettings = {
    ...options,
    graceMs: options.graceMs ?? defaultGraceMs(options.eviction),
    keepaliveMs: options.keepaliveMs ?? 1000,
    maxClients: options.maxClients ?? 256,
    maxValueBytes: options.maxValueBytes ?? KvLayout.DEFAULT_MAX_VALUE_BYTES,
    eviction: options.eviction ?? 'none',
    evictionHighPercent: options.evictionHighPercent ?? 90,
    evictionLowPercent: options.evictionLowPercent ?? 80,
    expirySweepMs: options.expirySweepMs ?? 1000,
  };
  checkEviction(settings);
  const { graceMs, keepaliveMs, maxClients } = settings;
  if (options.listen.length === 0) throw new KvConfigError('nothing to listen on: give at least one --listen URL');
  // Readers start over after any READ slower than half of it (docs/protocol.md): below 2 ms that is every READ.
  if (!(graceMs >= 2)) throw new KvConfigError(`--grace-ms must be at least 2 ms (got ${graceMs}): readers retry every READ slower than half of it`);
  if (!(keepaliveMs >= 10)) throw new KvConfigError('--keepalive-ms must be >= 10');
  if (!Number.isInteger(maxClients) || maxClients < 1 || maxClients > 65536) throw new KvConfigError('--max-clients must be between 1 and 65536');
  if (options.token !== undefined && options.tokens !== undefined) throw new KvConfigError('token and tokens exclude each other');
  const hosted = namespaceNames(checkNamespaces(options.namespaces));
  if (options.tokens !== undefined) checkTokens(options.tokens, hosted);
  return settings;
}

/** The namespaces besides the default one, checked: valid names, each once, a size each; throws KvConfigError. */
function checkNamespaces(namespaces: unknown): NamespaceOption[] {
  if (namespaces === undefined) return [];
  if (!Array.isArray(namespaces)) throw new KvConfigError('namespaces: give an array of { name, memoryBytes }');
  const seen = new Set<string>([DEFAULT_NAMESPACE]);
  for (const entry of namespaces as NamespaceOption[]) {
    const { name, memoryBytes } = entry ?? {};
    const bad = namespaceNameProblem(name);
    if (bad !== undefined) throw new KvConfigError(`namespaces: ${bad}`);
    if (name === DEFAULT_NAMESPACE) throw new KvConfigError(`namespaces: '${DEFAULT_NAMESPACE}' is always hosted, sized by --memory`);
    if (seen.has(name)) throw new KvConfigError(`namespaces: '${name}' is given twice`);
    if (typeof memoryBytes !== 'number' || !Number.isSafeInteger(memoryBytes) || memoryBytes <= 0) throw new KvConfigError(`namespaces: '${name}' needs a size in bytes (got ${String(memoryBytes)})`);
    seen.add(name);
  }
  return namespaces as NamespaceOption[];
}

/** The names of the namespaces a server with these hosts: the default one first. */
export function namespaceNames(namespaces: readonly NamespaceOption[] | undefined): string[] {
  return [DEFAULT_NAMESPACE, ...(namespaces ?? []).map((n) => n.name)];
}

/** Where namespace `name` keeps its region: the default one in `regionFile`, the others next to it. */
export function namespaceRegionFile(regionFile: string | undefined, name: string): string | undefined {
  return regionFile === undefined || name === DEFAULT_NAMESPACE ? regionFile : `${regionFile}.${name}`;
}

/** --eviction and its watermarks: a known policy, 1 <= low < high <= 99 percent; the sweep's interval. */
function checkEviction({ eviction, evictionHighPercent: high, evictionLowPercent: low, expirySweepMs }: ServerSettings): void {
  if (!(EVICTION_POLICIES as readonly unknown[]).includes(eviction)) {
    throw new KvConfigError(`--eviction must be one of ${EVICTION_POLICIES.join(', ')} (got '${String(eviction)}')`);
  }
  for (const [flag, value] of [['--eviction-high', high], ['--eviction-low', low]] as const) {
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 1 || value > 99) throw new KvConfigError(`${flag} must be a percentage of the heap from 1 to 99 (got ${String(value)})`);
  }
  if (!(low < high)) throw new KvConfigError(`--eviction-low (${low}) must be below --eviction-high (${high}): eviction frees from the high watermark down to the low one`);
  if (typeof expirySweepMs !== 'number' || !(expirySweepMs >= 10)) throw new KvConfigError(`--expiry-sweep-ms must be at least 10 ms (got ${String(expirySweepMs)})`);
}

/**
 * Tokens as programs pass them (the CLI's come checked from protocol/tokens.ts), each for one of
 * the `hosted` namespaces; throws KvConfigError.
 */
export function checkTokens(tokens: readonly TokenEntry[], hosted: readonly string[]): void {
  if (!Array.isArray(tokens) || tokens.length === 0) throw new KvConfigError('tokens: give at least one { token, role }');
  const seen = new Set<string>();
  for (const entry of tokens) {
    const { token, role, namespace } = entry ?? {};
    if (typeof token !== 'string' || token === '') throw new KvConfigError('tokens: every token is a non-empty string');
    if (!ROLES.includes(role)) throw new KvConfigError(`tokens: unknown role '${String(role)}': expected read or write`);
    if (namespace !== undefined && !hosted.includes(namespace)) {
      throw new KvConfigError(`tokens: namespace '${String(namespace)}' is not hosted by this server (it hosts ${hosted.join(', ')}): add --namespace ${String(namespace)}:SIZE, or fix the token's line`);
    }
    if (seen.has(token)) throw new KvConfigError('tokens: a token is given twice');
    seen.add(token);
  }
}
