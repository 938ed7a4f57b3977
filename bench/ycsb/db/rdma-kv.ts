/**
 * The `rdma-kv` binding: this project's store through KvClient. One YCSB record is one value
 * under the key "<table>-<key>" (as the memcached binding qualifies keys), holding every field
 * in a length-prefixed list (see encodeFields; bench/README.md documents it).
 *
 * Semantics follow YCSB's one-value-per-record binding (RocksDB), not the memcached one (which
 * REPLACEs the whole document with the updated fields and so drops the others):
 *
 * - read: a GET into the lane's own buffer (ReadResult.recordBuffer); NOT_FOUND when the record
 *   is missing; with a field list, only those fields are decoded into the result.
 * - insert: PUT of the encoded record.
 * - update: YCSB's update writes the given fields and keeps the others, so for a one-value
 *   store it is a read-modify-write. It is done atomically: getWithVersion, merge the bytes,
 *   cas with that version, and again if another writer got in between (RocksDB's binding does
 *   a plain get + put and can lose a concurrent update). NOT_FOUND when the record is missing.
 *   An update that writes every field of the workload's schema (writeallfields=true: fieldcount
 *   fields named fieldnameprefix0..N-1) determines the whole record, so it is a plain PUT with
 *   no read.
 * - delete: DELETE; NOT_FOUND when there was nothing to delete.
 * - scan: NOT_IMPLEMENTED (a hash table has no key order).
 *
 * Properties: rdmakv.url (shm:///run/rdma-kv/kv.sock), or a cluster: rdmakv.servers (URLs,
 * comma-separated) or rdmakv.etcd (endpoints, comma-separated) with rdmakv.etcdprefix
 * (/rdma-kv); rdmakv.token, rdmakv.pollmode (busy|event; KvClient's default, busy),
 * rdmakv.timeoutms (KvClient's default, 5000).
 * Each client thread (worker_thread) has its own binding instance and so its own KvClient.
 */
import { KvBufferTooSmallError, KvClient, KvDisconnectedError, type KvClientOptions, type VersionedValue } from '../../../client/index.js';
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { Status, type DB, type FieldValues } from './db.js';
import { ReadResult } from './read-result.js';
import { decodeRecord, encodeInto, encodeRecord, encodedBytes, mergeInto, mergeRecord, mergedBytesBound } from './rdma-kv-record.js';

export { decodeFields, decodeRecord, encodeFields, encodeRecord, mergeRecord } from './rdma-kv-record.js';

export const DEFAULT_URL = 'shm:///run/rdma-kv/kv.sock';
/** cas attempts of one update before it reports ERROR (only reached under extreme contention). */
const MAX_UPDATE_ATTEMPTS = 64;

/**
 * A buffer a record is written into, and the view of it handed to the client (kept while the
 * length repeats, as YCSB's fixed-length records do). The binding's own until the client's
 * answer settles: the client copies the value when it submits the operation.
 */
interface RecordBuffer {
  bytes: Buffer;
  view: Buffer | undefined;
}

/**
 * An update of some of a record's fields, in flight: getWithVersion, merge the bytes, cas with
 * that version, and again while another writer gets in between. A chain of then()s whose
 * callbacks are made once per object, and the object is kept for the next update: as an async
 * function (a suspended frame and two awaits a call) it made ~500 B of garbage per update.
 * The binding's own while idle; the update's from run() to the status it settles with.
 */
class FieldsUpdate {
  private kv: KvClient | undefined;
  private key: string | undefined;
  private values: FieldValues | undefined;
  private attempt = 0;
  /** The merged record's bytes (its own: the client copies them when the cas is submitted). */
  private readonly out: RecordBuffer = { bytes: Buffer.allocUnsafe(0), view: undefined };

  constructor(private readonly idle: FieldsUpdate[]) {}

  run(kv: KvClient, key: string, values: FieldValues): Promise<Status> {
    this.kv = kv;
    this.key = key;
    this.values = values;
    this.attempt = 0;
    return kv.getWithVersion(key).then(this.onCurrent, this.onError);
  }

  private readonly onCurrent = (current: VersionedValue | undefined): Status | Promise<Status> => {
    if (current === undefined) return this.end(Status.NOT_FOUND);
    let merged: Buffer | undefined;
    try {
      const bound = mergedBytesBound(current.value, this.values!);
      if (bound >= 0) {
        const n = mergeInto(current.value, this.values!, capacity(this.out, bound));
        merged = n >= 0 ? viewOf(this.out, n) : undefined;
      } else {
        merged = mergeRecord(current.value, this.values!);
      }
    } catch (error) {
      return this.onError(error);
    }
    if (merged === undefined) return this.end(Status.UNEXPECTED_STATE);
    return this.kv!.cas(this.key!, current.version, merged).then(this.onApplied, this.onError);
  };

