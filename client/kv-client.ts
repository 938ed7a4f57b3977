// The client library. A KvClient talks to one server or to a cluster: each
// key hashes to one of 16,384 slots, each slot belongs to one member
// (cluster/slots.ts), and each member has its own ServerClient and queue pair,
// all driven by one native core per provider (core-host.ts): operations issued
// in one tick go out as one submit, one doorbell per server. A member down fails its keys fast with a
// retryable KV_DISCONNECTED while the others keep serving.
import { EventEmitter } from 'node:events';
import { appendFileSync } from 'node:fs';

import { EtcdMembership, type Member, type MembershipSource, StaticMembership, clusterStatus, memberLayouts, slotDown } from './cluster/membership.js';
import { FailoverWaits } from './cluster/failover-waits.js';
import { configPrimaries, replicaSets } from './cluster/replica-sets.js';
import { CoreHosts } from './core-host.js';
import { SLOT_COUNT, assignSlots, keySlot } from '../protocol/hash-slots.js';
import { KvLayout, KvOp, KvStatus } from '../protocol/constants.js';
import { KvAuthError, KvDisconnectedError, KvError, KvInvalidArgumentError, KvNamespaceError, KvProtocolError } from '../protocol/errors.js';
import type { ClusterConfig } from '../protocol/registry.js';
import { keyBytes, show, toBuffer } from './keys.js';
import { allocBuffer, freeBuffer } from './large-values.js';
import { byServer, splitEntries } from './many.js';
import { ClientMetrics } from './metrics.js';
import { casVersion, checkOptions, incrDelta } from './options.js';
import { type PutOptions, attempt, expiryAfter, putExpiry, rewriteItem, setExpiry, ttlOf } from './expiry.js';
import type { RepairAccess } from './repair.js';
import { takeLock } from './locks.js';
import { type HistoryRecorder, historyRecorder } from './history.js';
import type { OpResult } from './op-queue.js';
import { type Bytes, runCas, runGet, runGetInto, runGetVersioned, runPut, ServerClient } from './server-client.js';
import type { ClientEvents, ClientStats, HistoryEvent, Key, KvClientOptions, KvStatusName, MemberLayout, Value, VersionedValue } from './types.js';

export type { PutOptions } from './expiry.js';
export type { ClientStats, HistoryEvent, Key, KvClientOptions, KvStatusName, MemberLayout, Value, VersionedValue } from './types.js';

export class KvClient extends EventEmitter<ClientEvents> {
  private _status: KvStatusName = 'connecting';
  private source!: MembershipSource;
  /** By member name; a member without an address has none. */
  private readonly servers = new Map<string, ServerClient>();
  private members: string[] = [];
  private urls = new Map<string, string | undefined>();
  private owner: Uint16Array = new Uint16Array(SLOT_COUNT);
  private configOwner: { config: ClusterConfig; members: string[]; owner: Uint16Array } | undefined;
  /** servers by member index, for the hot path. */
  private byIndex: Array<ServerClient | undefined> = [];
  /** With a config (etcd, any --replicas): by hash slot, its replica set (cluster/replica-sets.ts). */
  private replicaSets: Array<ServerClient | KvError> | undefined;
  /** A one-server client skips hashing. */
  private only: ServerClient | undefined;
  private readonly recorder: HistoryRecorder | undefined;
  private readonly metrics: ClientMetrics | undefined;
  private unwatchMetrics: (() => void) | undefined;
  private closing: Promise<void> | undefined;
  private readonly failover: FailoverWaits; // with a config: ops waiting out a failover, a handoff or a member down
  private readonly hosts: CoreHosts;

  private constructor(private readonly options: KvClientOptions) {
    super();
    this.hosts = new CoreHosts({ ...options, timeoutMs: Math.ceil(options.timeoutMs ?? 5000) }); // the transport takes whole ms
    if (options.history !== undefined) this.recorder = historyRecorder(options.history, (error) => this.warn(error));
    this.failover = new FailoverWaits(options.timeoutMs ?? 5000, () => this._status === 'closed');
    if (options.metrics) {
      this.metrics = new ClientMetrics(options.metrics);
      this.unwatchMetrics = this.metrics.watchServers(() => this.members.map((name) => this.servers.get(name)?.status ?? 'down'), () => this.stats(), () => this.hosts.retried());
    }
  }

