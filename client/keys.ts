// Keys and values as bytes, and how they are shown in errors and histories.
import { Buffer } from 'node:buffer'; // the global Buffer is a getter: a call per use
import { KvLayout } from '../protocol/constants.js';
import { KvInvalidArgumentError, KvKeyTooLargeError } from '../protocol/errors.js';

/** Key or value bytes; anything else is a KV_INVALID_ARGUMENT (thrown: callers turn it into a rejection). */
export function toBuffer(value: unknown, what: string): Buffer {
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  throw new KvInvalidArgumentError(`${what} must be a Buffer, Uint8Array or string`);
}

/** Key or value bytes for the queue: a string stays a string (written straight into the arena); else as toBuffer. */
export function keyBytes(value: unknown, what: string): Buffer | string {
  return typeof value === 'string' ? value : toBuffer(value, what);
}

/** Measures key i of a batch into bytes[i]; a key over the limit is the error returned. */
export function measureKey(key: Buffer | string, bytes: Int32Array, i: number): KvKeyTooLargeError | undefined {
  const n = (bytes[i] = typeof key === 'string' ? Buffer.byteLength(key) : key.length);
  return n > KvLayout.MAX_KEY_BYTES ? new KvKeyTooLargeError(`key of ${n} bytes: the limit is ${KvLayout.MAX_KEY_BYTES}`) : undefined;
}

/**
 * Writes string `s`, `bytes` UTF-8 bytes long (Buffer.byteLength), into `target` at `at`. A short
 * ASCII string (bytes === length says it is ASCII) goes char by char: ~35 ns for a 16-char key
 * where Buffer.write takes ~100.
 */
export function writeText(target: Buffer, s: string, at: number, bytes: number): void {
  if (bytes === s.length && bytes <= 64) for (let i = 0; i < bytes; i++) target[at + i] = s.charCodeAt(i);
  else target.write(s, at, bytes);
}

/** A key for an error message: quoted if printable, else its length. */
export function describe(key: Buffer | string): string {
  if (typeof key === 'string') key = Buffer.from(key.slice(0, 41), 'utf8'); // an error's path: the copy is fine
  const text = key.subarray(0, 40).toString('utf8');
  return /^[\x20-\x7e]*$/.test(text) ? `'${text}${key.length > 40 ? '…' : ''}'` : `<${key.length}-byte key>`;
}

/** UTF-8 text when the bytes are UTF-8, else "base64:…" (history files). */
export function text(bytes: Buffer | string): string {
  if (typeof bytes === 'string') return bytes;
  const s = bytes.toString('utf8');
  return Buffer.from(s, 'utf8').equals(bytes) ? s : `base64:${bytes.toString('base64')}`;
}

/** An argument as an error message shows it: never throws (a null-prototype object would), never long. */
export function show(x: unknown): string {
  if (typeof x === 'string') return x.length > 60 ? `${x.slice(0, 60)}…` : x;
  if (typeof x === 'number' || typeof x === 'bigint' || typeof x === 'boolean' || x === undefined || x === null) return String(x);
  return Array.isArray(x) ? 'an array' : typeof x === 'object' ? 'an object' : `a ${typeof x}`;
}
