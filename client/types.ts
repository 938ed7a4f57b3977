// The client library's public types.
import type { Registry } from 'prom-client';

export type Key = Buffer | Uint8Array | string;
export type Value = Buffer | Uint8Array | string;

/**
 * KvClient.connect's options. A name not listed here is rejected with
 * KV_INVALID_ARGUMENT naming the option it most likely meant: a misspelled
 * option is a mistake, never a silent default.
 */
export interface KvClientOptions {
  /**
   * One server: shm:///path/to.sock or rdma://host:port (protocol/providers.ts
   * lists the schemes). Give exactly one of url, servers, etcd. @default undefined
   */
  url?: string;
  /**
   * A static cluster: the servers' URLs. Every client given the same set
   * builds the same slot map, whatever the order (docs/cluster.md). @default undefined
   */
  servers?: string[];
  /** A cluster whose members register in etcd (kv-server --etcd); the map follows them. @default undefined */
  etcd?: EtcdOptions;
  /**
   * One of the servers' tokens (kv-server --token, --token-file); undefined for servers without
   * one. A read token's client may get, getMany and getWithVersion; its writes reject with
   * KV_READ_ONLY (KvReadOnlyError) before anything is sent. @default undefined
   */
  token?: string;
  /**
   * The namespace the token opens (kv-server --namespace; a token opens exactly one). Given, the
   * server checks it: one that hosts no namespace of this name refuses with KV_NO_NAMESPACE
   * (KvNamespaceError), a token of another namespace with KV_AUTH. Not given: the token's
   * namespace, whatever it is. @default undefined
   */
  namespace?: string;
  /**
   * busy: poll the completion queue from a setImmediate loop while operations
   * are in flight (lowest latency, one core spins); event: sleep until the
   * queue's event fires (low CPU). @default 'busy'
   */
  pollMode?: 'busy' | 'event';
  /** Connecting, and each operation: positive ms, at most 2^31 - 1. @default 5000 */
  timeoutMs?: number;
  /** Reconnect in the background after losing a server. @default true */
  reconnect?: boolean;
  /**
   * true: connect() fails when no member can be reached. false: it resolves
   * once the member list is known, reachable or not, and keeps trying the
   * members in the background (status 'reconnecting'; their keys fail with
   * KV_DISCONNECTED until they are up). Monitoring (kvctl layout, watch) uses
   * false to show a cluster that is down or still starting. A wrong token or
   * protocol fails either way. @default true
   */
  requireReady?: boolean;
  /**
   * The client core's scratch memory, per server, registered once: bucket
   * images, atomics results and its buffer pool (item buffers); at most 2^32.
   * @default 16777216 (16 MiB)
   */
  scratchBytes?: number;
  /**
   * Entries of the location cache, per server: where the items of keys this
   * client read or wrote recently are, so a GET of such a key takes one READ
   * (the item, checked to be the key's current one) instead of two round trips.
   * 24 bytes each, in 4-way sets (the count is rounded down to a multiple of 4),
   * allocated once; 0 turns the cache off.
   * @default 262144, 6 MiB (KvLayout.DEFAULT_LOCATION_CACHE_ENTRIES)
   */
  locationCacheEntries?: number;
  /**
   * Records every operation's invocation and completion (for checking
   * linearizability): a JSONL file path, or a function given each event.
   * @default undefined (nothing is recorded)
   */
  history?: string | ((event: HistoryEvent) => void);
  /**
   * A prom-client Registry to count this client's operations in (by type and
   * result), time them (histograms), and count retries and lock contention.
   * Off by default: timing every operation costs two clock reads.
   * @default undefined (no metrics)
   */
  metrics?: Registry;
}

export interface EtcdOptions {
  /** etcd endpoints, e.g. 'http://127.0.0.1:2379' (a string may list several, comma-separated). Required. */
  hosts: string | string[];
  /** The cluster's key prefix (kv-server --etcd-prefix). @default '/rdma-kv' */
  prefix?: string;
}

/**
 * One line of a recorded history (a JSONL file, or the function's argument).
 * Values are UTF-8 text, or "base64:..." for other bytes; versions, tokens and
 * counters are decimal strings. Every invocation is followed by one 'ok' or
 * 'fail' with its id, unless the process died first (or a write of the
 * history failed: the client's 'error' event reports that).
 */
export interface HistoryEvent {
  type: 'invoke' | 'ok' | 'fail';
  /** The operation's number within this client. */
  id: number;
  f: 'get' | 'put' | 'delete' | 'cas' | 'incr' | 'lock' | 'unlock';
  key: string;
  /**
   * invoke: the value written (put, cas); ok: the value read (get), or the
   * result (delete, cas, unlock: boolean, unlock false when the lock was no
   * longer held with its token; incr: decimal)
   */
  value?: string | boolean | null;
  /** cas invoke: the version expected (decimal; "0": only if absent) */
  expected?: string;
  /** put and cas invoke with a TTL: the item's expiry, absolute Unix ms (decimal); from then on the key reads as absent */
  expiry?: string;
  /** unlock invoke: the fencing token given back (decimal) */
  token?: string;
  /** incr invoke: the delta added, as an unsigned 64-bit word (a negative d is 2^64 + d; counters count modulo 2^63) */
  delta?: string;
  /**
   * ok: get: the version read; put, and cas that wrote (value true): the
   * version written; lock: the fencing token.
   */
  version?: string;
  /** fail: the KvError code */
  error?: string;
  /**
   * fail: false when the request never left this client (still queued at its
   * deadline, at a disconnect or at close, or no heap block of its size was
   * left): it cannot have taken effect, and
   * a checker may drop it. Absent when the request was sent: it may have.
   */
  sent?: false;
  /** process.hrtime.bigint() in ns (CLOCK_MONOTONIC: comparable across processes of one host) */
  time: string;
}

/**
 * ready: every server connected; degraded: some are (keys of the others
 * fail fast with a retryable KV_DISCONNECTED); reconnecting: none is.
 */
export type KvStatusName = 'connecting' | 'ready' | 'degraded' | 'reconnecting' | 'closed';

export interface VersionedValue {
  value: Buffer;
  /** Changes with every write of the key (a CAS token). */
  version: bigint;
}

/** KvClient.stats(): counters since the client was created, summed over its servers. */
export interface ClientStats {
  /** GETs that reached a server's data path (found or not). */
  gets: number;
  /** GETs answered by one READ: location-cache hits. */
  oneRoundTripGets: number;
  locationCache: {
    hits: number;
    /** GETs with no usable entry: they took the two round trips. */
    misses: number;
    /** Entries whose READ failed a check (the item moved, changed, or was deleted): those GETs took the two round trips too. */
    validationFailures: number;
  };
}

/** One member of the current map, as `layout()` reports it. */
export interface MemberLayout {
  name: string;
  /** Where it listens now; undefined when etcd has no live registration for it. */
  url?: string;
  status: KvStatusName | 'down';
  /** How many of the 16,384 slots it owns. */
  slots: number;
}

/** KvClient's events. */
export type ClientEvents = {
  status: [status: KvStatusName];
  /** The slot map changed (members joined or left). */
  layout: [members: MemberLayout[]];
  /** A member's connection changed state. */
  member: [name: string, status: KvStatusName];
  error: [error: Error];
};