  /**
   * Connects to the server (`url`), or to the cluster (`servers`, `etcd`), and resolves when operations can be issued:
   * every member has been tried and at least one is ready (with requireReady: false, also when none is). Members that
   * could not be reached are retried in the background; until then their keys fail with KV_DISCONNECTED. Bad options,
   * and an rdma:// URL without a usable verbs provider (a build without rdma-core, a host without an RDMA device),
   * reject with KV_INVALID_ARGUMENT.
   */
  static async connect(options: KvClientOptions): Promise<KvClient> {
    checkOptions(options);
    const client = new KvClient(options);
    try {
      await client.start();
    } catch (error) {
      await client.close();
      throw error;
    }
    return client;
  }

  get status(): KvStatusName {
    return this._status;
  }

  /** Counters since the client was created, over every server it had (read on demand). */
  stats(): ClientStats {
    const locationCache = this.hosts.locationStats();
    const gets = locationCache.hits + locationCache.misses + locationCache.validationFailures;
    return { gets, oneRoundTripGets: locationCache.hits, locationCache };
  }

  /** The largest value every connected server accepts, in bytes. */
  get maxValueBytes(): number {
    const limits = [...this.servers.values()].flatMap((s) => (s.maxValueBytes === undefined ? [] : [s.maxValueBytes]));
    return limits.length > 0 ? Math.min(...limits) : KvLayout.DEFAULT_MAX_VALUE_BYTES;
  }

  /** The slot map: each member, where it is, its state and its share of slots. */
  layout(): MemberLayout[] {
    return memberLayouts(this.members, this.primaries(), (name) => this.servers.get(name)?.status, this.urls);
  }

  /** The member that holds `key` (its name; with a config, its hash slot's primary), or undefined in an empty cluster. */
  memberFor(key: Key): string | undefined {
    return this.members[this.primaries()[keySlot(toBuffer(key, 'key'))]!];
  }

  /** By hash slot, the index in `members` of the member serving it (cluster/replica-sets.ts), kept per config and member list. */
  private primaries(): Uint16Array {
    const config = this.source?.config;
    if (config === undefined) return this.owner;
    if (this.configOwner?.config !== config || this.configOwner.members !== this.members) this.configOwner = { config, members: this.members, owner: configPrimaries(config, this.members, this.owner) };
    return this.configOwner.owner;
  }

  // ---- membership ------------------------------------------------------------------------

  /** Problems that do not stop the client: 'error' listeners hear them; without one they are dropped, not thrown. */
  private warn(error: Error): void {
    if (this.listenerCount('error') > 0) this.emit('error', error);
  }

