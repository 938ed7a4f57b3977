// Control messages (msgpack over SEND/RECV) between a client and kv-server,
// and how many blocks one grant hands out. docs/protocol.md lists them.
import { Packr } from 'msgpackr';

import type { Role } from './tokens.js';

const packr = new Packr({ useRecords: false, int64AsType: 'bigint' });

/** The layout and addresses a client needs, sent by the server after accepting. */
export interface Hello {
  t: 'hello';
  v: number;
  /** What the client's token allows. A read client's rkey is READ-only and it has no ring. */
  role: Role;
  /** The namespace its token opened (the region below is that namespace's). */
  namespace: string;
  /** Owner id in lock words: unique among connected clients (reused after a restart). */
  clientId: number;
  /** session << 40: the base of this session's write versions, unique for the region's life. */
  versionBase: bigint;
  /**
   * accessOffset: the access table's region offset, with eviction on (write clients only).
   * epochOffset (v7): the epoch table's region offset, region format 5 (write clients only): every
   * write READs its hash slot's word with its lock CASes and goes on only while it is open.
   */
  region: { addr: bigint; rkey: number; length: bigint; accessOffset?: bigint; epochOffset?: bigint };
  layout: {
    bucketCount: number;
    indexOffset: bigint;
    heapOffset: bigint;
    heapBytes: bigint;
    seed: bigint;
    /** This client's ring (a write client's; a read client has none). */
    ringOffset?: bigint;
    /** Heap block sizes, in 64-byte units, smallest first. */
    classes: number[];
    maxKeyBytes: number;
    maxValueBytes: number;
  };
  graceMs: number;
  /** The client pings this often; silent for 3 intervals, it is taken for dead. */
  keepaliveMs: number;
  /**
   * v8, only from a replica of a replicated cluster: its read lease, in ms from when the client
   * asked to connect (0: none yet). Its GETs count only if answered within the lease, renewed by
   * every pong's `leaseMs` (docs/replication-design.md §4.4).
   */
  readLeaseMs?: number;
  /**
   * v9, with readLeaseMs: the config epoch this replica has applied. A client whose config is
   * older counts no read on the lease (it may route a hash slot here that this member no longer
   * serves, or holds stale since it returned) and reads config again.
   */
  configEpoch?: number;
}
/** Keepalive, both ways: RDMA has none of its own. */
export interface Ping {
  t: 'ping';
}
export interface Pong {
  t: 'pong';
  /** v8, only from a server whose hello had readLeaseMs: the read lease, in ms from when the ping was sent (0: none now). */
  leaseMs?: number;
  /** v9, with leaseMs: as the hello's configEpoch, now. */
  configEpoch?: number;
}
export interface GrantRequest {
  t: 'grant';
  /** size class index (size-classes.ts) */
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

/**
 * Blocks per grant request; a reply lists them all in one receive buffer (256 offsets take
 * at most 1,283 bytes of msgpack). 256, not 64: a grant's answer waits out the server's CQ
 * moderation (200 µs), so a client that asks at half a batch still has ~128 PUTs to run
 * before its pool is empty, and a PUT never waits for a grant's round trip.
 */
export const GRANT_BATCH = 256;
/** Most bytes one grant hands out (also at most 1/64 of the heap): see grantBatch. */
export const GRANT_BYTES = 1 << 20;

/**
 * Blocks of `blockBytes` one grant hands out: up to GRANT_BATCH, and no more than
 * min(GRANT_BYTES, heapBytes / 64) in all, but at least one. A batch saves a round trip per
 * PUT of small values; past 16 KiB blocks the value's own transfer outweighs that round
 * trip, and a batch of large blocks would only reserve memory other clients need (a 1 MiB
 * value's grant is that one block). With 1/64 of the heap, 64 clients' batches of one class
 * fit in it (a client holds up to two: the one it uses and the one it asked for ahead).
 */
export function grantBatch(blockBytes: number, heapBytes: number): number {
  const budget = Math.min(GRANT_BYTES, heapBytes / 64);
  return Math.min(GRANT_BATCH, Math.max(1, Math.floor(budget / blockBytes)));
}
/** Most blocks one 'return' message carries. */
export const RETURN_BATCH = 64;
