/**
 * The stores kv-bench's cache mode measures, each a server started for one row and a client on
 * it: rdma-kv (kv-server on a private shm socket with `--eviction <policy>`, one KvClient) and
 * Redis (redis-server on loopback, `maxmemory` and `allkeys-<policy>` set by CONFIG SET, one
 * ioredis connection with auto-pipelining). Each knows its server's pid, whose CPU time the run
 * reads from /proc, and what the server holds at the end.
 *
 * A kv-server that does not know --eviction (before issue 16's eviction is built) exits at
 * once naming the flag: that row is "not built", not a failure. With policy none such a server
 * is today's server, so it runs without the flag.
 */
import { Redis } from 'ioredis';

import { KvClient } from '../../../client/index.js';
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { freePort, startKvServer, startRedis, type PeerServer } from '../compare/servers.js';
import type { CacheStore } from './read-through.js';

export const POLICIES = ['none', 'lru', 'lfu'] as const;
export type Policy = (typeof POLICIES)[number];
export const CACHE_DBS = ['rdma-kv', 'redis'] as const;
export type CacheDb = (typeof CACHE_DBS)[number];

export interface Resident {
  /** keys the store holds at the end */
  keys: number;
  /** the store's own count of memory in use for them (rdma-kv: heap blocks; Redis: used_memory) */
  usedBytes: number;
  /** rdma-kv: its heap's size, as the server laid it out */
  capacityBytes?: number;
}

export interface OpenStore extends CacheStore {
  db: CacheDb;
  policy: Policy;
  serverPid: number;
  /** how the server was configured, for the table's notes and the JSON */
  config: string;
  /** server version, where it says */
  version: string | undefined;
  resident(): Promise<Resident | undefined>;
  /** closes the client and stops the server */
  close(): Promise<void>;
}

/** A row that cannot run on this machine or build, and why (the table says so). */
export interface Unavailable {
  unavailable: string;
}

/** The first lines kv-server writes when yargs refuses an option it does not know. */
const UNKNOWN_EVICTION = /unknown (argument|option)[^\n]*eviction/i;

/** Whether a kv-server start failure is its refusal of --eviction (it has no such flag). */
export function refusedEviction(message: string): boolean {
  return UNKNOWN_EVICTION.test(message);
}

/** kv-server with `--eviction policy` (region `memory`, `extraArgs` after it) and a KvClient. */
export async function openRdmaKv(props: Properties, memory: string, policy: Policy, extraArgs: readonly string[]): Promise<OpenStore | Unavailable> {
  const metricsPort = await freePort();
  const common = ['--metrics-port', String(metricsPort), ...extraArgs];
  const sized = props.with([['rdmakv.memory', memory]]);
  let server: PeerServer;
  let config = `--memory ${memory} --eviction ${policy}${extraArgs.length ? ` ${extraArgs.join(' ')}` : ''}`;
  try {
    server = await startKvServer(sized, ['--eviction', policy, ...common]);
  } catch (error) {
    if (!refusedEviction((error as Error).message)) throw error;
    if (policy !== 'none') return { unavailable: 'not built (server has no --eviction)' };
    server = await startKvServer(sized, common); // today's server: never evicts, as --eviction none
    config = `--memory ${memory} (no --eviction: today's server)`;
  }
  let client: KvClient;
  try {
    client = await KvClient.connect({ url: server.address, pollMode: 'busy' });
  } catch (error) {
    await server.stop();
    throw error;
  }
  const stats = async (): Promise<{ items: number; heapUsedBytes: number; heapBytes: number } | undefined> => {
    try {
      const response = await fetch(`http://127.0.0.1:${metricsPort}/stats`);
      return response.ok ? ((await response.json()) as { items: number; heapUsedBytes: number; heapBytes: number }) : undefined;
    } catch {
      return undefined; // the row loses its resident column, nothing else
    }
  };
  return {
    db: 'rdma-kv',
    policy,
    serverPid: server.pid!,
    config,
    version: undefined,
    get: (key) => client.get(key),
    put: async (key, value) => {
      try {
        await client.put(key, value);
        return true;
      } catch (error) {
        if ((error as { code?: unknown }).code === 'KV_OUT_OF_MEMORY') return false;
        throw error;
      }
    },
    resident: async () => {
      const s = await stats();
      return s && { keys: s.items, usedBytes: s.heapUsedBytes, capacityBytes: s.heapBytes };
    },
    close: async () => {
      await client.close();
      await server.stop();
    },
  };
}

/**
 * redis-server with `maxmemory` = `itemBytes` + its own used_memory when empty (read at start:
 * its fixed overhead is not charged to the items, its per-item overhead is) and
 * `maxmemory-policy` allkeys-<policy> (noeviction for none).
 */
export async function openRedis(itemBytes: number, policy: Policy): Promise<OpenStore | Unavailable> {
  let server;
  try {
    server = await startRedis();
  } catch (error) {
    if (error instanceof UsageError) return { unavailable: `missing: ${error.message}` }; // not installed
    throw error;
  }
  const redis = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, enableAutoPipelining: true });
  let version: string;
  let maxmemory: number;
  const maxmemoryPolicy = policy === 'none' ? 'noeviction' : `allkeys-${policy}`;
  try {
    await redis.connect();
    version = /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? 'unknown';
    const baseline = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1]);
    if (!Number.isFinite(baseline)) throw new Error('INFO memory has no used_memory');
    maxmemory = itemBytes + baseline;
    await redis.config('SET', 'maxmemory', String(maxmemory));
    await redis.config('SET', 'maxmemory-policy', maxmemoryPolicy);
  } catch (error) {
    redis.disconnect();
    await server.stop();
    throw error;
  }
  return {
    db: 'redis',
    policy,
    serverPid: server.pid!,
    config: `maxmemory ${maxmemory} (${itemBytes} + ${maxmemory - itemBytes} used when empty), ${maxmemoryPolicy}`,
    version,
    get: (key) => redis.getBuffer(key),
    put: async (key, value) => {
      try {
        await redis.set(key, value);
        return true;
      } catch (error) {
        // noeviction past maxmemory: "OOM command not allowed when used memory > 'maxmemory'."
        if (/^OOM\b/.test((error as Error).message)) return false;
        throw error;
      }
    },
    resident: async () => {
      const memory = await redis.info('memory');
      return { keys: await redis.dbsize(), usedBytes: Number(/used_memory:(\d+)/.exec(memory)?.[1]) };
    },
    close: async () => {
      await redis.quit();
      await server.stop();
    },
  };
}
