// get, put, del and incr: one key through KvClient, which routes it to the
// member that owns its hash slot. A missing key is NotFound (exit 1).
import { KvTypeMismatchError } from '../../../client/index.js';
import { UsageError } from '../../../protocol/operator-input.js';
import type { CtlArgs } from '../args.js';
import { withClient } from '../connect.js';
import { jsonValue } from '../format.js';
import { type Io, NotFound } from '../io.js';
import { parseTtl } from './ttl.js';

export async function get(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const found = await withClient(args, io, (kv) => kv.getWithVersion(key));
  if (!found) throw new NotFound(`not found: ${key}`);
  if (args.json) {
    io.stdout(JSON.stringify({ key, ...jsonValue(found.value), version: found.version.toString() }) + '\n');
  } else {
    io.stdout(found.value);
    if (io.stdoutIsTTY) io.stdout('\n');
  }
}

export async function put(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const ttlMs = args.ttl === undefined ? undefined : parseTtl(args.ttl, 'put --ttl');
  const value = args.value === '-' ? await io.stdin() : Buffer.from(args.value!, 'utf8');
  await withClient(args, io, (kv) => kv.put(key, value, { ttlMs }));
  if (args.json) io.stdout(JSON.stringify(ttlMs === undefined ? { key, stored: true, bytes: value.length } : { key, stored: true, bytes: value.length, ttlMs }) + '\n');
}

export async function del(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const deleted = await withClient(args, io, (kv) => kv.delete(key));
  if (!deleted) throw new NotFound(`not found: ${key}`);
  if (args.json) io.stdout(JSON.stringify({ key, deleted: true }) + '\n');
}

const I64_MIN = -(1n << 63n);
const U64_MAX = (1n << 64n) - 1n;

/** A delta the counter can take: any signed or unsigned 64-bit integer (counters count modulo 2^63). */
function parseDelta(text: string | undefined): bigint {
  if (text === undefined) return 1n;
  if (!/^[+-]?\d+$/.test(text)) throw new UsageError(`incr: DELTA '${text}' is not an integer`);
  const delta = BigInt(text);
  if (delta < I64_MIN || delta > U64_MAX) throw new UsageError(`incr: DELTA ${text} is out of range (${I64_MIN} to ${U64_MAX})`);
  return delta;
}

export async function incr(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const delta = parseDelta(args.delta);
  let value: bigint;
  try {
    value = await withClient(args, io, (kv) => kv.incr(key, delta));
  } catch (error) {
    // The client's wording is about reading a counter as bytes; here it is the other way round.
    if (error instanceof KvTypeMismatchError) throw new KvTypeMismatchError(`incr ${key}: the key holds a value (or a lock), not a counter`);
    throw error;
  }
  io.stdout(args.json ? JSON.stringify({ key, value: value.toString() }) + '\n' : `${value}\n`);
}
