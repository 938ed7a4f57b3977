/**
 * The `redis` binding, as YCSB's RedisClient: one hash per record (HMSET / HGETALL / HMGET),
 * plus a sorted set "_indices" scored by the key's Java hashCode so that SCAN can walk keys with
 * ZRANGEBYSCORE. Properties: redis.host (default localhost), redis.port (6379),
 * redis.password, redis.timeout (ms). The table name is ignored, as in YCSB.
 */
import { Redis } from 'ioredis';
import { javaStringHashCode } from '../hash.js';
import type { Properties } from '../properties.js';
import { Status, type DB, type FieldValues } from './db.js';
import { ReadResult } from './read-result.js';

export const INDEX_KEY = '_indices';

export default class RedisClient implements DB {
  private client: Redis | undefined;

  async init(props: Properties): Promise<void> {
    const timeout = props.has('redis.timeout') ? props.getInt('redis.timeout', 2000) : undefined;
    const password = props.get('redis.password');
    this.client = new Redis({
      host: props.get('redis.host', 'localhost'),
      port: props.getInt('redis.port', 6379),
      ...(password !== undefined ? { password } : {}),
      ...(timeout !== undefined ? { connectTimeout: timeout, commandTimeout: timeout } : {}),
      lazyConnect: true,
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
    });
    await this.client.connect();
  }

  async cleanup(): Promise<void> {
    await this.client?.quit();
    this.client = undefined;
  }

  private get redis(): Redis {
    if (!this.client) throw new Error('redis binding used before init');
    return this.client;
  }

  async read(_table: string, key: string, fields: readonly string[] | null, result: ReadResult): Promise<Status> {
    try {
      if (fields === null) {
        const all = await this.redis.hgetall(key);
        for (const name of Object.keys(all)) result.set(name, all[name]!);
      } else {
        const values = await this.redis.hmget(key, ...fields);
        fields.forEach((f, i) => {
          const v = values[i];
          if (v !== null && v !== undefined) result.set(f, v);
        });
      }
      return result.size === 0 ? Status.ERROR : Status.OK;
    } catch {
      return Status.ERROR;
    }
  }

  async insert(_table: string, key: string, values: FieldValues): Promise<Status> {
    try {
      const reply = await this.redis.hmset(key, flatten(values));
      if (reply !== 'OK') return Status.ERROR;
      await this.redis.zadd(INDEX_KEY, javaStringHashCode(key), key);
      return Status.OK;
    } catch {
      return Status.ERROR;
    }
  }

  async delete(_table: string, key: string): Promise<Status> {
    try {
      const deleted = await this.redis.del(key);
      // as in YCSB: an error only if neither the hash nor the index entry existed
      if (deleted !== 0) return Status.OK;
      return (await this.redis.zrem(INDEX_KEY, key)) === 0 ? Status.ERROR : Status.OK;
    } catch {
      return Status.ERROR;
    }
  }

  async update(_table: string, key: string, values: FieldValues): Promise<Status> {
    try {
      return (await this.redis.hmset(key, flatten(values))) === 'OK' ? Status.OK : Status.ERROR;
    } catch {
      return Status.ERROR;
    }
  }

  async scan(table: string, startKey: string, recordCount: number, fields: readonly string[] | null, result: ReadResult[]): Promise<Status> {
    try {
      const keys = await this.redis.zrangebyscore(INDEX_KEY, javaStringHashCode(startKey), '+inf', 'LIMIT', 0, recordCount);
      for (const key of keys) {
        const record = new ReadResult();
        await this.read(table, key, fields, record);
        result.push(record);
      }
      return Status.OK;
    } catch {
      return Status.ERROR;
    }
  }
}

function flatten(values: FieldValues): string[] {
  const args: string[] = [];
  for (let i = 0; i < values.size; i++) args.push(values.fieldName(i), values.fieldValue(i));
  return args;
}
