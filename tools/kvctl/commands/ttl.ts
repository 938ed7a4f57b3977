// expire, persist and ttl (and put --ttl's parsing): a key's TTL through
// KvClient. A missing key is NotFound (exit 1); a bad duration is a UsageError
// (exit 2, nothing sent). Counters and locks never expire: KV_TYPE_MISMATCH.
import { KvTypeMismatchError, MAX_TTL_MS } from '../../../client/index.js';
import { UsageError, parseDuration } from '../../../protocol/operator-input.js';
import type { CtlArgs } from '../args.js';
import { withClient } from '../connect.js';
import { type Io, NotFound } from '../io.js';

/** A TTL as typed (a duration: 1000, 500ms, 30s, 10m, 2h, or days, 7d, which TTLs alone take): 1 ms up to 100 years. */
export function parseTtl(text: string, what: string): number {
  const days = /^\s*(\d+(?:\.\d+)?)\s*d\s*$/i.exec(text);
  const ms = days ? Number(days[1]) * 86_400_000 : parseDuration(text, what);
  if (!Number.isInteger(ms)) throw new UsageError(`${what}: '${text}' is not a whole number of milliseconds`);
  if (ms < 1 || ms > MAX_TTL_MS) throw new UsageError(`${what}: ${text} is out of range (1ms to ${MAX_TTL_MS / 86_400_000}d)`);
  return ms;
}

/** The client's wording is about reading a value; here the key holds a counter or a lock, which never expire. */
async function onKey<T>(args: CtlArgs, io: Io, run: Parameters<typeof withClient<T>>[2]): Promise<T> {
  try {
    return await withClient(args, io, run);
  } catch (error) {
    if (error instanceof KvTypeMismatchError) throw new KvTypeMismatchError(`${args.command} ${args.key}: the key holds a counter or a lock, which never expire`);
    throw error;
  }
}

export async function expire(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const ttlMs = parseTtl(args.ttl!, 'expire: TTL');
  if (!(await onKey(args, io, (kv) => kv.expire(key, ttlMs)))) throw new NotFound(`not found: ${key}`);
  if (args.json) io.stdout(JSON.stringify({ key, ttlMs }) + '\n');
}

export async function persist(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  // false: missing, or no TTL to remove (then done: the key never expires).
  const [persisted, exists] = await onKey(args, io, async (kv) => ((await kv.persist(key)) ? ([true, true] as const) : ([false, (await kv.ttl(key)) !== undefined] as const)));
  if (!exists) throw new NotFound(`not found: ${key}`);
  if (args.json) io.stdout(JSON.stringify({ key, persisted }) + '\n');
  else if (!persisted) io.stderr(`kvctl: ${key} had no TTL\n`);
}

export async function ttl(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const left = await onKey(args, io, (kv) => kv.ttl(key));
  if (left === undefined) throw new NotFound(`not found: ${key}`);
  const never = left === Infinity;
  io.stdout(args.json ? JSON.stringify({ key, ttlMs: never ? null : left }) + '\n' : `${never ? 'none' : left}\n`);
}