  private readonly onApplied = (applied: boolean): Status | Promise<Status> => {
    if (applied) return this.end(Status.OK);
    if (++this.attempt >= MAX_UPDATE_ATTEMPTS) return this.end(Status.ERROR);
    return this.kv!.getWithVersion(this.key!).then(this.onCurrent, this.onError);
  };

  private readonly onError = (error: unknown): Status => this.end(statusOf(error));

  private end(status: Status): Status {
    this.kv = this.key = this.values = undefined;
    this.idle.push(this);
    return status;
  }
}

/**
 * A read in flight: getInto the lane's own buffer (ReadResult.recordBuffer), decode the record's
 * fields as ranges of it, and read again into a longer buffer when the record outgrew it. Its
 * callbacks are made once per object, which is kept for the next read, as FieldsUpdate (two
 * closures per read cost what the value Buffer the buffer saves did). The buffer is the lane's,
 * not this object's: the result's fields stay ranges of it after this object is reused.
 */
class RecordRead {
  private kv: KvClient | undefined;
  private key: string | undefined;
  private wanted: readonly string[] | null = null;
  private result: ReadResult | undefined;

  constructor(private readonly idle: RecordRead[]) {}

  run(kv: KvClient, key: string, wanted: readonly string[] | null, result: ReadResult): Promise<Status> {
    this.kv = kv;
    this.key = key;
    this.wanted = wanted;
    this.result = result;
    return kv.getInto(key, result.recordBuffer(0)).then(this.onLength, this.onError);
  }

  private readonly onLength = (length: number | undefined): Status => {
    const result = this.result!;
    return this.end(length === undefined ? Status.NOT_FOUND : decodeRecord(result.recordBuffer(0), this.wanted, result, length) ? Status.OK : Status.UNEXPECTED_STATE);
  };

  private readonly onError = (error: unknown): Status | Promise<Status> => {
    // Again only into a longer buffer: a length that the buffer would have held (a damaged header) is an error, not a loop.
    const result = this.result!;
    if (error instanceof KvBufferTooSmallError && error.needed > result.recordBuffer(0).length) return this.kv!.getInto(this.key!, result.recordBuffer(error.needed)).then(this.onLength, this.onError);
    return this.end(statusOf(error));
  };

  private end(status: Status): Status {
    this.kv = this.key = this.result = undefined;
    this.wanted = null;
    this.idle.push(this);
    return status;
  }
}

// ---- the binding ------------------------------------------------------------------------------

export default class RdmaKvClient implements DB {
  private client: KvClient | undefined;
  /** The workload's field names, when an update that writes all of them can skip the read. */
  private schema: ReadonlySet<string> | undefined;
  /** Record buffers not in use; one is taken per write in flight (kvbench.inflight of them). */
  private readonly spare: RecordBuffer[] = [];
  /** Partial updates not in use (one per update in flight). */
  private readonly updates: FieldsUpdate[] = [];
  /** Reads not in use (one per read in flight). */
  private readonly reads: RecordRead[] = [];
  /** writesWholeRecord's marks: field name -> the number of the call that saw it last. */
  private readonly seen = new Map<string, number>();
  private seenCall = 0;

  async init(props: Properties): Promise<void> {
    const pollMode = props.get('rdmakv.pollmode', 'busy');
    if (pollMode !== 'busy' && pollMode !== 'event') throw new UsageError(`rdmakv.pollmode must be busy or event (got "${pollMode}")`);
    const servers = props.get('rdmakv.servers');
    const etcd = props.get('rdmakv.etcd');
    if ([props.get('rdmakv.url'), servers, etcd].filter((v) => v !== undefined).length > 1) {
      throw new UsageError('give one of rdmakv.url, rdmakv.servers, rdmakv.etcd');
    }
    const options: KvClientOptions = servers !== undefined
      ? { servers: servers.split(',').map((u) => u.trim()).filter((u) => u !== ''), pollMode }
      : etcd !== undefined
        ? { etcd: { hosts: etcd.split(',').map((h) => h.trim()), prefix: props.get('rdmakv.etcdprefix', '/rdma-kv') }, pollMode }
        : { url: props.get('rdmakv.url', DEFAULT_URL), pollMode };
    const token = props.get('rdmakv.token');
    if (token !== undefined) options.token = token;
    if (props.has('rdmakv.timeoutms')) {
      const timeoutMs = props.getInt('rdmakv.timeoutms', 5000);
      if (timeoutMs < 1) throw new UsageError('rdmakv.timeoutms must be at least 1');
      options.timeoutMs = timeoutMs;
    }
    const fieldCount = props.getLong('fieldcount', 10);
    const prefix = props.get('fieldnameprefix', 'field');
    if (fieldCount > 0 && fieldCount <= 4096) this.schema = new Set(Array.from({ length: fieldCount }, (_, i) => `${prefix}${i}`));
    try {
      this.client = await KvClient.connect(options);
    } catch (error) {
      const target = options.url ?? options.servers?.join(',') ?? `etcd ${etcd}`;
      throw new Error(`rdma-kv: cannot connect to ${target}: ${(error as Error).message}`);
    }
  }

