/**
 * The `memcached` binding, as YCSB's MemcachedClient: one JSON document per record under the
 * key "<table>-<key>"; insert = ADD, update = REPLACE of the document with the given fields
 * (YCSB replaces, it does not merge), SCAN is NOT_IMPLEMENTED. Properties: memcached.hosts
 * (host[:port],... default port 11211; required), memcached.objectExpirationTime (s),
 * memcached.checkOperationStatus (default true), memcached.opTimeoutMillis.
 */
import memjs from 'memjs';
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { Status, fieldValuesToObject, type DB, type FieldValues } from './db.js';
import { ReadResult } from './read-result.js';

const DEFAULT_PORT = 11211;
/** memcached treats expirations above 30 days as absolute Unix times; YCSB's Integer.MAX_VALUE means "2038". */
const DEFAULT_EXPIRATION = 2147483647;

export default class MemcachedClient implements DB {
  private client: memjs.Client | undefined;
  private checkOperationStatus = true;
  private expires = DEFAULT_EXPIRATION;

  init(props: Properties): void {
    const hosts = props.get('memcached.hosts');
    if (hosts === undefined) throw new UsageError('the memcached binding needs -p memcached.hosts=host[:port][,host[:port]...]');
    const servers = hosts
      .split(',')
      .map((h) => (h.includes(':') ? h : `${h}:${DEFAULT_PORT}`))
      .join(',');
    this.checkOperationStatus = props.getBoolean('memcached.checkOperationStatus', true);
    this.expires = props.getInt('memcached.objectExpirationTime', DEFAULT_EXPIRATION);
    const timeoutMs = props.getInt('memcached.opTimeoutMillis', 60000);
    this.client = memjs.Client.create(servers, {
      timeout: timeoutMs / 1000,
      conntimeout: timeoutMs / 1000,
      retries: 0,
      logger: { log: () => {} },
    });
  }

  cleanup(): void {
    this.client?.close();
    this.client = undefined;
  }

  private get mc(): memjs.Client {
    if (!this.client) throw new Error('memcached binding used before init');
    return this.client;
  }

  async read(table: string, key: string, fields: readonly string[] | null, result: ReadResult): Promise<Status> {
    try {
      const { value } = await this.mc.get(qualifiedKey(table, key));
      if (value !== null) {
        const doc = JSON.parse(value.toString('utf8')) as { [field: string]: unknown };
        const check = fields !== null && fields.length > 0;
        for (const name of Object.keys(doc)) {
          if (check && !fields.includes(name)) continue;
          const v = doc[name];
          if (v !== null && v !== undefined) result.set(name, String(v));
        }
      }
      return Status.OK; // YCSB answers OK for a miss too
    } catch {
      return Status.ERROR;
    }
  }

  scan(): Status {
    return Status.NOT_IMPLEMENTED;
  }

  async update(table: string, key: string, values: FieldValues): Promise<Status> {
    try {
      const ok = await this.mc.replace(qualifiedKey(table, key), JSON.stringify(fieldValuesToObject(values)), { expires: this.expires });
      return this.returnCode(ok);
    } catch {
      return Status.ERROR;
    }
  }

  async insert(table: string, key: string, values: FieldValues): Promise<Status> {
    try {
      const ok = await this.mc.add(qualifiedKey(table, key), JSON.stringify(fieldValuesToObject(values)), { expires: this.expires });
      return this.returnCode(ok);
    } catch {
      return Status.ERROR;
    }
  }

  async delete(table: string, key: string): Promise<Status> {
    try {
      return this.returnCode(await this.mc.delete(qualifiedKey(table, key)));
    } catch {
      return Status.ERROR;
    }
  }

  private returnCode(ok: boolean): Status {
    if (!this.checkOperationStatus || ok) return Status.OK;
    return Status.ERROR;
  }
}

function qualifiedKey(table: string, key: string): string {
  return `${table}-${key}`;
}
