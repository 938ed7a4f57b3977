// TTLs, the client's side (docs/protocol.md, "Expiry"). A PUT writes its
// item's expiry: absolute Unix ms, this host's clock at the call plus the TTL.
// Every read path of the core treats an expired item as missing. The expiry is
// in the item's checksum, so expire() and persist() cannot change it in place:
// they read the item (one GET) and write it again with the new expiry as a CAS
// on the version read, so a write that raced them is never undone (their CAS
// fails, and they read again). ttl() is a GET that answers the expiry.
//
// Only bytes items expire: counters and locks never do (expire, persist and ttl
// on one reject with KV_TYPE_MISMATCH, as get does).
import { KvLayout, KvOp, KvStatus } from '../protocol/constants.js';
import { KvBufferTooSmallError, KvInvalidArgumentError, KvTimeoutError } from '../protocol/errors.js';
import { closestMatch } from '../protocol/operator-input.js';
import { describe, show } from './keys.js';
import { type ExtRef, extOf, withBounce } from './large-values.js';
import type { Bytes, OpResult, ServerClient } from './server-client.js';

/** The longest TTL: KvLayout.MAX_TTL_DAYS (100 years), in ms. */
export const MAX_TTL_MS = KvLayout.MAX_TTL_DAYS * 86_400_000;

/** put()'s options, and a putMany entry's third element. */
export interface PutOptions {
  /** The key expires this many ms after the call: a whole number from 1 to MAX_TTL_MS. @default undefined (never) */
  ttlMs?: number;
}

/** Test hook: runs between expire's or persist's read and its write, to hold a race open (test/kv/ttl-races). */
export const expiryHooks: { afterRead?: ((key: Bytes) => Promise<void>) | undefined } = {};

/** The expiry `ttlMs` from now; a TTL that is not a whole number of ms from 1 to MAX_TTL_MS throws KV_INVALID_ARGUMENT. */
export function expiryAfter(ttlMs: unknown, what: string): number {
  if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_TTL_MS) {
    throw new KvInvalidArgumentError(`${what}: ttlMs must be a whole number of ms from 1 to ${MAX_TTL_MS} (${KvLayout.MAX_TTL_DAYS} days; got ${show(ttlMs)})`);
  }
  return Date.now() + ttlMs;
}

/** A put's options as its item's expiry (0: never); bad options throw KV_INVALID_ARGUMENT. */
export function putExpiry(options: unknown, what: string): number {
  if (options === undefined) return 0;
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw new KvInvalidArgumentError(`${what} options must be an object: { ttlMs? }`);
  for (const name of Object.keys(options)) {
    if (name === 'ttlMs') continue;
    const meant = closestMatch(name, ['ttlMs']);
    throw new KvInvalidArgumentError(`${what}: unknown option '${name}'${meant ? ` (did you mean '${meant}'?)` : ''}: the options are { ttlMs? }`);
  }
  const { ttlMs } = options as PutOptions;
  return ttlMs === undefined ? 0 : expiryAfter(ttlMs, what);
}

/** `f(a, b)`, or the error it threw: for a call that must reject, never throw (no closure per call). */
export function attempt<A, B, T>(f: (a: A, b: B) => T, a: A, b: B): T | Error {
  try {
    return f(a, b);
  } catch (error) {
    return error as Error;
  }
}

/** What ttl() answers for an expiry: the ms left (at least 1: the core found it unexpired), Infinity for none. */
export function remaining(expiry: number): number {
  return expiry === 0 ? Infinity : Math.max(1, expiry - Date.now());
}

/** The ms a key has left: Infinity without a TTL, undefined when it does not exist (or has expired). */
export function ttlOf(server: ServerClient, key: Bytes): Promise<number | undefined> {
  return withItem(server, key, undefined, (item) => Promise.resolve(remaining(item.expiry ?? 0)));
}

/**
 * Gives the key's current value a new expiry (0: none, persist). Resolves true when it did, false
 * when the key does not exist (or, persisting, has no TTL). A write between our read and our CAS
 * makes the CAS fail: read again, until the op timeout (then KV_TIMEOUT).
 */
export async function setExpiry(server: ServerClient, key: Bytes, expiry: number, persist: boolean): Promise<boolean> {
  const deadline = performance.now() + (server.options.timeoutMs ?? 5000);
  for (;;) {
    const done = await withItem(server, key, false, async (item) => {
      if (persist && !item.expiry) return false;
      if (expiryHooks.afterRead) await expiryHooks.afterRead(key);
      const r = await server.submit(KvOp.CAS, key, item.value, item.version, true, expiry);
      return r.status === KvStatus.OK ? true : undefined; // undefined: raced, read again
    }).catch((error: unknown) => {
      if (error instanceof KvBufferTooSmallError) return undefined; // the value grew between our two reads
      throw error;
    });
    if (done !== undefined) return done;
    if (performance.now() > deadline) throw new KvTimeoutError(`${persist ? 'persist' : 'expire'} ${describe(key)}: the key changed under every try`);
  }
}

/**
 * Writes the key's item again as it is (value, expiry and version) by a CAS on the version read: repair's
 * copier (server/replication/copier.ts) sends every key of a hash slot through its replica set
 * this way, members syncing into it included. A write between our read and our CAS went to them
 * too, so a failed CAS means there is nothing left to copy. Resolves the value's length, or false when the key does not exist.
 */
export function rewriteItem(server: ServerClient, key: Bytes): Promise<number | false> {
  return withItem(server, key, false as const, async (item) => {
    await server.submit(KvOp.CAS, key, item.value, item.version, true, item.expiry ?? 0, true);
    return item.value.length;
  });
}

/**
 * One GET of the key's item, handed to `use` with its value, version and expiry (`absent`
 * when the key does not exist). A value larger than the core's scratch comes through a registered bounce
 * buffer, held while `use` runs (a CAS from it writes it without a copy).
 */
async function withItem<T, A>(server: ServerClient, key: Bytes, absent: A, use: (item: OpResult & { value: Buffer }) => Promise<T>): Promise<T | A> {
  let r: OpResult;
  try {
    r = await server.submit(KvOp.GET, key);
  } catch (error) {
    if (!(error instanceof KvBufferTooSmallError)) throw error;
    return withBounce(error.needed, async (bounce) => {
      const big = await server.getFullInto(key, extOf(bounce) as ExtRef);
      return big.status === KvStatus.OK ? use({ ...big, value: bounce.subarray(0, big.length ?? 0) }) : absent;
    });
  }
  return r.status === KvStatus.OK ? use(r as OpResult & { value: Buffer }) : absent;
}
