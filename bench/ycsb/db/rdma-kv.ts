/**
 * The `rdma-kv` binding: this project's store through KvClient. One YCSB record is one value
 * under the key "<table>-<key>" (as the memcached binding qualifies keys), holding every field
 * in a length-prefixed list (see encodeFields; bench/README.md documents it).
 *
 * Semantics follow YCSB's one-value-per-record binding (RocksDB), not the memcached one (which
 * REPLACEs the whole document with the updated fields and so drops the others):
 *
 * - read: NOT_FOUND when the record is missing; with a field list, only those fields are
 *   decoded into the result.
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
import { KvClient, KvDisconnectedError, type KvClientOptions } from '../../../client/index.js';
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { Status, type DB, type FieldValues, type Record } from './db.js';

export const DEFAULT_URL = 'shm:///run/rdma-kv/kv.sock';
/** cas attempts of one update before it reports ERROR (only reached under extreme contention). */
const MAX_UPDATE_ATTEMPTS = 64;

// ---- record encoding ------------------------------------------------------------------------

const HEADER_BYTES = 3; // u16le field count, u8 flags
const ENTRY_BYTES = 6; // per field: u16le name bytes, u32le value bytes
const FLAG_ASCII = 1; // every name and value is ASCII: byte lengths are also string lengths
const MAX_FIELDS = 0xffff;
const MAX_NAME_BYTES = 0xffff;

/** Reused for encoding; records are copied out of it (a binding call may still hold the last one). */
let scratch = Buffer.allocUnsafe(16 << 10);

/**
 * Encodes fields as one record value:
 *
 *   u16le count | u8 flags | count x (u16le name bytes, u32le value bytes) | name0 value0 name1 ...
 *
 * Names and values are UTF-8. Flag bit 0 says every one of them is ASCII; the decoder then
 * turns the whole body into one string and slices it (YCSB's values are printable ASCII, so
 * that is the path every record takes: one native write to encode, one to decode).
 */
export function encodeFields(names: readonly string[], values: readonly string[]): Buffer {
  const n = names.length;
  if (n > MAX_FIELDS) throw new RangeError(`${n} fields (the limit is ${MAX_FIELDS})`);
  let body = '';
  for (let i = 0; i < n; i++) body += names[i]! + values[i]!;
  const bodyAt = HEADER_BYTES + ENTRY_BYTES * n;
  const capacity = bodyAt + 3 * body.length; // UTF-8 needs at most 3 bytes per UTF-16 unit
  if (scratch.length < capacity) scratch = Buffer.allocUnsafe(Math.max(capacity, 2 * scratch.length));
  const out = scratch;
  const written = out.write(body, bodyAt, 'utf8');
  // Every non-ASCII unit takes 2 or more bytes: as many bytes as units means all ASCII.
  const ascii = written === body.length;
  out.writeUInt16LE(n, 0);
  out[2] = ascii ? FLAG_ASCII : 0;
  let e = HEADER_BYTES;
  for (let i = 0; i < n; i++, e += ENTRY_BYTES) {
    const name = names[i]!;
    const value = values[i]!;
    const nameBytes = ascii ? name.length : Buffer.byteLength(name, 'utf8');
    if (nameBytes > MAX_NAME_BYTES) throw new RangeError(`field name of ${nameBytes} bytes (the limit is ${MAX_NAME_BYTES})`);
    out.writeUInt16LE(nameBytes, e);
    out.writeUInt32LE(ascii ? value.length : Buffer.byteLength(value, 'utf8'), e + 2);
  }
  const record = Buffer.allocUnsafe(bodyAt + written);
  out.copy(record, 0, 0, bodyAt + written);
  return record;
}

/** Encodes the fields of `values`, in their order. */
export function encodeRecord(values: FieldValues): Buffer {
  const n = values.size;
  const names = new Array<string>(n);
  const vals = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    names[i] = values.fieldName(i);
    vals[i] = values.fieldValue(i);
  }
  return encodeFields(names, vals);
}

/** Field names seen last at each position: a name equal to the cached one reuses its string (and its hash). */
const nameCache: string[] = [];

/**
 * Decodes a record into parallel arrays of names and values (cleared first). Returns false when
 * the bytes are not a well-formed record.
 */
