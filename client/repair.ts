// What repair's copier (server/replication/copier.ts) needs of a KvClient: a
// bytes item written again as it is from its primary onto the members syncing
// into its hash slot (rewriteOnto: a CAS on the version read that keeps it, so
// a racing write is never undone), and a counter or lock created on a target
// (copyCounter, copyLock). Not for applications.
import { KvOp, KvStatus } from '../protocol/constants.js';
import { KvDisconnectedError, KvError } from '../protocol/errors.js';
import { rewriteItem } from './expiry.js';
import { toBuffer } from './keys.js';
import type { OpResult } from './op-queue.js';
import type { ServerClient } from './server-client.js';
import type { Key } from './types.js';

export interface RepairAccess {
  /** The epoch of the config the client routes by (undefined: none yet). */
  configEpoch: () => number | undefined;
  /** Writes the key's bytes item again through its replica set (tests; the copier writes onto the targets alone: rewriteOnto); its value's length, or false if the key does not exist. */
  rewrite: (key: Key) => Promise<number | false>;
  /** The connection to member `name`, alone (no replica set). */
  member: (name: string) => ServerClient | undefined;
}

/**
 * Writes the key's bytes item again as it is from member `primary` onto `targets` alone, at hash
 * slot epoch `epoch` (a view of the primary with the targets as its backups): a CAS on the version
 * read, under the primary's bucket locks as every writer of the key takes them. The hash slot's
 * other replicas already hold that item (backups commit before their primary), so they are left
 * out: a third of the work of writing the whole replica set. The value's length, or false if the
 * key does not exist. Rejects when a member is not connected, or the epoch moved (KV_EPOCH_MOVED:
 * the copy must start over).
 */
export function rewriteOnto(access: RepairAccess, key: Buffer, primary: string, targets: readonly string[], epoch: number): Promise<number | false> {
  const from = access.member(primary);
  const onto = targets.map((name) => access.member(name));
  const missing = [primary, ...targets].find((name, i) => (i === 0 ? from : onto[i - 1]) === undefined);
  if (missing !== undefined) return Promise.reject(new KvDisconnectedError(`repair: no connection to ${missing}`));
  return rewriteItem(from!.withBackups(onto as ServerClient[], undefined, epoch), key);
}

/**
 * Creates counter `key` holding `value` on member `target` alone, unless it has the key already;
 * resolves whether it did. While a syncing target lacks a counter its primary has, replicated
 * INCRs of it wait (native/kv/replicated.cc: the group waits until its members agree), so the
 * primary's word, read by the copier just before, has not moved since.
 */
export async function copyCounter(access: RepairAccess, key: Key, value: bigint, target: string): Promise<boolean> {
  const server = access.member(target);
  if (!server) throw new KvDisconnectedError(`repair: no connection to ${target}`);
  const bytes = toBuffer(key, 'key');
  if (!(await lacks(server, bytes))) return false;
  await server.submit(KvOp.INCR, bytes, undefined, BigInt.asUintN(64, value)).catch((error: unknown) => {
    // Created; only its answer came after the lease (it is the value we gave).
    if (!(error instanceof KvError && error.code === 'KV_READ_LEASE_LAPSED')) throw error;
  });
  return true;
}

/**
 * Creates lock `key` on member `target` alone, free, at a token above `token` (its primary's), unless
 * it has the key already; resolves whether it did. A LOCK there with `token` as its floor creates it
 * held by this client, and an UNLOCK frees it. A backup's token is then never below its primary's, so
 * after a failover to it every token granted is still above every token granted before. A lock held
 * on the primary is copied free: should the target become primary before its holder releases it, the
 * lock is lost to the holder, and the next one granted carries a larger token (fencing tokens exist
 * for exactly that).
 */
export async function copyLock(access: RepairAccess, key: Key, token: number, target: string): Promise<boolean> {
  const server = access.member(target);
  if (!server) throw new KvDisconnectedError(`repair: no connection to ${target}`);
  const bytes = toBuffer(key, 'key');
  if (!(await lacks(server, bytes))) return false;
  let taken: OpResult;
  try {
    taken = await server.submit(KvOp.LOCK, bytes, undefined, (BigInt(token) << 32n) | BigInt(COPY_LOCK_WAIT_MS));
  } catch (error) {
    // Held: a client's replicated LOCK created it there since the look, above the primary's token (or the
    // target's bucket locks stayed busy: then it still lacks the lock, and the copy fails, to run again).
    if (error instanceof KvError && error.code === 'KV_LOCK_CONTENDED' && !(await lacks(server, bytes))) return false;
    throw error;
  }
  await server.submit(KvOp.UNLOCK, bytes, undefined, taken.version, true);
  return true;
}

/** Whether member `server` lacks the key (a GET misses; a counter or lock answers KV_TYPE_MISMATCH). */
async function lacks(server: ServerClient, bytes: Buffer): Promise<boolean> {
  let found: OpResult | undefined;
  for (let attempt = 0; found === undefined; attempt++) {
    try {
      found = await server.submit(KvOp.GET, bytes);
    } catch (error) {
      if (!(error instanceof KvError)) throw error;
      // A counter (or a value too large for the scratch): the target has the key.
      if (error.code === 'KV_TYPE_MISMATCH' || error.code === 'KV_BUFFER_TOO_SMALL') return false;
      // No read lease yet (our config is older than the target's): soon.
      if (error.code !== 'KV_READ_LEASE_LAPSED' || attempt >= LEASE_TRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, LEASE_WAIT_MS));
    }
  }
  return found.status === KvStatus.NOT_FOUND;
}

/** How long copyLock's LOCK waits on a held word (the copier holds the primary's bucket locks meanwhile). */
const COPY_LOCK_WAIT_MS = 100;

/** A GET on the target waits this long for a read lease, this many times. */
const LEASE_WAIT_MS = 20;
const LEASE_TRIES = 50;
