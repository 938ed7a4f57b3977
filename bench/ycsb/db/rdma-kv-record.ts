/**
 * The rdma-kv binding's record format (bench/README.md documents it): one YCSB record as one
 * value. encodeFields / decodeFields / mergeRecord work on strings and allocate; encodeInto,
 * mergeInto and decodeRecord are the binding's per-operation paths, which make no string: names
 * are ASCII and values write their own bytes (FieldValues.writeValue), a merge copies the current
 * record's unchanged bytes as they are, and a read hands its values over as ranges of the bytes
 * read (ReadResult.setBytes), decoded only when asked for.
 */
import type { FieldValues } from './db.js';
import { ReadResult } from './read-result.js';

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
 * Names and values are UTF-8. Flag bit 0 says every one of them is ASCII, so byte lengths are
 * string lengths and a value decodes as latin1 (YCSB's values are printable ASCII, so that is
 * the path every record takes).
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
  names.length = values.length = 0;
  const fields = new ReadResult();
  if (!decodeRecord(bytes, null, fields)) return false;
  for (let i = 0; i < fields.size; i++) {
    names.push(fields.nameAt(i));
    values.push(fields.valueAt(i));
  }
  return true;
}

/** `bytes` as a Buffer (a view, not a copy). */
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The name length of the entry at record[e…] (u16le). */
function nameBytesAt(record: Uint8Array, e: number): number {
  return record[e]! | (record[e + 1]! << 8);
}

/** The value length of the entry at record[e…] (u32le after the name length). */
function valueBytesAt(record: Uint8Array, e: number): number {
  return (record[e + 2]! | (record[e + 3]! << 8) | (record[e + 4]! << 16)) + record[e + 5]! * 0x1000000;
}

/** The name at buf[at, end), field i of its record: the cached string when the bytes are its (ASCII). */
function fieldName(buf: Buffer, i: number, at: number, end: number, ascii: boolean): string {
  const cached = nameCache[i];
  if (ascii && cached !== undefined && bytesEqual(buf, at, end - at, cached)) return cached;
  const name = buf.toString(ascii ? 'latin1' : 'utf8', at, end);
  if (ascii) nameCache[i] = name;
  return name;
}

/**
 * Decodes the record `bytes[0, length)` into `result`: every field, or only those named in
 * `fields`, each value as its range of `bytes` (decoded only if someone reads it:
 * ReadResult.setBytes), so `bytes` must stay unchanged while the result is in use. Returns false,
 * and sets nothing, when the bytes are not a well-formed record.
 */
