// getMany and putMany's parts that are not the queue's: checking putMany's
// entries, and splitting a batch's keys by server (one batch per server).
import { KvInvalidArgumentError } from '../protocol/errors.js';
import type { KvError } from '../protocol/errors.js';
import { putExpiry } from './expiry.js';
import { keyBytes } from './keys.js';
import { type Bytes, ServerClient } from './server-client.js';

/**
 * putMany's entries as keys, values and expiries (absolute Unix ms, 0 = never; undefined when
 * no entry has options); a malformed entry or a bad TTL throws KV_INVALID_ARGUMENT.
 */
export function splitEntries(entries: unknown): [Bytes[], Bytes[], Float64Array | undefined] {
  if (!Array.isArray(entries)) throw new KvInvalidArgumentError('putMany needs an array of [key, value] or [key, value, { ttlMs }] entries');
  const keys = new Array<Bytes>(entries.length);
  const values = new Array<Bytes>(entries.length);
  let expiries: Float64Array | undefined;
  for (let i = 0; i < entries.length; i++) {
    const entry: unknown = entries[i];
    if (!Array.isArray(entry) || entry.length < 2 || entry.length > 3) throw new KvInvalidArgumentError('putMany entries must be [key, value] or [key, value, { ttlMs }]');
    keys[i] = keyBytes(entry[0], 'key');
    values[i] = keyBytes(entry[1], 'value');
    const expiry = entry.length === 3 ? putExpiry(entry[2], `putMany entry ${i}`) : 0;
    if (expiry !== 0) (expiries ??= new Float64Array(entries.length))[i] = expiry;
  }
  return [keys, values, expiries];
}

/**
 * Runs `each` once per server with its keys, and their positions in `keys`
 * when they are not all of them (`only`: a one-server client, no hashing).
 * A key whose server is unknown or down rejects the whole call before anything is queued.
 */
export function byServer(
  keys: Bytes[],
  only: ServerClient | undefined,
  route: (key: Bytes) => ServerClient | KvError,
  each: (server: ServerClient, keys: Bytes[], positions?: Int32Array) => Promise<unknown>,
): Promise<unknown> {
  if (keys.length === 0) return Promise.resolve();
  let servers: Array<ServerClient | KvError>;
  try {
    if (only) {
      const server = route(keys[0]!);
      return server instanceof ServerClient ? each(server, keys) : Promise.reject(server);
    }
    servers = keys.map(route);
  } catch (error) {
    return Promise.reject(error);
  }
  const refused = servers.find((s) => !(s instanceof ServerClient));
  if (refused) return Promise.reject(refused);
  const groups = new Map<ServerClient, number[]>();
  servers.forEach((s, i) => addPosition(groups, s as ServerClient, i));
  return Promise.all(Array.from(groups, ([server, list]) => each(server, list.map((i) => keys[i]!), Int32Array.from(list))));
}

/** Adds key position `i` to `server`'s list in `groups` (a batch per server: byServer, and getMany on an etcd cluster). */
export function addPosition(groups: Map<ServerClient, number[]>, server: ServerClient, i: number): void {
  const list = groups.get(server);
  if (list) list.push(i);
  else groups.set(server, [i]);
}
