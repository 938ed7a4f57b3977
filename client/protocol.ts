// Control messages of protocol v2 (msgpack over SEND/RECV) and the connect
// private data. Shared by KvClient and kv-server. docs/protocol.md lists them.
import { createHash } from 'node:crypto';

import { Packr } from 'msgpackr';

import { KvLayout } from './constants.js';

const packr = new Packr({ useRecords: false, int64AsType: 'bigint' });

/** The layout and addresses a client needs, sent by the server after accepting. */
export interface Hello {
  t: 'hello';
  v: number;
  /** Owner id in lock words: unique among connected clients (reused after a restart). */
  clientId: number;
  /** session << 40: the base of this session's write versions, unique for the region's life. */
  versionBase: bigint;
  region: { addr: bigint; rkey: number; length: bigint };
  layout: {
    bucketCount: number;
    indexOffset: bigint;
    heapOffset: bigint;
    heapBytes: bigint;
    seed: bigint;
    ringOffset: bigint;
    /** Heap block sizes, in 64-byte units, smallest first. */
    classes: number[];
    maxKeyBytes: number;
    maxValueBytes: number;
  };
  graceMs: number;
  /** The client pings this often; silent for 3 intervals, it is taken for dead. */
  keepaliveMs: number;
}
/** Keepalive, both ways: RDMA has none of its own. */
export interface Ping {
  t: 'ping';
}
export interface Pong {
  t: 'pong';
}
export interface GrantRequest {
  t: 'grant';
  /** class index */
  c: number;
  n: number;
}
export interface Granted {
  t: 'granted';
  c: number;
  /** block offsets in units from the heap's start */
  blocks: number[];
  error?: 'KV_OUT_OF_MEMORY';
}
/** Blocks a client no longer needs (it is closing, or answering a reclaim). */
export interface ReturnBlocks {
  t: 'return';
  c: number;
  blocks: number[];
  /** The last return answering a reclaim (its blocks may be empty). */
  end?: true;
}
/**
 * The server is short of memory: give back the granted blocks you hold unused (answered with
 * `return` messages, the last one marked `end`).
 */
export interface Reclaim {
  t: 'reclaim';
}
export interface ServerError {
  t: 'error';
  code: string;
  message: string;
}
export type ControlMessage = Hello | Ping | Pong | GrantRequest | Granted | ReturnBlocks | Reclaim | ServerError;

export function encode(message: ControlMessage): Buffer {
  return packr.pack(message);
}

/** Decodes a control message, or throws with a reason for a malformed one. */
export function decode(bytes: Buffer): ControlMessage {
  const message = packr.unpack(bytes) as unknown;
  if (typeof message !== 'object' || message === null || typeof (message as { t?: unknown }).t !== 'string') {
    throw new Error('not a control message');
  }
  return message as ControlMessage;
}

/** Blocks per grant request; a reply lists them all in one receive buffer. */
export const GRANT_BATCH = 64;
/** Most bytes one grant hands out (also at most 1/64 of the heap): see grantBatch. */
export const GRANT_BYTES = 1 << 20;

/**
 * Blocks of `blockBytes` one grant hands out: up to GRANT_BATCH, and no more than
 * min(GRANT_BYTES, heapBytes / 64) in all, but at least one. A batch saves a round trip per
 * PUT of small values; past 16 KiB blocks the value's own transfer outweighs that round
 * trip, and a batch of large blocks would only reserve memory other clients need (a 1 MiB
 * value's grant is that one block). With 1/64 of the heap, 64 clients' batches of one class
 * fit in it.
 */
export function grantBatch(blockBytes: number, heapBytes: number): number {
  const budget = Math.min(GRANT_BYTES, heapBytes / 64);
  return Math.min(GRANT_BATCH, Math.max(1, Math.floor(budget / blockBytes)));
}
/** Most blocks one 'return' message carries. */
export const RETURN_BATCH = 64;

// ---- connect private data: [version u8][flags u8][sha256(token) or loopback secret, 32 bytes] ----

const TOKEN_FLAG = 1;
const LOOPBACK_FLAG = 2;

export function connectData(token: string | undefined): Buffer {
  const data = Buffer.alloc(34);
  data[0] = KvLayout.PROTOCOL_VERSION;
  if (token !== undefined) {
    data[1] = TOKEN_FLAG;
    tokenDigest(token).copy(data, 2);
  }
  return data;
}

/** The server's connection to itself, for atomics it must not do with its CPU. */
export function loopbackData(secret: Buffer): Buffer {
  const data = Buffer.alloc(34);
  data[0] = KvLayout.PROTOCOL_VERSION;
  data[1] = LOOPBACK_FLAG;
  secret.copy(data, 2, 0, 32);
  return data;
}

export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

export function parseConnectData(data: Buffer): { version: number; digest?: Buffer; loopback?: Buffer } {
  if (data.length < 2) return { version: -1 };
  const out: { version: number; digest?: Buffer; loopback?: Buffer } = { version: data[0]! };
  if (data.length >= 34 && (data[1]! & TOKEN_FLAG) !== 0) out.digest = data.subarray(2, 34);
  if (data.length >= 34 && (data[1]! & LOOPBACK_FLAG) !== 0) out.loopback = data.subarray(2, 34);
  return out;
}

/** Why the server rejected a connection: the first byte of the reject private data. */
export const RejectReason = { AUTH: 1, VERSION: 2, FULL: 3 } as const;

/** The smallest class whose blocks hold `units`, or -1. */
export function classFor(classes: readonly number[], units: number): number {
  let lo = 0;
  let hi = classes.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (classes[mid]! >= units) hi = mid;
    else lo = mid + 1;
  }
  return lo < classes.length ? lo : -1;
}

/** Block sizes in units: 1, 2, 3, … growing by 1.25× (memcached's slab factor) up to maxUnits. */
export function sizeClasses(maxUnits: number): number[] {
  const classes: number[] = [];
  for (let size = 1; ; size = Math.max(size + 1, Math.ceil(size * 1.25))) {
    if (size >= maxUnits) {
      classes.push(maxUnits);
      return classes;
    }
    classes.push(size);
  }
}

export function itemUnits(keyLen: number, valueLen: number): number {
  return Math.ceil((KvLayout.ITEM_HEADER_BYTES + keyLen + valueLen) / KvLayout.UNIT_BYTES);
}
