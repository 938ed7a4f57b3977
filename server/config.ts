// kv-server's configuration: the defaults, and the parsers that turn what an
// operator typed (sizes like 1GiB or 64M, durations like 250ms or 2s, listen
// URLs) into numbers KvServer takes. Every failure is one sentence that names
// the option and what it expected; cli.ts prints it as `kv-server: <reason>`.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { basename, isAbsolute } from 'node:path';

import { DEFAULT_ETCD_PREFIX, checkMemberName } from '../client/cluster/membership.js';

import { LayoutError, type RegionLayout, planLayout } from './store/layout.js';

/** This package's version, for --version ('unknown' if package.json cannot be read). */
export function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** The command line cannot work on any machine (exit code 2). */
export class UsageError extends Error {}

/** The command line is fine, but this machine or its files do not allow it (exit code 1). */
export class StartupError extends Error {}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Every default in one place: `--help` and docs/operations.md show these. */
export const DEFAULTS = {
  listen: ['shm:///run/rdma-kv/kv.sock'],
  memory: '1GiB',
  maxValue: '1MiB',
  graceMs: '1000',
  keepaliveMs: '1000',
  maxClients: '256',
  metricsPort: '0',
  metricsHost: '127.0.0.1',
  logLevel: 'info' as LogLevel,
  etcdPrefix: DEFAULT_ETCD_PREFIX,
  etcdTtl: '10s',
} as const;

/** What cli.ts hands to KvServer.start and to the metrics server. */
export interface ServerConfig {
  listen: string[];
  memoryBytes: number;
  token: string | undefined;
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
  /** Cluster membership (--etcd), if any. */
  etcd: EtcdConfig | undefined;
}

export interface EtcdConfig {
  hosts: string[];
  prefix: string;
  /** The member name: stable across restarts, unique in the cluster. */
  name: string;
  /** The URL clients dial; undefined: the first URL the server listens on. */
  advertise: string | undefined;
  ttlSeconds: number;
}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 2 ** 10, kb: 2 ** 10, kib: 2 ** 10,
  m: 2 ** 20, mb: 2 ** 20, mib: 2 ** 20,
  g: 2 ** 30, gb: 2 ** 30, gib: 2 ** 30,
  t: 2 ** 40, tb: 2 ** 40, tib: 2 ** 40,
};

/**
 * A size in bytes. Units are binary and case-insensitive: K, KB and KiB all
 * mean 1024 (memory is sized in powers of two; no unit means bytes).
 * Fractions are allowed when the result is a whole number of bytes (1.5GiB).
 */
export function parseSize(text: string, option: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = match ? SIZE_UNITS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined) {
    throw new UsageError(`${option}: '${text}' is not a size (examples: 1GiB, 512MiB, 64M, 4096)`);
  }
  const bytes = Number(match[1]) * unit;
  if (!Number.isInteger(bytes)) throw new UsageError(`${option}: '${text}' is not a whole number of bytes`);
  if (!Number.isSafeInteger(bytes)) throw new UsageError(`${option}: '${text}' is too large`);
  return bytes;
}

const DURATION_UNITS: Record<string, number> = { '': 1, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A duration in milliseconds: 1000, 250ms, 1.5s, 2m, 1h (no unit: milliseconds). */
export function parseDuration(text: string, option: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = match ? DURATION_UNITS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined) throw new UsageError(`${option}: '${text}' is not a duration (examples: 1000, 250ms, 2s)`);
  const ms = Number(match[1]) * unit;
  if (!Number.isInteger(ms)) throw new UsageError(`${option}: '${text}' is not a whole number of milliseconds`);
  if (!Number.isSafeInteger(ms)) throw new UsageError(`${option}: '${text}' is too long`);
  return ms;
}

/** A whole number within [min, max]. */
export function parseCount(text: string, option: string, min: number, max: number): number {
  if (!/^\s*\d+\s*$/.test(text)) throw new UsageError(`${option}: '${text}' is not a whole number`);
  const n = Number(text);
  if (n < min || n > max) throw new UsageError(`${option}: ${n} is out of range (${min} to ${max})`);
  return n;
}

/** Unix socket paths are limited by sockaddr_un.sun_path (108 bytes with the NUL). */
const MAX_SOCKET_PATH = 107;

/**
 * Checks a listen URL and returns it normalized. Only the syntax is checked
 * here; whether this machine can serve it (an RDMA device, a free socket path)
 * is KvServer.start's business.
 */