export function decodeRecord(bytes: Uint8Array, fields: readonly string[] | null, result: ReadResult, length = bytes.length): boolean {
  const buf = asBuffer(bytes);
  if (length > buf.length || length < HEADER_BYTES) return false;
  const n = buf[0]! | (buf[1]! << 8);
  const ascii = (buf[2]! & FLAG_ASCII) !== 0;
  const bodyAt = HEADER_BYTES + ENTRY_BYTES * n;
  if (bodyAt > length) return false;
  let at = bodyAt;
  for (let i = 0, e = HEADER_BYTES; i < n; i++, e += ENTRY_BYTES) {
    at += nameBytesAt(buf, e) + valueBytesAt(buf, e);
    if (at > length) return false;
  }
  if (at !== length) return false;
  at = bodyAt;
  for (let i = 0, e = HEADER_BYTES; i < n; i++, e += ENTRY_BYTES) {
    const nameEnd = at + nameBytesAt(buf, e);
    const valueEnd = nameEnd + valueBytesAt(buf, e);
    const name = fieldName(buf, i, at, nameEnd, ascii);
    if (fields === null || fields.includes(name)) result.setBytes(name, buf, nameEnd, valueEnd, ascii);
    at = valueEnd;
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

// ---- without allocation -----------------------------------------------------------------------

/** True when every unit of `s` is ASCII (then its UTF-8 bytes are its char codes). */
function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return false;
  return true;
}

function writeAscii(out: Buffer, at: number, s: string): number {
  for (let i = 0; i < s.length; i++) out[at + i] = s.charCodeAt(i);
  return at + s.length;
}

/** True when `values` can be written by encodeInto / mergeInto: ASCII names, byte-writing values. */
function writable(values: FieldValues): boolean {
  if (values.writeValue === undefined || values.valueLength === undefined || values.size > MAX_FIELDS) return false;
  for (let i = 0; i < values.size; i++) {
    const name = values.fieldName(i);
    if (name.length > MAX_NAME_BYTES || !isAscii(name) || values.valueLength(i) < 0) return false;
  }
  return true;
}

/** The bytes encodeInto writes for `values`, or -1 when it cannot (use encodeRecord). */
export function encodedBytes(values: FieldValues): number {
  if (!writable(values)) return -1;
  let bytes = HEADER_BYTES + ENTRY_BYTES * values.size;
  for (let i = 0; i < values.size; i++) bytes += values.fieldName(i).length + values.valueLength!(i);
  return bytes;
}

/** encodeRecord(values) written at out[0…] (at least encodedBytes(values) long); returns its length. */
export function encodeInto(values: FieldValues, out: Buffer): number {
  const n = values.size;
  out.writeUInt16LE(n, 0);
  out[2] = FLAG_ASCII;
  let at = HEADER_BYTES + ENTRY_BYTES * n;
  for (let i = 0, e = HEADER_BYTES; i < n; i++, e += ENTRY_BYTES) {
    const name = values.fieldName(i);
    at = writeAscii(out, at, name);
    const valueBytes = values.writeValue!(i, out, at);
    at += valueBytes;
    out.writeUInt16LE(name.length, e);
    out.writeUInt32LE(valueBytes, e + 2);
  }
  return at;
}

/** Per field of the values being merged: the current record's entry it replaces, or -1 (appended). */
let matchScratch = new Int32Array(16);
/** Per field of the values being merged: where its value goes in the output. */
let valueAtScratch = new Int32Array(16);

/**
 * An upper bound of mergeInto's output, or -1 when mergeInto cannot merge these (use
 * mergeRecord): a current record that is not ASCII, or values it cannot write, or the same
 * field twice among the values.
 */
export function mergedBytesBound(current: Uint8Array, values: FieldValues): number {
  if (current.length < HEADER_BYTES || (current[2]! & FLAG_ASCII) === 0 || !writable(values)) return -1;
  let bytes = current.length;
  for (let i = 0; i < values.size; i++) {
    const name = values.fieldName(i);
    for (let j = 0; j < i; j++) if (values.fieldName(j) === name) return -1;
    bytes += ENTRY_BYTES + name.length + values.valueLength!(i);
  }
  return bytes;
}

/** True when the `length` bytes at buf[at…] are the (ASCII) string s. */
function bytesEqual(buf: Uint8Array, at: number, length: number, s: string): boolean {
  if (length !== s.length) return false;
  for (let i = 0; i < length; i++) if (buf[at + i] !== s.charCodeAt(i)) return false;
  return true;
}

/**
 * mergeRecord(current, values) written at out[0…] (at least mergedBytesBound long, and not
 * `current`'s memory); returns its length, or -2 when `current` is not a well-formed record.
 * The current record's bytes between replaced values are copied in runs, not field by field.
 */
export function mergeInto(current: Uint8Array, values: FieldValues, out: Buffer): number {
  const length = current.length;
  const n = current[0]! | (current[1]! << 8);
  const bodyAt = HEADER_BYTES + ENTRY_BYTES * n;
  if (bodyAt > length) return -2;
  const m = values.size;
  if (matchScratch.length < m) {
    matchScratch = new Int32Array(2 * m);
    valueAtScratch = new Int32Array(2 * m);
  }
  const match = matchScratch.fill(-1, 0, m);
  const valueAt = valueAtScratch;
  // Which entry each value replaces (the first of that name, as mergeRecord), checking bounds.
  let appended = m;
  let sameLengths = true; // every value replaces one of its own length: the record keeps its layout
  for (let j = 0, e = HEADER_BYTES, at = bodyAt; j < n; j++, e += ENTRY_BYTES) {
    const nameBytes = nameBytesAt(current, e);
    const valueEnd = at + nameBytes + valueBytesAt(current, e);
    if (valueEnd > length) return -2;
    for (let i = 0; i < m; i++) {
      if (match[i] === -1 && bytesEqual(current, at, nameBytes, values.fieldName(i))) {
        match[i] = j;
        valueAt[i] = at + nameBytes;
        if (valueBytesAt(current, e) !== values.valueLength!(i)) sameLengths = false;
        appended--;
        break;
      }
    }
    at = valueEnd;
    if (j === n - 1 && at !== length) return -2;
  }
  if (n === 0 && bodyAt !== length) return -2;
  const src = asBuffer(current);
  if (appended === 0 && sameLengths) {
    // YCSB's case (fields of one length): the record copied whole, then the new values written
    // over the old. Whole, since Buffer.copy of a range makes a view of its source each time.
    src.copy(out, 0);
    out[2] = FLAG_ASCII;
    for (let i = 0; i < m; i++) values.writeValue!(i, out, valueAt[i]!);
    return length;
  }
  const total = n + appended;
  if (total > MAX_FIELDS) return -2;
  out.writeUInt16LE(total, 0);
  out[2] = FLAG_ASCII;
  let runStart = bodyAt; // unchanged bytes of `current` not yet copied
  let to = HEADER_BYTES + ENTRY_BYTES * total;
  let from = bodyAt;
  for (let j = 0, e = HEADER_BYTES; j < n; j++, e += ENTRY_BYTES) {
    const nameBytes = nameBytesAt(current, e);
    const valueBytes = valueBytesAt(current, e);
    const oldValueAt = from + nameBytes;
    let i = 0;
    while (i < m && match[i] !== j) i++;
    out.writeUInt16LE(nameBytes, e);
    if (i === m) {
      out.writeUInt32LE(valueBytes, e + 2);
    } else {
      to += src.copy(out, to, runStart, oldValueAt);
      const newBytes = values.valueLength!(i);
      valueAt[i] = to;
      to += newBytes;
      out.writeUInt32LE(newBytes, e + 2);
      runStart = oldValueAt + valueBytes;
    }
    from = oldValueAt + valueBytes;
  }
  to += src.copy(out, to, runStart, length);
  for (let i = 0, e = HEADER_BYTES + ENTRY_BYTES * n; i < m; i++) {
    if (match[i] !== -1) continue;
    const name = values.fieldName(i);
    to = writeAscii(out, to, name);
    const newBytes = values.valueLength!(i);
    valueAt[i] = to;
    to += newBytes;
    out.writeUInt16LE(name.length, e);
    out.writeUInt32LE(newBytes, e + 2);
    e += ENTRY_BYTES;
  }
  // The values last, in their own order: lazy values are drawn when first written, and
  // mergeRecord draws them in this order.
  for (let i = 0; i < m; i++) values.writeValue!(i, out, valueAt[i]!);
  return to;
}
