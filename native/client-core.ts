// The client data path (native/kv/client_core.cc) over one or more
// connections of one provider that complete on one CQ, typed: the connection
// it was made with is connection 0, addConnection() adds more (a cluster's
// members), and each op names its connection (OpLayout.CONNECTION).
// One crossing per batch: the caller writes op descriptors (OpLayout words)
// into opWords and their keys and values into arena, then submit(n), which
// drives the round trips as far as they complete synchronously (on shm: to
// the end) and leaves the results of the ops that finished in resultWords
// (ResultLayout words; submittedResults says how many); poll() does the same
// for ops that finish later. GET values are in scratch, valid until the next
// poll() or submit(), and the
// completions of the caller's control requests (SENDs and RECVs whose wr_id
// has the KvLayout.CONTROL_TAG_SHIFT bit) in controlWords (ControlWords: a
// count, then WcLayout words, as readCompletion() reads them).
//
// Ownership: the core holds the provider, connection and CQ it was made with;
// whoever made it calls close() when done with it (the GC would too, but
// late). The buffers are viewed once here (each read of the addon's accessor
// makes a new external ArrayBuffer: per operation, garbage for V8 to collect).
// opWords, resultWords, controlWords and arena own their memory; scratch is
// the core's, and the addon makes every view of it share the core, so a view
// (a subarray included) never outlives the memory it shows.
import { type CoreOptions, type CoreRegion, type NativeClientCore, addon } from './addon.js';
import type { CompletionQueue } from './completion-queue.js';
import type { Connection } from './connection.js';
import { ControlWords, type KvStatus } from './constants.generated.js';
import type { Provider } from './provider.js';

export type { CoreOptions, CoreRegion };

/** ClientCore.locationStats(). */
export interface LocationStats {
  hits: number;
  misses: number;
  validationFailures: number;
}

/**
 * Memory for large values, registered with each core's provider the first time an op names it
 * (OpLayout.EXT_BUFFER = id). The Buffer stays valid after freeRegistered(id); ops naming the id
 * then fail with BAD_BUFFER.
 */
export function registeredBuffer(bytes: number): { id: number; buffer: Buffer } {
  const [id, memory] = addon.registeredBuffer(bytes);
  return { id, buffer: Buffer.from(memory) };
}
export function freeRegistered(id: number): boolean {
  return addon.freeRegistered(id);
}

export class ClientCore {
  /** Op descriptors for submit(), OpLayout words, Limit.MAX_POST_BATCH ops. */
  readonly opWords: Uint32Array;
  /** Results of the last poll(), ResultLayout words. */
  readonly resultWords: Uint32Array;
  /** copyValues()' list: CopyLayout words, Limit.MAX_POST_BATCH entries. */
  readonly copyWords: Uint32Array;
  /** Control completions of the last poll(): their count at ControlWords.COUNT, then WcLayout words from ControlWords.ENTRIES. */
  readonly controlWords: Uint32Array;
  /** Keys and values of the ops being submitted (OpLayout's offsets point here). */
  readonly arena: Buffer;
  /** The core's memory: GET values at the offsets poll() reports. Copy them out before the next poll() or submit(). */
  readonly scratch: Buffer;
  /** The largest item (header + key + value) scratch holds: larger values move only through registered buffers. */
  readonly itemLimit: number;
  readonly #native: NativeClientCore;
  readonly #handle: number; // the hot calls go by it (addon.coreSubmit & co.), the rest by #native

  constructor(provider: Provider, connection: Connection, cq: CompletionQueue, region: CoreRegion, options: CoreOptions) {
    this.#native = new addon.ClientCore(provider.native, connection.native, cq.native, region, options);
    this.opWords = this.#native.opWords;
    this.resultWords = this.#native.resultWords;
    this.copyWords = this.#native.copyWords;
    this.controlWords = this.#native.controlWords;
    this.arena = this.#native.arena;
    this.scratch = this.#native.scratch;
    this.itemLimit = this.#native.itemLimit;
    this.#handle = this.#native.handle;
  }

  /** Results the last submit() left in resultWords (its control completions: controlCount). */
  submittedResults = 0;