  private async start(): Promise<void> {
    const timeoutMs = this.options.timeoutMs ?? 5000;
    if (this.options.etcd) {
      this.source = await EtcdMembership.open(this.options.etcd, timeoutMs, (error) => this.warn(error));
    } else {
      this.source = new StaticMembership(this.options.servers ?? [this.options.url!]);
    }
    this.source.on('error', (error) => this.warn(error));
    const starting = this.apply(this.source.members);
    if (this.options.etcd) {
      this.source.on('change', (members) => {
        if (this._status !== 'closed') void this.apply(members);
      });
      this.source.on('config', () => {
        if (this._status !== 'closed') this.placeReplicas();
      });
    }
    const results = await Promise.allSettled(starting);
    const failures = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as Error] : []));
    // A wrong token or protocol is a configuration error: no point retrying.
    const fatal = failures.find((e) => e instanceof KvAuthError || e instanceof KvProtocolError || e instanceof KvInvalidArgumentError || e instanceof KvNamespaceError);
    if (fatal) throw fatal;
    if (this.options.requireReady !== false && ![...this.servers.values()].some((s) => s.status === 'ready')) {
      if (failures.length === 1 && this.members.length === 1) throw failures[0]!;
      const why = failures.length > 0 ? `: ${failures.map((e) => e.message).join('; ')}` : '';
      const where = this.options.etcd ? ` under etcd prefix ${this.options.etcd.prefix ?? '/rdma-kv'}` : '';
      throw new KvDisconnectedError(`no server of the cluster${where} is reachable (${this.members.length} members)${why}`);
    }
    for (const server of this.servers.values()) {
      if (server.status !== 'ready' && this.options.reconnect !== false) server.keepTrying();
    }
    this._status = 'reconnecting'; // connected: from here on the members decide
    this.updateStatus();
  }

  /** Rebuilds the map for a member list; returns the first connection attempts of new servers. */
  private apply(members: Member[]): Array<Promise<void>> {
    const names = members.map((m) => m.name);
    const changed = names.length !== this.members.length || names.some((n) => !this.urls.has(n));
    if (changed) {
      const { members: sorted, owner } = assignSlots(names);
      this.members = sorted;
      this.owner = owner;
    }
    const starting: Array<Promise<void>> = [];
    const urls = new Map<string, string | undefined>();
    for (const { name, url } of members) {
      urls.set(name, url);
      const current = this.servers.get(name);
      // No address: a live connection (say, etcd is what failed) keeps serving.
      if (!url) continue;
      if (current && current.url === url) {
        current.reconnectNow();
        continue;
      }
      if (current) void current.close();
      starting.push(this.open(name, url));
    }
    for (const [name, server] of this.servers) {
      if (!urls.has(name)) {
        this.servers.delete(name);
        void server.close();
      }
    }
    this.urls = urls;
    this.byIndex = this.members.map((name) => this.servers.get(name));
    this.placeReplicas();
    this.only = this.members.length === 1 && !this.options.etcd ? this.byIndex[0] : undefined;
    if (changed && this._status !== 'connecting') this.emit('layout', this.layout());
    this.updateStatus();
    return starting;
  }

  private open(name: string, url: string): Promise<void> {
    const { servers: _s, etcd: _e, history: _h, metrics: _m, ...rest } = this.options;
    // A replica's read lease counts only for a config as new as the one it applied (protocol v9).
    const etcd = this.source instanceof EtcdMembership ? this.source : undefined;
    const config = etcd ? { configEpoch: () => etcd.config?.epoch ?? 0, configBehind: () => etcd.refreshConfig() } : {};
    const server = new ServerClient({ ...rest, ...config, url, hosts: this.hosts, ...(this.recorder ? { recorder: this.recorder } : {}) });
    this.servers.set(name, server);
    server.on('status', (status) => {
      if (this.servers.get(name) !== server) return;
      this.emit('member', name, status);
      this.updateStatus();
      this.failover.changed();
    });
    server.on('error', (error) => this.warn(error));
    const first = server.start();
    // Always handled: a member that joins while connect() is under way is not among those connect() awaits. One
    // that fails once connect() has returned (or that joined later) keeps trying; connect() sends the others.
    first.catch(() => {
      if (this._status !== 'connecting' && this.servers.get(name) === server && this.options.reconnect !== false) server.keepTrying();
    });
    return first;
  }

  /** Routes by the config's replica sets when it has more than one replica; else by the member list alone. */
  private placeReplicas(): void {
    this.replicaSets = replicaSets(this.source.config, this.servers);
    this.failover.changed();
  }

  private updateStatus(): void {
    if (this._status === 'closed' || this._status === 'connecting') return;
    const status = clusterStatus(this.members, (name) => this.servers.get(name)?.status);
    if (status === this._status) return;
    this._status = status;
    this.emit('status', status);
  }

  // ---- operations ------------------------------------------------------------------------

  /** The value, or undefined when the key does not exist. */
  get(key: Key): Promise<Buffer | undefined> {
    const pending = this.direct(KvOp.GET, key, undefined, runGet);
    return this.metrics ? this.metrics.observeValue(KvOp.GET, pending) : pending;
  }

  /** The value with its version (a CAS token), or undefined. */
  getWithVersion(key: Key): Promise<VersionedValue | undefined> {
    const pending = this.direct(KvOp.GET, key, undefined, runGetVersioned);
    return this.metrics ? this.metrics.observeValue(KvOp.GET, pending) : pending;
  }

  /** Writes the value; with `ttlMs` (whole ms, 1 to 100 years) the key expires that long after the call: reads miss it from then on. */
  put(key: Key, value: Value, options?: PutOptions): Promise<void> {
    const expiry = options === undefined ? 0 : attempt(putExpiry, options, 'put');
    if (expiry instanceof Error) return Promise.reject(expiry);
    const pending = this.direct(KvOp.PUT, key, value, runPut, expiry);
    return this.metrics ? this.metrics.observeValue(KvOp.PUT, pending) : pending;
  }

  /** Gives the key's current value a TTL (as put's ttlMs) by rewriting its item (a CAS: a racing write is never undone). True if the key existed. */
  expire(key: Key, ttlMs: number): Promise<boolean> {
    const expiry = attempt(expiryAfter, ttlMs, 'expire');
    if (expiry instanceof Error) return Promise.reject(expiry);
    return this.direct(KvOp.CAS, key, undefined, (server, k) => setExpiry(server, k, expiry, false));
  }

  /** Removes the key's TTL (rewriting its item, as expire). True if it had one; false if it had none or does not exist. */
  persist(key: Key): Promise<boolean> {
    return this.direct(KvOp.CAS, key, undefined, (server, k) => setExpiry(server, k, 0, true));
  }

  /** The ms the key has left (at least 1); Infinity: no TTL, it never expires; undefined: absent or expired (as get). Counters and locks never expire: KV_TYPE_MISMATCH, as get() of one. */
  ttl(key: Key): Promise<number | undefined> {
    return this.direct(KvOp.GET, key, undefined, ttlOf);
  }

  /** The value into `buffer` (no copy if allocBuffer's): its length, or undefined if absent (as get); too long: KV_BUFFER_TOO_SMALL with `needed`. */
  getInto(key: Key, buffer: Buffer): Promise<number | undefined> {
    const pending = this.direct(KvOp.GET, key, buffer, runGetInto);
    return this.metrics ? this.metrics.observeValue(KvOp.GET, pending) : pending;
  }
  /** A registered, reusable buffer for large values: getInto() reads into it, put() writes from it (or a subarray), no copy. */
  allocBuffer = allocBuffer;
  /** Ends an allocBuffer's registration (after the ops in flight on it); later ops on it reject with KV_BAD_BUFFER. */
  freeBuffer = freeBuffer;

  /** Repair's copier (server/replication/copier.ts, client/repair.ts); not for applications. */
  repairAccess(): RepairAccess {
    return { configEpoch: () => (this.source instanceof EtcdMembership ? this.source.config?.epoch : undefined), rewrite: (key) => this.direct(KvOp.CAS, key, undefined, rewriteItem), member: (name) => this.servers.get(name) };
  }

  /** Resolves true when the key existed. */
  delete(key: Key): Promise<boolean> {
    return this.call(KvOp.DELETE, key).then((r) => r.status === KvStatus.OK);
  }

  /**
   * Writes `value` only if the key's current version is `expectedVersion`
   * (from getWithVersion); `0n` means "only if the key does not exist".
   * Resolves false when the version did not match. The version is a bigint
   * (an unsigned 64-bit CAS token); a number is accepted when it is a safe
   * non-negative integer. Anything else, undefined included, rejects with
   * KV_INVALID_ARGUMENT: "only if absent" must be asked for with 0n.
   */
  cas(key: Key, expectedVersion: bigint | number, value: Value): Promise<boolean> {
    const expected = attempt(casVersion, expectedVersion, undefined);
    if (expected instanceof Error) return Promise.reject(expected);
    const pending = this.direct(KvOp.CAS, key, value, runCas, expected);
    return this.metrics ? this.metrics.observeValue(KvOp.CAS, pending) : pending;
  }

  /**
   * Adds `delta` to a counter with one RDMA FETCH_AND_ADD (executed by the server's NIC, not its CPU) and resolves
   * the new value. A missing counter is created at `delta`. Counters are unsigned and wrap modulo 2^63 (protocol v2);
   * a negative delta subtracts. `delta` is a bigint of magnitude below 2^64, or a safe integer number; anything else
   * rejects with KV_INVALID_ARGUMENT.
   */
  incr(key: Key, delta: bigint | number = 1n): Promise<bigint> {
    const d = attempt(incrDelta, delta, undefined);
    if (d instanceof Error) return Promise.reject(d);
    return this.call(KvOp.INCR, key, undefined, BigInt.asUintN(64, d)).then((r) => r.version);
  }

  /**
   * Takes a distributed lock (an RDMA compare-and-swap on a lock item) and resolves with its fencing token, which
   * grows with every acquisition of this lock: pass it to whatever the lock protects so a holder that lost the lock
   * (it stalled and was fenced) can be refused there. Rejects with KV_LOCK_CONTENDED after `timeoutMs` (default: the
   * client's timeoutMs), a positive number of ms; Infinity, or anything above 2^31 − 1 ms (24.8 days), waits that
   * long: in effect without a timeout. `release()` resolves once the lock is given back; if that failed (the lock
   * was lost, or the client closed), it rejects, and so does every later call of it.
   */
  lock(name: Key, options: { timeoutMs?: number } = {}): Promise<{ token: bigint; release: () => Promise<void> }> {
    return takeLock(name, options, this.options.timeoutMs ?? 5000, (key) => {
      // Replicated: the lock lives on its hash slot's replicas, whichever is primary now: both ops route by the
      // current config and wait out a failover, as writes do. Else it is released on the server that granted it.
      const server = this.replicaSets && this._status !== 'closed' ? undefined : this.serverFor(key);
      return (type, arg, mm) => (server ? this.send(server, type, key, undefined, arg, mm) : this.failover.run(type, key, undefined, this.routeKey, (s, k) => this.send(s, type, k as Buffer, undefined, arg, mm)));
    });
  }

  /**
   * Reads many keys in order (a missing key: undefined): one batch per server, one
   * promise; values are views of one Buffer per hand-out of the core's results (the keys of
   * one poll, at most KvLayout.MAX_INFLIGHT; getMany calls of the same tick may share it). A bad key
   * rejects the call before anything is sent; a failed read rejects it with its error.
   */
  getMany(keys: Key[]): Promise<Array<Buffer | undefined>> {
    let bytes: Bytes[];
    try {
      if (!Array.isArray(keys)) throw new KvInvalidArgumentError('getMany needs an array of keys');
      bytes = new Array<Bytes>(keys.length); // not map(): it skips the holes of a sparse array
      for (let i = 0; i < keys.length; i++) bytes[i] = keyBytes(keys[i], 'key');
    } catch (error) {
      return Promise.reject(error);
    }
    const out = new Array<Buffer | undefined>(bytes.length).fill(undefined);
    const pending = (this.replicaSets ? this.failover.getMany(bytes, this.routeKey, (s, part, positions) => s.getMany(part, out, positions), (s, k, i) => s.getValue(k).then((v) => void (out[i] = v))) : byServer(bytes, this.only, (k) => this.route(k), (server, keys, positions) => server.getMany(keys, out, positions))).then(() => out);
    return this.metrics ? this.metrics.observeMany(KvOp.GET, bytes.length, pending, out) : pending;
  }

  /** Writes many keys (an entry may carry put's options: [key, value, { ttlMs }]): one batch per server, one promise. A malformed entry or TTL rejects the call before anything is written. */
  putMany(entries: Array<[Key, Value] | [Key, Value, PutOptions]>): Promise<void> {
    let keys: Bytes[];
    let values: Bytes[];
    let expiries: Float64Array | undefined;
    try {
      [keys, values, expiries] = splitEntries(entries);
    } catch (error) {
      return Promise.reject(error);
    }
    const pending = this.replicaSets ? this.failover.each(KvOp.PUT, keys, (k) => this.route(k), (s, k, i) => s.putValue(k, values[i]!, expiries?.[i] ?? 0)) : byServer(keys, this.only, (k) => this.route(k), (server, part, positions) => server.putMany(part, positions ? Array.from(positions, (p) => values[p]!) : values, expiries && positions ? Float64Array.from(positions, (p) => expiries[p]!) : expiries)).then(() => undefined);
    return this.metrics ? this.metrics.observeMany(KvOp.PUT, keys.length, pending) : pending;
  }

  /** get and put without a result object or a then() between caller and queue (`type`: what the op is, for a failover's retries). */
  // `run` gets `arg` (an expiry, a version) as a parameter: a closure over it would cost every call a context.
  private direct<T, A = undefined>(type: KvOp, key: Key, value: Value | undefined, run: (server: ServerClient, key: Bytes, value: Value | undefined, arg: A) => Promise<T>, arg?: A): Promise<T> {
    let bytes: Bytes;
    let server: ServerClient | KvError;
    try {
      bytes = keyBytes(key, 'key');
      if (this.replicaSets) return this.failover.run(type, bytes, value, this.routeKey, run, arg);
      server = this.route(bytes);
    } catch (error) {
      return Promise.reject(error);
    }
    return server instanceof ServerClient ? run(server, bytes, value, arg!) : Promise.reject(server);
  }

  /** route(), made once: FailoverWaits calls it per op. */
  private readonly routeKey = (key: Bytes) => this.route(key);

  /** The key's server (a string is hashed as its UTF-8 bytes). */
  private route(key: Bytes): ServerClient | KvError {
    return this.only && this._status !== 'closed' ? this.only : this.serverFor(typeof key === 'string' ? Buffer.from(key, 'utf8') : key);
  }

  private call(type: KvOp, key: Key, value?: Value, arg = 0n, mismatchResolves = false): Promise<OpResult> {
    let keyBytes: Buffer;
    let valueBytes: Buffer | undefined;
    let server: ServerClient | KvError;
    try {
      keyBytes = toBuffer(key, 'key');
      if (type === KvOp.PUT || type === KvOp.CAS) valueBytes = toBuffer(value, 'value');
      if (this.replicaSets && this._status !== 'closed') return this.failover.run(type, keyBytes, valueBytes, this.routeKey, (s, k, v) => this.send(s, type, k as Buffer, v, arg, mismatchResolves));
      server = this.serverFor(keyBytes);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.send(server, type, keyBytes, valueBytes, arg, mismatchResolves);
  }

  private send(server: ServerClient | KvError, type: KvOp, key: Buffer, value?: Value, arg = 0n, mismatchResolves = false): Promise<OpResult> {
    const pending = server instanceof ServerClient ? server.submit(type, key, value, arg, mismatchResolves) : Promise.reject(server);
    return this.metrics ? this.metrics.observe(type, pending) : pending;
  }

  /** The key's server, or the error its operations get. */
  private serverFor(key: Buffer): ServerClient | KvError {
    if (this._status === 'closed') return new KvDisconnectedError('the client is closed');
    if (this.only) return this.only;
    const slot = keySlot(key);
    if (this.replicaSets) return this.replicaSets[slot]!;
    const member = this.owner[slot]!;
    const server = this.byIndex[member];
    if (server) return server;
    return slotDown(slot, this.members[member]);
  }

  // ---- close -----------------------------------------------------------------------------

  /** Waits for operations in flight, gives unused blocks back, disconnects. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    this._status = 'closed';
    this.emit('status', 'closed');
    this.unwatchMetrics?.();
    await this.source?.close();
    await Promise.all([...this.servers.values()].map((s) => s.close()));
    this.hosts.close(); // the provider goes once the last session has (a replaced server's may still be closing)
  }
}

export { KvError };
