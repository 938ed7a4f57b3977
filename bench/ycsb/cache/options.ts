/**
 * kv-bench cache mode's settings, from its flags (--db, --eviction, --seed) and properties
 * (YCSB's names where YCSB has one: recordcount, operationcount; cache.* for the rest). Bad
 * input is a UsageError (one line, exit code 2).
 */
import { UsageError, parseCount, parseSize } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { plannedHeapBytes } from './run.js';
import { CACHE_DBS, POLICIES, type CacheDb, type Policy } from './stores.js';

export const CACHE_DEFAULTS = {
  dbs: 'rdma-kv,redis',
  policies: 'lru,lfu',
  memory: '32MiB',
  valueBytes: 1024,
  /** the key space's value bytes over the item memory (recordcount's default) */
  oversize: 5,
  lanes: 16,
  theta: 0.99,
  seed: 1,
} as const;

export const CACHE_PROPERTY_HELP = [
  'kv-bench cache (read-through: a GET miss is followed by a PUT of the value; zipfian keys):',
  `  --db ${CACHE_DEFAULTS.dbs}, --eviction ${CACHE_DEFAULTS.policies} (of ${POLICIES.join(', ')}: kv-server --eviction P,`,
  '  redis allkeys-P, none = noeviction), --seed (1: every row replays the same requests);',
  `  cache.memory (kv-server --memory, ${CACHE_DEFAULTS.memory}; its heap is the item memory both stores get),`,
  `  cache.valuebytes (${CACHE_DEFAULTS.valueBytes}), recordcount (keys: ${CACHE_DEFAULTS.oversize}× the item memory in values),`,
  '  cache.warmupcount (recordcount), operationcount (measured: 4 × recordcount),',
  `  cache.inflight (${CACHE_DEFAULTS.lanes}), cache.theta (${CACHE_DEFAULTS.theta}),`,
  '  cache.kvserverargs (more kv-server flags, e.g. its watermarks).',
];

export interface CacheSettings {
  dbs: CacheDb[];
  policies: Policy[];
  memory: string;
  heapBytes: number;
  keys: number;
  valueBytes: number;
  warmup: number;
  operations: number;
  lanes: number;
  theta: number;
  seed: number;
  kvServerArgs: string[];
}

/** Each item of a comma-separated list, checked against the names allowed; at least one. */
function listOf<T extends string>(text: string, flag: string, allowed: readonly T[]): T[] {
  const items = [...new Set(text.split(',').map((s) => s.trim()).filter((s) => s !== ''))];
  for (const item of items) {
    if (!allowed.includes(item as T)) throw new UsageError(`${flag}: unknown '${item}' (one of ${allowed.join(', ')})`);
  }
  if (items.length === 0) throw new UsageError(`${flag}: name at least one of ${allowed.join(', ')}`);
  return items as T[];
}

function count(props: Properties, name: string, fallback: number, min: number, max: number): number {
  const text = props.get(name);
  return text === undefined ? fallback : parseCount(text, name, min, max);
}

/** Keys beyond which the client's names and request sequence stop being small. */
const MAX_KEYS = 50_000_000;
const MAX_REQUESTS = 500_000_000;

export function cacheSettings(props: Properties, flags: { db?: string; eviction?: string; seed?: number }): CacheSettings {
  const dbs = listOf(flags.db ?? CACHE_DEFAULTS.dbs, '--db', CACHE_DBS);
  const policies = listOf(flags.eviction ?? CACHE_DEFAULTS.policies, '--eviction', POLICIES);
  const memory = props.get('cache.memory', CACHE_DEFAULTS.memory)!;
  parseSize(memory, 'cache.memory');
  let heapBytes: number;
  try {
    heapBytes = plannedHeapBytes(memory);
  } catch (error) {
    throw new UsageError(`cache.memory ${memory}: ${(error as Error).message}`);
  }
  const valueBytes = count(props, 'cache.valuebytes', CACHE_DEFAULTS.valueBytes, 4, 1 << 20);
  const keys = count(props, 'recordcount', Math.ceil((CACHE_DEFAULTS.oversize * heapBytes) / valueBytes), 1, MAX_KEYS);
  const warmup = count(props, 'cache.warmupcount', keys, 0, MAX_REQUESTS);
  const operations = count(props, 'operationcount', 4 * keys, 1, MAX_REQUESTS - warmup);
  const lanes = count(props, 'cache.inflight', CACHE_DEFAULTS.lanes, 1, 4096);
  const theta = props.getDouble('cache.theta', CACHE_DEFAULTS.theta);
  if (!(theta > 0 && theta < 1)) throw new UsageError(`cache.theta: ${theta} is not between 0 and 1 (exclusive)`);
  const kvServerArgs = (props.get('cache.kvserverargs') ?? '').split(/\s+/).filter((a) => a !== '');
  for (const a of kvServerArgs) {
    // (=|$): --eviction-high and --eviction-low are the watermarks, which a run may set.
    if (/^--(memory|eviction|metrics-port|listen|buckets|max-clients|max-value)(=|$)/.test(a)) {
      throw new UsageError(`cache.kvserverargs: ${a} is set by kv-bench cache itself (or changes the heap both stores are sized by)`);
    }
  }
  return { dbs, policies, memory, heapBytes, keys, valueBytes, warmup, operations, lanes, theta, seed: flags.seed ?? CACHE_DEFAULTS.seed, kvServerArgs };
}