  /**
   * Takes the first `count` ops of opWords (while slots and scratch last) and
   * returns how many it took; the results of those that finished inside the
   * call are in resultWords (submittedResults of them). One doorbell per pass.
   */
  submit(count: number): number {
    const r = addon.coreSubmit(this.#handle, count);
    this.submittedResults = r >>> 16;
    return r & 0xffff;
  }
  /** Leaves finished ops' results in resultWords and returns how many; the control completions it took are in controlWords (controlCount). */
  poll(): number {
    return addon.corePoll(this.#handle);
  }
  /** Control completions the last poll() left in controlWords. */
  get controlCount(): number {
    return this.controlWords[ControlWords.COUNT]!;
  }
  /** Finishes every op it holds (or those of one connection) with `status` (their results come with the next poll()). */
  failAll(status: KvStatus, connection?: number): void {
    if (connection === undefined) this.#native.failAll(status);
    else this.#native.failAll(status, connection);
  }
  /**
   * Adds a connection of the core's provider whose requests complete on the core's CQ (made
   * with it): ops name it by the index returned. Throws when the core drives
   * KvLayout.MAX_CORE_CONNECTIONS already, the region cannot be served or the core is closed.
   */
  addConnection(provider: Provider, connection: Connection, region: CoreRegion): number {
    return this.#native.addConnection(provider.native, connection.native, region);
  }
  /**
   * Ends one connection's data path as close() ends the core's: its ops fail with DISCONNECTED
   * and it waits (up to `waitMs`) until its requests are done; then its index may be reused.
   */
  closeConnection(connection: number, waitMs?: number): boolean {
    return waitMs === undefined ? this.#native.closeConnection(connection) : this.#native.closeConnection(connection, waitMs);
  }
  /**
   * Entries [first, first + count) of copyWords (CopyLayout), each scratch[AT, AT + LENGTH) to
   * target[TARGET_START...]: a hand-out's GET values leave scratch in one call per target. The
   * target may be the ArrayBuffer of Buffers cut from one pool. Every range is checked before any is copied.
   */
  copyValues(target: Uint8Array | ArrayBuffer, first: number, count: number): void {
    addon.coreCopyValues(this.#handle, target, first, count);
  }
  /** The connection's read lease ends `ms` from now (negative: it has ended); GET and INCR answers handed over later end READ_LEASE_LAPSED. */
  permitReads(connection: number, ms: number): void {
    this.#native.permitReads(connection, Math.trunc(ms));
  }

  /** itemLimit for the server behind one connection (its --max-value). */
  connectionItemLimit(connection: number): number {
    return this.#native.connectionItemLimit(connection);
  }
  /** Connections in use (a native call: not for the hot path). */
  get connections(): number {
    return this.#native.connections;
  }
  /**
   * Ends the data path: fails the ops in flight with DISCONNECTED (the next
   * poll() hands their results out; later submits fail at once) and waits,
   * up to `waitMs` (default 2 s, blocking), until the NIC or provider can no
   * longer write scratch; after half of it, it disconnects the connection.
   * Returns whether that point was reached (false: scratch stays mapped for
   * good). Idempotent.
   */
  close(waitMs?: number): boolean {
    return waitMs === undefined ? this.#native.close() : this.#native.close(waitMs);
  }
  /**
   * The location cache's counts since the core was made: GETs answered by one READ (hits),
   * GETs with no usable entry (misses), entries whose READ failed a check (those GETs then
   * took the two round trips). Read on demand, not per operation.
   */
  locationStats(): LocationStats {
    const [hits, misses, validationFailures] = this.#native.locationStats();
    return { hits, misses, validationFailures };
  }
  /** Ops submitted and not yet handed back (a native call: not for the hot path). */
  get inflight(): number {
    return this.#native.inflight;
  }
  /** Ops waiting out a backoff (a held lock, a full ring): nothing of theirs is posted. */
  get backoffs(): number {
    return this.#native.backoffs;
  }

  /** post_send calls so far, over every connection. */
  get doorbells(): number {
    return this.#native.doorbells;
  }
}