export function checkListenUrl(url: string): string {
  const at = url.indexOf('://');
  const scheme = at > 0 ? url.slice(0, at).toLowerCase() : '';
  if (scheme === 'shm') {
    const path = url.slice(at + 3);
    if (!isAbsolute(path)) throw new UsageError(`--listen ${url}: an shm URL names an absolute socket path, e.g. shm:///run/rdma-kv/kv.sock`);
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH) {
      throw new UsageError(`--listen ${url}: the socket path is ${Buffer.byteLength(path)} bytes; Unix sockets allow at most ${MAX_SOCKET_PATH}`);
    }
    if (path.endsWith('/')) throw new UsageError(`--listen ${url}: the socket path names a directory`);
    return `shm://${path}`;
  }
  if (scheme === 'rdma') {
    const match = /^([^/?#@\s]+?)(?::(\d*))?\/?$/.exec(url.slice(at + 3));
    const host = match?.[1];
    if (!match || !host || (!host.startsWith('[') && host.includes(':')) || (host.startsWith('[') && !host.endsWith(']'))) {
      throw new UsageError(`--listen ${url}: expected rdma://host:port, e.g. rdma://0.0.0.0:7471`);
    }
    if (!match[2]) throw new UsageError(`--listen ${url}: name a port, e.g. rdma://${host}:7471`);
    const port = Number(match[2]);
    if (port > 65535) throw new UsageError(`--listen ${url}: port ${port} is out of range (0 to 65535)`);
    return `rdma://${host}:${port}`;
  }
  throw new UsageError(`--listen ${url}: no provider for this URL; use shm:///path/to.sock or rdma://host:port`);
}

/** The token in a file, without surrounding whitespace (a trailing newline is the usual case). */
export function readTokenFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const e = error as NodeJS.ErrnoException;
    const why = e.code === 'ENOENT' ? 'no such file' : e.code === 'EACCES' ? 'permission denied' : e.code === 'EISDIR' ? 'it is a directory' : e.message;
    throw new StartupError(`cannot read --token-file ${path}: ${why}`);
  }
  const token = text.trim();
  if (token === '') throw new StartupError(`--token-file ${path} is empty`);
  return token;
}

/** What yargs hands over (every option as the string the operator wrote). */
export interface RawServerArgs {
  listen: string[];
  memory: string;
  token?: string | undefined;
  tokenFile?: string | undefined;
  buckets?: string | undefined;
  maxValue: string;
  graceMs: string;
  keepaliveMs: string;
  maxClients: string;
  metricsPort: string;
  metricsHost: string;
  logLevel: LogLevel;
  regionFile?: string | undefined;
  etcd?: string[] | undefined;
  etcdPrefix?: string | undefined;
  etcdTtl?: string | undefined;
  name?: string | undefined;
  advertise?: string | undefined;
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
  const config: ServerConfig = {
    listen,
    memoryBytes: parseSize(args.memory, '--memory'),
    token: args.token?.trim(),
    buckets,
    maxValueBytes: parseSize(args.maxValue, '--max-value'),
    graceMs: parseDuration(args.graceMs, '--grace-ms'),
    keepaliveMs: parseDuration(args.keepaliveMs, '--keepalive-ms'),
    maxClients: parseCount(args.maxClients, '--max-clients', 1, 65536),
    metricsPort: parseCount(args.metricsPort, '--metrics-port', 0, 65535),
    metricsHost: args.metricsHost,
    logLevel: args.logLevel,
    regionFile: args.regionFile,
    etcd: resolveEtcd(args, listen),
  };
  if (config.maxValueBytes < 1) throw new UsageError('--max-value must be at least 1 byte');
  if (config.keepaliveMs < 10) throw new UsageError('--keepalive-ms must be at least 10 ms');
  planRegion(config);
  if (args.tokenFile !== undefined) config.token = readTokenFile(args.tokenFile);
  return config;
}

/** --etcd and its companions; they mean nothing without it. */
function resolveEtcd(args: RawServerArgs, listen: string[]): EtcdConfig | undefined {
  if (!args.etcd || args.etcd.length === 0) {
    for (const [value, option] of [[args.name, '--name'], [args.advertise, '--advertise'], [args.etcdPrefix, '--etcd-prefix'], [args.etcdTtl, '--etcd-ttl']] as const) {
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
  if (!prefix.startsWith('/') || prefix.length < 2) throw new UsageError(`--etcd-prefix ${prefix}: expected an absolute key prefix such as /rdma-kv`);
  const ttlMs = parseDuration(args.etcdTtl ?? DEFAULTS.etcdTtl, '--etcd-ttl');
  if (ttlMs < 2000 || ttlMs % 1000 !== 0) throw new UsageError('--etcd-ttl: a whole number of seconds, at least 2s');
  return { hosts, prefix, name, advertise, ttlSeconds: ttlMs / 1000 };
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
export function planRegion(config: Pick<ServerConfig, 'memoryBytes' | 'buckets' | 'maxClients' | 'maxValueBytes'>): RegionLayout {
  try {
    return planLayout({ regionBytes: config.memoryBytes, buckets: config.buckets, maxClients: config.maxClients, maxValueBytes: config.maxValueBytes });
  } catch (error) {
    if (error instanceof LayoutError) throw new UsageError(error.message);
    throw error;
  }
}

/** 1073741824 → "1 GiB", 1572864 → "1.5 MiB", 1000 → "1000 B". */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let i = 0;
  while (value >= 1024 && i < units.length - 1) {
    value /= 1024;
    i++;
  }
  const text = i === 0 || Number.isInteger(value) ? String(value) : value.toFixed(1).replace(/\.0$/, '');
  return `${text} ${units[i]}`;
}
