/**
 * The two stores a data-path run measures, behind one interface: rdma-kv (a KvClient, public
 * API only, against the server child) and redis (ioredis, one connection with auto-pipelining,
 * against a redis-server started here on a free loopback port, persistence off). Each knows
 * its server's pid, whose CPU time the phases read.
 */
import { Redis } from 'ioredis';

import { KvClient } from '../../../client/index.js';
import { UsageError } from '../../../protocol/operator-input.js';
import { startRedis, type TcpPeerServer } from '../../ycsb/compare/servers.js';
import { startServerChild, type ServerChild } from './processes.js';
import { roundTripCounters, type RoundTripCounters } from './round-trips.js';
import type { Workload } from './workload.js';

export interface Store {
  /** "rdma-kv" or "ioredis" */
  name: string;
  serverPid: number;
  get(key: string): Promise<Buffer | null | undefined>;
  /** 64 keys in one call: KvClient.getMany, ioredis mgetBuffer */
  getMany(keys: string[]): Promise<Array<Buffer | null | undefined>>;
  put(key: string, value: Buffer): Promise<unknown>;
  /** 64 entries in one call: KvClient.putMany, ioredis mset */
  putMany(entries: Array<[string, Buffer]>): Promise<unknown>;
  /** the client's count of GETs answered in one round trip (round-trips.ts), when it keeps one */
  roundTrips(): RoundTripCounters | undefined;
  /** closes the client and stops the server */
  close(): Promise<void>;
}

/** The rdma-kv server child's region for the workload, MiB (the cold floor READs across as much). */
export function serverMemoryMiB(workload: { keys: number; valueBytes: number }): number {
  return Math.max(256, Math.ceil((4 * workload.keys * (workload.valueBytes + 256)) / 2 ** 20));
}

/** The rdma-kv server child, sized for the workload, and a KvClient on it. */
export async function openRdmaKv(workload: Workload, pollMode: 'busy' | 'event', listen: string | undefined): Promise<Store & { url: string }> {
  // Room for 4 copies of the items (value, key, header), 256 MiB at least: a PUT takes a new
  // block, and the one it replaced is free only a grace period (1 s) after the server has read
  // the PUT's notice, so the PUT phases hold seconds of writes' old blocks (with 2 copies, 64
  // PUTs in flight ran the heap out of blocks).
  const server: ServerChild = await startServerChild(serverMemoryMiB(workload), listen);
  let client: KvClient;
  try {
    client = await KvClient.connect({ url: server.url, pollMode });
  } catch (error) {
    await server.stop();
    throw error;
  }
  return {
    name: 'rdma-kv',
    url: server.url,
    serverPid: server.pid,
    get: (k) => client.get(k),
    getMany: (keys) => client.getMany(keys),
    put: (k, v) => client.put(k, v),
    putMany: (entries) => client.putMany(entries),
    roundTrips: () => roundTripCounters(client),
    close: async () => {
      await client.close();
      await server.stop();
    },
  };
}

/** Why there is no redis to measure: its column's word ("missing": not installed; "failed") and the sentence. */
export interface RedisUnavailable {
  unavailable: 'missing' | 'failed';
  why: string;
}

/** redis-server and an ioredis client, or why not (redis-server missing, or it did not start). */
export async function openRedis(): Promise<(Store & { version: string }) | RedisUnavailable> {
  let server: TcpPeerServer;
  try {
    server = await startRedis();
  } catch (error) {
    // startRedis throws a UsageError when the binary is not installed, an Error when it did not start
    return { unavailable: error instanceof UsageError ? 'missing' : 'failed', why: (error as Error).message };
  }
  const redis = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, enableAutoPipelining: true });
  let version: string;
  try {
    await redis.connect();
    version = /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? 'unknown';
  } catch (error) {
    redis.disconnect();
    await server.stop();
    return { unavailable: 'failed', why: `ioredis could not talk to redis-server on ${server.address}: ${(error as Error).message}` };
  }
  return {
    name: 'ioredis',
    version,
    serverPid: server.pid!,
    get: (k) => redis.getBuffer(k),
    getMany: (keys) => redis.mgetBuffer(...keys),
    put: (k, v) => redis.set(k, v),
    putMany: (entries) => redis.mset(new Map(entries)),
    roundTrips: () => undefined,
    close: async () => {
      await redis.quit();
      await server.stop();
    },
  };
}

/** Writes every key's value, 64 at a time in flight. */
export async function load(store: Store, workload: Workload): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < workload.keys) {
        const i = next++;
        await store.put(workload.names[i]!, workload.values[i]!);
      }
    }),
  );
}