  async cleanup(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    await client?.close();
  }

  private get kv(): KvClient {
    if (!this.client) throw new Error('rdma-kv binding used before init');
    return this.client;
  }

  // A RecordRead, not an async function: a suspended async call costs twice the garbage, on every read.
  read(table: string, key: string, fields: readonly string[] | null, result: ReadResult): Promise<Status> {
    if (!this.client) return Promise.resolve(Status.ERROR); // used before init (what `kv` throws, as a status)
    return (this.reads.pop() ?? new RecordRead(this.reads)).run(this.client, this.keyOf(table, key), fields !== null && fields.length > 0 ? fields : null, result);
  }

  scan(): Status {
    return Status.NOT_IMPLEMENTED;
  }

  update(table: string, key: string, values: FieldValues): Promise<Status> {
    if (!this.client) return Promise.resolve(Status.ERROR); // used before init (what `kv` throws, as a status)
    const k = this.keyOf(table, key);
    if (this.writesWholeRecord(values)) return this.put(k, values);
    return (this.updates.pop() ?? new FieldsUpdate(this.updates)).run(this.client, k, values);
  }

  insert(table: string, key: string, values: FieldValues): Promise<Status> {
    return this.put(this.keyOf(table, key), values);
  }

  /** PUT of the record `values` encode (insert, and an update that writes every field). */
  private async put(k: string, values: FieldValues): Promise<Status> {
    const bytes = encodedBytes(values);
    const out = bytes >= 0 ? (this.spare.pop() ?? { bytes: Buffer.allocUnsafe(0), view: undefined }) : undefined;
    try {
      await this.kv.put(k, out ? viewOf(out, encodeInto(values, capacity(out, bytes))) : encodeRecord(values));
      return Status.OK;
    } catch (error) {
      return statusOf(error);
    } finally {
      if (out) this.spare.push(out);
    }
  }

  async delete(table: string, key: string): Promise<Status> {
    try {
      return (await this.kv.delete(this.keyOf(table, key))) ? Status.OK : Status.NOT_FOUND;
    } catch (error) {
      return statusOf(error);
    }
  }

  /** True when `values` names every field of the schema (and nothing else): no read needed. */
  private writesWholeRecord(values: FieldValues): boolean {
    const schema = this.schema;
    if (schema === undefined || values.size !== schema.size) return false;
    // Marked with this call's number, not cleared: a Set emptied per call keeps its old tables alive
    // through the scavenges (ReadResult's comment); only schema names are ever marked.
    const seen = this.seen;
    const call = ++this.seenCall;
    for (let i = 0; i < values.size; i++) {
      const name = values.fieldName(i);
      if (!schema.has(name) || seen.get(name) === call) return false;
      seen.set(name, call);
    }
    return true;
  }

  /**
   * The store's key, as a string: the client writes a string key straight into its arena, so a
   * Buffer of it (tried: ~100 B a call, and a share of Buffer's pool) is garbage for nothing. Not
   * cached either: a Map of key -> bytes (tried) made a worker's median READ about a microsecond
   * slower in the main job (a run touches most of its 10,000 keys for the first time, and the
   * map's lookups miss the cache).
   */
  private keyOf(table: string, key: string): string {
    return qualifiedKey(table, key);
  }
}

export function qualifiedKey(table: string, key: string): string {
  return `${table}-${key}`;
}

/** out's bytes, grown to at least `bytes` (rarely: records of a run have one length or a few). */
function capacity(out: RecordBuffer, bytes: number): Buffer {
  if (out.bytes.length < bytes) {
    out.bytes = Buffer.allocUnsafeSlow(Math.max(bytes, 2 * out.bytes.length, 4096));
    out.view = undefined;
  }
  return out.bytes;
}

/** The first `length` bytes of out, as one view kept while the length repeats. */
function viewOf(out: RecordBuffer, length: number): Buffer {
  let view = out.view;
  if (view === undefined || view.length !== length) view = out.view = out.bytes.subarray(0, length);
  return view;
}

function statusOf(error: unknown): Status {
  return error instanceof KvDisconnectedError ? Status.SERVICE_UNAVAILABLE : Status.ERROR;
}
