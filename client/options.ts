// The checks KvClient's arguments pass before anything is sent: connect
// options (names included: a misspelled option is an error, not a default),
// CAS versions and INCR deltas. Every failure is a KV_INVALID_ARGUMENT that
// says what was expected.
import { KvInvalidArgumentError } from '../protocol/errors.js';
import { isServerUrl, urlExamples } from '../protocol/providers.js';
import { closestMatch } from '../protocol/operator-input.js';
import { namespaceNameProblem } from '../protocol/tokens.js';
import { show } from './keys.js';
import type { EtcdOptions, KvClientOptions } from './types.js';

/** The longest timeout (setTimeout's limit); a lock() timeout above it, Infinity included, means this. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;
const U64_LIMIT = 2n ** 64n;

// Every option by name (the compiler holds these lists to the interfaces).
const OPTIONS = Object.keys({
  url: 0, servers: 0, etcd: 0, token: 0, namespace: 0, pollMode: 0, timeoutMs: 0, reconnect: 0, requireReady: 0, scratchBytes: 0, locationCacheEntries: 0, history: 0, metrics: 0,
} satisfies Record<keyof KvClientOptions, 0>);
const ETCD_OPTIONS = Object.keys({ hosts: 0, prefix: 0 } satisfies Record<keyof EtcdOptions, 0>);

/** A CAS token: an unsigned 64-bit bigint, or a safe non-negative integer number. */
export function casVersion(version: unknown): bigint {
  if (typeof version === 'bigint' && version >= 0n && version < U64_LIMIT) return version;
  if (typeof version === 'number' && Number.isSafeInteger(version) && version >= 0) return BigInt(version);
  throw new KvInvalidArgumentError(`cas expectedVersion must be an unsigned 64-bit bigint (0n: only if absent), or a safe non-negative integer (got ${show(version)})`);
}

/** An incr delta: a bigint of magnitude below 2^64, or a safe integer number. */
export function incrDelta(delta: unknown): bigint {
  if (typeof delta === 'bigint' && delta > -U64_LIMIT && delta < U64_LIMIT) return delta;
  if (typeof delta === 'number' && Number.isSafeInteger(delta)) return BigInt(delta);
  throw new KvInvalidArgumentError(`incr delta must be a bigint of magnitude below 2^64, or a safe integer (got ${show(delta)})`);
}

/** Rejects an option name that is not one of `known`, naming the one it most likely meant. */
function checkNames(options: object, known: readonly string[], prefix = ''): void {
  for (const name of Object.keys(options)) {
    if (known.includes(name)) continue;
    const meant = closestMatch(name, known);
    throw new KvInvalidArgumentError(
      meant !== undefined
        ? `unknown option '${prefix}${show(name)}': did you mean '${prefix}${meant}'?`
        : `unknown option '${prefix}${show(name)}' (the options are ${known.map((k) => prefix + k).join(', ')})`,
    );
  }
}

export function checkOptions(options: KvClientOptions): void {
  if (!options || typeof options !== 'object') throw new KvInvalidArgumentError('KvClient.connect needs options: { url } or { servers } or { etcd }');
  checkNames(options, OPTIONS);
  const given = (['url', 'servers', 'etcd'] as const).filter((k) => options[k] !== undefined);
  if (given.length !== 1) {
    throw new KvInvalidArgumentError(`KvClient.connect needs exactly one of url, servers, etcd (got ${given.length === 0 ? 'none' : given.join(', ')})`);
  }
  const urls = options.url !== undefined ? [options.url] : options.servers;
  if (urls !== undefined) {
    if (!Array.isArray(urls) || urls.length === 0) throw new KvInvalidArgumentError('servers must be a non-empty array of URLs');
    for (const url of urls) {
      if (typeof url !== 'string' || !isServerUrl(url)) throw new KvInvalidArgumentError(`unknown URL '${show(url)}': expected ${urlExamples()}`);
    }
  }
  const { etcd } = options;
  if (etcd !== undefined) {
    if (etcd !== null && typeof etcd === 'object') checkNames(etcd, ETCD_OPTIONS, 'etcd.');
    const hosts = etcd === null || typeof etcd !== 'object' ? undefined : etcd.hosts;
    const hostsOk = typeof hosts === 'string' || (Array.isArray(hosts) && hosts.length > 0 && hosts.every((h) => typeof h === 'string'));
    if (!hostsOk) throw new KvInvalidArgumentError('etcd must be { hosts: string | string[], prefix?: string }');
    if (etcd.prefix !== undefined && typeof etcd.prefix !== 'string') throw new KvInvalidArgumentError('etcd.prefix must be a string');
  }
  if (options.pollMode !== undefined && options.pollMode !== 'busy' && options.pollMode !== 'event') {
    throw new KvInvalidArgumentError(`pollMode must be 'busy' or 'event' (got '${show(options.pollMode)}')`);
  }
  const { timeoutMs, scratchBytes } = options;
  // The transport takes timeouts as unsigned 32-bit ms; setTimeout takes up to 2^31 - 1.
  if (timeoutMs !== undefined && !(typeof timeoutMs === 'number' && timeoutMs > 0 && timeoutMs <= MAX_TIMEOUT_MS)) {
    throw new KvInvalidArgumentError(`timeoutMs must be a positive number of ms, at most ${MAX_TIMEOUT_MS} (got ${show(timeoutMs)})`);
  }
  // A Buffer views the scratch memory: 4 GiB at most.
  if (scratchBytes !== undefined && !(Number.isSafeInteger(scratchBytes) && scratchBytes > 0 && scratchBytes <= 2 ** 32)) {
    throw new KvInvalidArgumentError(`scratchBytes must be a positive integer, at most 2^32 (got ${show(scratchBytes)})`);
  }
  const { locationCacheEntries } = options;
  if (locationCacheEntries !== undefined && !(Number.isSafeInteger(locationCacheEntries) && locationCacheEntries >= 0 && locationCacheEntries <= 2 ** 24)) {
    throw new KvInvalidArgumentError(`locationCacheEntries must be an integer from 0 to 2^24 (got ${show(locationCacheEntries)})`);
  }
  if (options.token !== undefined && typeof options.token !== 'string') throw new KvInvalidArgumentError('token must be a string');
  const badNamespace = options.namespace === undefined ? undefined : namespaceNameProblem(options.namespace);
  if (badNamespace !== undefined) throw new KvInvalidArgumentError(badNamespace);
  for (const flag of ['reconnect', 'requireReady'] as const) {
    if (options[flag] !== undefined && typeof options[flag] !== 'boolean') throw new KvInvalidArgumentError(`${flag} must be a boolean`);
  }
  if (options.history !== undefined && typeof options.history !== 'string' && typeof options.history !== 'function') {
    throw new KvInvalidArgumentError('history must be a file path or a function');
  }
  const metrics = options.metrics as Partial<Record<'getSingleMetric' | 'registerMetric', unknown>> | null | undefined;
  if (metrics !== undefined && (metrics === null || typeof metrics !== 'object' || typeof metrics.getSingleMetric !== 'function' || typeof metrics.registerMetric !== 'function')) {
    throw new KvInvalidArgumentError('metrics must be a prom-client Registry');
  }
}
