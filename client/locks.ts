// lock(): its argument checks and its release, apart from KvClient (which
// routes the name and sends the two ops). docs in KvClient.lock.
import { KvOp, KvStatus } from '../protocol/constants.js';
import { KvInvalidArgumentError, KvLockContendedError } from '../protocol/errors.js';
import { describe, show, toBuffer } from './keys.js';
import type { OpResult } from './op-queue.js';
import { MAX_TIMEOUT_MS } from './options.js';
import type { Key } from './types.js';

/** Sends one op of a lock to the server chosen for its name (LOCK and UNLOCK go to the same one). */
export type LockSend = (type: KvOp, arg: bigint, mismatchResolves: boolean) => Promise<OpResult>;

export async function takeLock(name: Key, options: { timeoutMs?: number }, defaultTimeoutMs: number, route: (name: Buffer) => LockSend): Promise<{ token: bigint; release: () => Promise<void> }> {
  if (options === null || typeof options !== 'object') throw new KvInvalidArgumentError('lock options must be an object: { timeoutMs? }');
  const timeoutMs = options.timeoutMs === undefined ? defaultTimeoutMs : options.timeoutMs;
  if (typeof timeoutMs !== 'number' || !(timeoutMs > 0)) throw new KvInvalidArgumentError(`lock timeoutMs must be a positive number (got ${show(timeoutMs)})`);
  const nameBytes = toBuffer(name, 'name');
  const send = route(nameBytes);
  const r = await send(KvOp.LOCK, BigInt(Math.ceil(Math.min(timeoutMs, MAX_TIMEOUT_MS))), false);
  const token = r.version;
  let releasing: Promise<void> | undefined;
  const unlock = async () => {
    const u = await send(KvOp.UNLOCK, token, true);
    if (u.status !== KvStatus.OK) {
      throw new KvLockContendedError(`lock ${describe(nameBytes)} was no longer held by this client (token ${token})`);
    }
  };
  // One unlock: later calls get its outcome, a failure included.
  return { token, release: () => (releasing ??= unlock()) };
}