export function decodeFields(bytes: Uint8Array, names: string[], values: string[]): boolean {
  names.length = 0;
  values.length = 0;
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const length = buf.length;
  if (length < HEADER_BYTES) return false;
  const n = buf[0]! | (buf[1]! << 8);
  const ascii = (buf[2]! & FLAG_ASCII) !== 0;
  const bodyAt = HEADER_BYTES + ENTRY_BYTES * n;
  if (bodyAt > length) return false;
  const body = ascii ? buf.toString('latin1', bodyAt) : '';
  let at = ascii ? 0 : bodyAt;
  const end = ascii ? body.length : length;
  for (let i = 0, e = HEADER_BYTES; i < n; i++, e += ENTRY_BYTES) {
    const nameEnd = at + (buf[e]! | (buf[e + 1]! << 8));
    const valueEnd = nameEnd + (buf[e + 2]! | (buf[e + 3]! << 8) | (buf[e + 4]! << 16)) + buf[e + 5]! * 0x1000000;
    if (valueEnd > end) return false;
    let name: string;
    const cached = nameCache[i];
    if (ascii) {
      if (cached !== undefined && cached.length === nameEnd - at && body.startsWith(cached, at)) name = cached;
      else name = nameCache[i] = body.slice(at, nameEnd);
      values.push(body.slice(nameEnd, valueEnd));
    } else {
      name = buf.toString('utf8', at, nameEnd);
      values.push(buf.toString('utf8', nameEnd, valueEnd));
    }
    names.push(name);
    at = valueEnd;
  }
  return at === end;
}

const decodedNames: string[] = [];
const decodedValues: string[] = [];

/**
 * Decodes a record into `result`: every field, or only those named in `fields`. Returns false
 * when the bytes are not a well-formed record.
 */
export function decodeRecord(bytes: Uint8Array, fields: readonly string[] | null, result: Record): boolean {
  if (!decodeFields(bytes, decodedNames, decodedValues)) return false;
  for (let i = 0; i < decodedNames.length; i++) {
    const name = decodedNames[i]!;
    if (fields === null || fields.includes(name)) result.set(name, decodedValues[i]!);
  }
  return true;
}

/**
 * The record `current` with the fields of `values` written over it (YCSB's update: the given
 * fields change, the others stay). Returns undefined when `current` is not a well-formed record.
 */
export function mergeRecord(current: Uint8Array, values: FieldValues): Buffer | undefined {
  const names: string[] = [];
  const vals: string[] = [];
  if (!decodeFields(current, names, vals)) return undefined;
  for (let i = 0; i < values.size; i++) {
    const name = values.fieldName(i);
    const at = names.indexOf(name);
    if (at >= 0) {
      vals[at] = values.fieldValue(i);
    } else {
      names.push(name);
      vals.push(values.fieldValue(i));
    }
  }
  return encodeFields(names, vals);
}

// ---- the binding ------------------------------------------------------------------------------

export default class RdmaKvClient implements DB {
  private client: KvClient | undefined;
  /** The workload's field names, when an update that writes all of them can skip the read. */
  private schema: ReadonlySet<string> | undefined;

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

  async read(table: string, key: string, fields: readonly string[] | null, result: Record): Promise<Status> {
    try {
      const value = await this.kv.get(qualifiedKey(table, key));
      if (value === undefined) return Status.NOT_FOUND;
      return decodeRecord(value, fields !== null && fields.length > 0 ? fields : null, result) ? Status.OK : Status.UNEXPECTED_STATE;
    } catch (error) {
      return statusOf(error);
    }
  }

  scan(): Status {
    return Status.NOT_IMPLEMENTED;
  }

  async update(table: string, key: string, values: FieldValues): Promise<Status> {
    const k = qualifiedKey(table, key);
    try {
      if (this.writesWholeRecord(values)) {
        await this.kv.put(k, encodeRecord(values));
        return Status.OK;
      }
      for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
        const current = await this.kv.getWithVersion(k);
        if (current === undefined) return Status.NOT_FOUND;
        const merged = mergeRecord(current.value, values);
        if (merged === undefined) return Status.UNEXPECTED_STATE;
        if (await this.kv.cas(k, current.version, merged)) return Status.OK;
      }
      return Status.ERROR;
    } catch (error) {
      return statusOf(error);
    }
  }

  async insert(table: string, key: string, values: FieldValues): Promise<Status> {
    try {
      await this.kv.put(qualifiedKey(table, key), encodeRecord(values));
      return Status.OK;
    } catch (error) {
      return statusOf(error);
    }
  }

  async delete(table: string, key: string): Promise<Status> {
    try {
      return (await this.kv.delete(qualifiedKey(table, key))) ? Status.OK : Status.NOT_FOUND;
    } catch (error) {
      return statusOf(error);
    }
  }

  /** True when `values` names every field of the schema (and nothing else): no read needed. */
  private writesWholeRecord(values: FieldValues): boolean {
    const schema = this.schema;
    if (schema === undefined || values.size !== schema.size) return false;
    const seen = new Set<string>();
    for (let i = 0; i < values.size; i++) {
      const name = values.fieldName(i);
      if (!schema.has(name) || seen.has(name)) return false;
      seen.add(name);
    }
    return true;
  }
}

export function qualifiedKey(table: string, key: string): string {
  return `${table}-${key}`;
}

function statusOf(error: unknown): Status {
  return error instanceof KvDisconnectedError ? Status.SERVICE_UNAVAILABLE : Status.ERROR;
}
