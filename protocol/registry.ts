// The cluster registry in etcd: the keys kv-server writes (server/membership.ts)
// and clients and kvctl read (client/cluster/membership.ts, tools/kvctl).
// Membership and liveness are separate keys on purpose:
//   <prefix>/members/<name>  no lease: the member owns its hash slots until an
//                            operator removes it (kvctl forget)
//   <prefix>/alive/<name>    under the server's lease: its URL while it runs
// With --replicas 1, a member whose lease expired keeps its hash slots (its keys
// are in its region file, nowhere else), so they fail fast with KV_DISCONNECTED
// instead of silently moving to a server that does not hold them; with more,
// the controller fails it over to its backups (server/replication/controller.ts).
// Two more keys place the hash slots (server/replication/):
//   <prefix>/controller      under the controller's own alive lease: which
//                            member writes config (gone with its lease)
//   <prefix>/config          no lease: each hash slot's replicas and epoch,
//                            written only by the controller, by a transaction
//                            conditioned on the key's mod_revision
import { Etcd3, type Watcher } from 'etcd3';

import { KvInvalidArgumentError, KvProtocolError } from './errors.js';
import { decodeClusterConfig } from './config-codec.js';
import { SLOT_COUNT } from './hash-slots.js';

export const DEFAULT_ETCD_PREFIX = '/rdma-kv';

/** What kv-server writes under <prefix>/alive/<name>. */
export interface AliveRecord {
  url: string;
  pid: number;
  host: string;
  started: string;
  /** Its metrics HTTP base URL (kv-server --metrics-port), for kvctl. */
  metrics?: string;
}

/** What kv-server writes under <prefix>/members/<name>. */
export interface MemberRecord {
  name: string;
  joined: string;
  /** Its --replicas (absent in records written before configs existed: 1). */
  replicas?: number;
  /** Its --zone, a failure domain (absent: its own). */
  zone?: string;
}

/** --replicas accepts 1 to this. */
export const MAX_REPLICAS = 3;

/** A run of consecutive hash slots with the same replicas and epoch. */
export interface SlotRange {
  /** First and last hash slot, inclusive. */
  from: number;
  to: number;
  /** Indices into ClusterConfig.members; [0] is the primary, the rest backups. */
  replicas: number[];
  /** Members being filled (step 7 of docs/replication-design.md; empty until then). */
  syncing: number[];
  /** The config epoch at which these replicas were last changed. */
  epoch: number;
}

/** What the controller writes under <prefix>/config: every hash slot in exactly one range, in order. */
export interface ClusterConfig {
  /** Bumped by every change of any hash slot's replicas; never reused. */
  epoch: number;
  replicas: number;
  /** Member names, sorted. */
  members: string[];
  slots: SlotRange[];
}

/**
 * What <prefix>/drain/<name> holds (docs/cluster.md, "Draining a member"). `copying`: kvctl drain
 * wrote it; members sync into the hash slots it holds. `quiesce`: the controller saw every copy
 * done; the member stops granting read leases. `quiet`: the member says every lease it granted
 * has ended; the controller gives its hash slots to their copies at a new epoch.
 */
export interface DrainRecord {
  since: string;
  phase: 'copying' | 'quiesce' | 'quiet';
  /** kvctl drain --max-mbps: while the drain runs, each copying member copies at most this many bytes a second (absent or 0: no cap). */
  maxBytesPerSecond?: number;
}

/** A drain record read from etcd, or undefined when it is not one (treated as `copying`: the member is still leaving). */
export function parseDrainRecord(text: string): DrainRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<DrainRecord> | null;
    if (r && typeof r === 'object' && typeof r.since === 'string' && (r.phase === 'copying' || r.phase === 'quiesce' || r.phase === 'quiet')) {
      const cap = r.maxBytesPerSecond;
      // A cap that is not a rate is left out: the drain goes on at the members' own rate.
      return { since: r.since, phase: r.phase, ...(typeof cap === 'number' && Number.isFinite(cap) && cap > 0 ? { maxBytesPerSecond: cap } : {}) };
    }
  } catch {
    // not JSON
  }
  return undefined;
}

/**
 * What <prefix>/handoff/<name> holds (docs/cluster.md, "Rebalancing"): a rebalance moves some hash
 * slots' primary away from that member while it keeps others. `quiesce`: the controller saw the
 * copies of all of them done; the member stops granting read leases. `quiet`: every lease it
 * granted has ended. `moved`: the controller gave them to their new primaries at config `epoch`;
 * the member grants leases again once it has applied that epoch, and then removes the record.
 */
export interface HandoffRecord {
  since: string;
  phase: 'quiesce' | 'quiet' | 'moved';
  /** With `moved`: the epoch of the config that moved them. */
  epoch?: number;
}

/** A handoff record read from etcd, or undefined when it is not one (treated as `quiesce`: no lease is granted on a record nobody can read). */
export function parseHandoffRecord(text: string): HandoffRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<HandoffRecord> | null;
    if (!r || typeof r !== 'object' || typeof r.since !== 'string') return undefined;
    if (r.phase === 'quiesce' || r.phase === 'quiet') return { since: r.since, phase: r.phase };
    if (r.phase === 'moved' && Number.isInteger(r.epoch) && r.epoch! >= 0) return { since: r.since, phase: 'moved', epoch: r.epoch! };
  } catch {
    // not JSON
  }
  return undefined;
}

/** What the controller key holds (its lease says more: it is the holder's alive lease). */
export interface ControllerRecord {
  name: string;
  since: string;
}

/** Why `prefix` cannot be a cluster's etcd prefix (kv-server and kvctl --etcd-prefix), or undefined. */
export function etcdPrefixProblem(prefix: string): string | undefined {
  if (!prefix.startsWith('/') || prefix.length < 2) return 'expected an absolute key prefix such as /rdma-kv';
  // <prefix>.load/ holds the cluster <prefix>'s load records: a cluster there would share keys with them.
  if (/\.load(\/|$)/.test(prefix)) return "a prefix may not end in '.load', nor have a part that does (the cluster at the prefix without it keeps its load records there)";
  return undefined;
}

export const etcdKeys = (prefix: string) => {
  const root = prefix.replace(/\/+$/, '');
  return {
    /** Everything of this cluster but its load records (below): read and watch this. */
    root: `${root}/`,
    members: `${root}/members/`,
    alive: `${root}/alive/`,
    config: `${root}/config`,
    controller: `${root}/controller`,
    /** Present once placement is frozen (FrozenRecord): it is never recomputed from members/ again (controller.ts). */
    frozen: `${root}/frozen`,
    /** repair/<target>/<primary>: what that primary's copier has copied to that target (RepairRecord). */
    repair: `${root}/repair/`,
    repairKey: (target: string, primary: string) => `${root}/repair/${target}/${primary}`,
    /** drain/<name>: an operator asked that member to give every hash slot away (DrainRecord; kvctl drain). */
    drain: `${root}/drain/`,
    drainKey: (name: string) => `${root}/drain/${name}`,
    /** A rebalance in progress (kvctl rebalance): the placement it moves to, stored as config is (config-codec.ts). */
    target: `${root}/target`,
    /** handoff/<name>: a rebalance moves hash slots' primary away from that member (HandoffRecord). */
    handoff: `${root}/handoff/`,
    handoffKey: (name: string) => `${root}/handoff/${name}`,
    /**
     * <prefix>.load/<name>: the keys and bytes that member holds per hash slot (LoadRecord; kvctl
     * rebalance --by bytes, and the controller before a direct placement). Beside the prefix, not
     * under it: tens of KB each, they would ride every client's and member's watch of the prefix.
     */
    load: `${root}.load/`,
    loadKey: (name: string) => `${root}.load/${name}`,
    /** progress/<name>: the copy that member's copier is making, under its lease (CopyProgress; kvctl rebalance --wait reads it). */
    progress: `${root}/progress/`,
    progressKey: (name: string) => `${root}/progress/${name}`,
    /** A cap on each copier's rate while a rebalance runs (CopyRateRecord; kvctl rebalance --max-mbps; gone with the target). */
    copyRate: `${root}/copy-rate`,
    /** Present: the controller starts a rebalance itself when a member joins the frozen cluster (kvctl rebalance --auto on). */
    autoRebalance: `${root}/auto-rebalance`,
    member: (name: string) => `${root}/members/${name}`,
    aliveKey: (name: string) => `${root}/alive/${name}`,
  };
};

/**
 * A config read from etcd (stored as config-codec.ts says), checked: every hash slot covered once, in order, by ranges naming
 * members that exist; throws KvProtocolError saying what is wrong (a reader must not route by it).
 */
export function parseClusterConfig(text: string): ClusterConfig {
  const config = decodeClusterConfig(text);
  const count = (v: unknown, min: number, max: number) => Number.isInteger(v) && (v as number) >= min && (v as number) <= max;
  if (!count(config.epoch, 0, 0xffffffff) || !count(config.replicas, 1, MAX_REPLICAS) ||
    !Array.isArray(config.members) || !config.members.every((m) => typeof m === 'string')) {
    throw new KvProtocolError('etcd: config lacks epoch, replicas, members or slots');
  }
  let next = 0;
  for (const r of config.slots) {
    const indices = (list: unknown) => Array.isArray(list) && list.every((i) => count(i, 0, config.members.length - 1));
    if (r === null || typeof r !== 'object' || r.from !== next || !count(r.to, r.from, SLOT_COUNT - 1) || !indices(r.replicas) || r.replicas.length === 0 || !indices(r.syncing) || !count(r.epoch, 0, config.epoch)) {
      throw new KvProtocolError(`etcd: config's range starting at hash slot ${next} is malformed`);
    }
    next = r.to + 1;
  }
  if (next !== SLOT_COUNT) throw new KvProtocolError(`etcd: config covers hash slots up to ${next - 1} only`);
  return config;
}

/** The members `config` lists that hold no hash slot: failed over (docs/cluster.md, "Failover"), so what their regions hold is stale. */
export function removedMembers(config: ClusterConfig): string[] {
  const used = new Set(config.slots.flatMap((range) => [...range.replicas, ...range.syncing]));
  return config.members.filter((_, i) => !used.has(i));
}

/** repair/<target>/<primary>: hash slot ranges `primary` has copied to `target`, each as of its epoch. */
export interface RepairRecord {
  copied: Array<{ from: number; to: number; epoch: number }>;
  /** Items and bytes copied for them. */
  items: number;
  bytes: number;
  at: string;
}

/** Hash slots `name` holds in `config`: as a replica (primary or backup) or syncing. */
export function slotsHeld(config: ClusterConfig | undefined, name: string): number {
  const index = config?.members.indexOf(name) ?? -1;
  if (index < 0) return 0;
  return config!.slots.reduce((n, r) => (r.replicas.includes(index) || r.syncing.includes(index) ? n + r.to - r.from + 1 : n), 0);
}

/** Hash slots with fewer replicas than config.replicas (a failover, or fewer zones than replicas). */
export function underReplicatedSlots(config: ClusterConfig): number {
  return config.slots.reduce((n, r) => (r.replicas.length < config.replicas ? n + r.to - r.from + 1 : n), 0);
}

/** A member name becomes part of etcd keys: keep it to a safe alphabet. */
export function checkMemberName(name: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/.test(name)) {
    throw new KvInvalidArgumentError(`member name '${name}': use 1-128 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit`);
  }
  return name;
}

/**
 * An etcd client whose every unary call has a deadline (etcd3 alone retries a dead endpoint for long).
 * `pinged` (clients, which hold watches and no lease): its connection is pinged while a call (the
 * watch) is open, and a link that stays up and carries nothing (a partition dropping packets) is closed
 * after at most KEEPALIVE_MS + KEEPALIVE_TIMEOUT_MS. That fails the watch (it is set up again) instead of
 * leaving it silent for good, and lets a closed client's process exit (closing an etcd3 client does not
 * end a call still open). Members are not pinged: a ping unanswered for a stall of their own (an
 * emulated guest's) would break their lease's keepalive stream too.
 */
export function openEtcd(hosts: string[], timeoutMs: number, pinged = false): Etcd3 {
  return new Etcd3({
    hosts,
    dialTimeout: timeoutMs,
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + timeoutMs }),
    ...(pinged ? { grpcOptions: { 'grpc.keepalive_time_ms': KEEPALIVE_MS, 'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS } } : {}),
  });
}

/** etcd refuses pings more often than every 5 s (its --grpc-keepalive-min-time) with a GOAWAY. */
const KEEPALIVE_MS = 10_000;
const KEEPALIVE_TIMEOUT_MS = 10_000;

/** How long cancelWatch waits for etcd to confirm. */
const CANCEL_WAIT_MS = 1000;

/**
 * Cancels a watch, waiting CANCEL_WAIT_MS at most for etcd to confirm it: etcd3 waits for good, and
 * an etcd that takes requests in and never answers (a partition dropping packets) kept a client's
 * close() waiting with it. The confirmation is a courtesy: closing the client ends the watch's stream.
 */
export async function cancelWatch(watcher: Watcher | undefined): Promise<void> {
  if (!watcher) return;
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<void>((resolve) => (timer = setTimeout(resolve, CANCEL_WAIT_MS)));
  await Promise.race([watcher.cancel().catch(() => undefined), waited]);
  clearTimeout(timer);
}

/**
 * progress/<name>: that member's copier (copier.ts): its last copy, put at its start, about once a
 * second while it runs and at its end, and what it copied since the member started.
 */
export interface CopyProgress {
  /** The config epoch it copies for. */
  epoch: number;
  /** Whether that copy is still under way. */
  running: boolean;
  /** Keys found to copy so far (the walk of each namespace adds its own), and of them copied or passed over. */
  keys: number;
  done: number;
  /** Bytes (item headers, keys and values) it wrote onto the targets. */
  bytes: number;
  since: string;
  /** Items and bytes every copy of this member wrote since it started (each run's once: kvctl counts from these). */
  totalItems: number;
  totalBytes: number;
}

/** A progress record read from etcd, or undefined when it is not one. */
export function parseCopyProgress(text: string): CopyProgress | undefined {
  try {
    const r = JSON.parse(text) as Partial<CopyProgress> | null;
    const count = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v >= 0;
    if (r && typeof r === 'object' && count(r.epoch) && typeof r.running === 'boolean' && count(r.keys) && count(r.done) && count(r.bytes) && typeof r.since === 'string' && count(r.totalItems) && count(r.totalBytes)) {
      return { epoch: r.epoch!, running: r.running, keys: r.keys!, done: r.done!, bytes: r.bytes!, since: r.since, totalItems: r.totalItems!, totalBytes: r.totalBytes! };
    }
  } catch {
    // not JSON
  }
  return undefined;
}

/** <prefix>.load/<name>, put by each member after walks of its index, under its lease (server/replication/slot-load.ts). */
export interface LoadRecord {
  at: string;
  /** The hash slots it holds keys of, and per hash slot (same order) its keys and their items' bytes. */
  slots: number[];
  keys: number[];
  bytes: number[];
  /**
   * Present (true) once the member answered a block grant: a write may follow at once, so it may hold
   * keys its counts do not show yet (the controller counts it as holding some: load-guard.ts).
   */
  granted?: true;
}

/** A load record read from etcd, or undefined when it is not one (then the member counts as not having reported). */
export function parseLoadRecord(text: string): LoadRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<LoadRecord> | null;
    if (!r || typeof r !== 'object' || typeof r.at !== 'string' || !Array.isArray(r.slots) || !Array.isArray(r.keys) || !Array.isArray(r.bytes)) return undefined;
    const { slots, keys, bytes } = r;
    if (keys.length !== slots.length || bytes.length !== slots.length) return undefined;
    const count = (n: unknown) => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
    if (!slots.every((slot) => count(slot) && slot < SLOT_COUNT) || !keys.every(count) || !bytes.every(count)) return undefined;
    return { at: r.at, slots, keys, bytes, ...(r.granted === true ? { granted: true as const } : {}) };
  } catch {
    return undefined;
  }
}

/**
 * <prefix>/frozen: placement changes only by copying from now on (kvctl rebalance, drains, repair), never
 * directly from members/ again. Its presence is what counts (server/replication/controller.ts); the
 * record says why, for people (kvctl layout).
 */
export const FROZEN_REASONS = ['failover', 'drain', 'loaded', 'rebalance', 'rebalance given up'] as const;

export interface FrozenRecord {
  since: string;
  /** What froze it: a failover, a drain, members that may hold keys when a member joined, kvctl rebalance, or a rebalance given up. */
  reason: (typeof FROZEN_REASONS)[number];
  /** The config's epoch then (the controller's records). */
  epoch?: number;
  /** The members it was about: failed over, drained, or that may hold keys. */
  members?: string[];
}

/** The text of a frozen record written now. */
export function frozenRecord(reason: FrozenRecord['reason'], epoch?: number, members?: readonly string[]): string {
  return JSON.stringify({ since: new Date().toISOString(), reason, ...(epoch === undefined ? {} : { epoch }), ...(members === undefined ? {} : { members: [...members] }) });
}

/**
 * A frozen record read from etcd. Records of 2026-11 (before `reason`) are read too: `failed`, `drained`,
 * `loaded`, `rebalanceGivenUp`, `by`. One this version cannot read (newer, or damaged) still freezes: its
 * reason is 'unknown'.
 */
export function parseFrozenRecord(text: string): { since?: string; reason: FrozenRecord['reason'] | 'unknown'; epoch?: number; members: string[] } {
  let r: unknown;
  try {
    r = JSON.parse(text);
  } catch {
    return { reason: 'unknown', members: [] };
  }
  if (!r || typeof r !== 'object') return { reason: 'unknown', members: [] };
  const record = r as Record<string, unknown>;
  const names = (value: unknown) => (Array.isArray(value) ? value.filter((name): name is string => typeof name === 'string') : []);
  const older: FrozenRecord['reason'] | undefined = Array.isArray(record.failed) ? 'failover' : Array.isArray(record.drained) ? 'drain' : record.loaded === true ? 'loaded' : record.rebalanceGivenUp === true ? 'rebalance given up' : record.by === 'kvctl rebalance' ? 'rebalance' : undefined;
  const reason = FROZEN_REASONS.find((known) => known === record.reason) ?? older ?? 'unknown';
  return {
    since: typeof record.since === 'string' ? record.since : undefined,
    reason,
    ...(Number.isSafeInteger(record.epoch) ? { epoch: record.epoch as number } : {}),
    members: names(record.members ?? record.failed ?? record.drained),
  };
}

/** <prefix>/copy-rate: each copier copies at most this many bytes a second (and at most its own --repair-rate). */
export interface CopyRateRecord {
  bytesPerSecond: number;
  since: string;
}

/** The cap a copy-rate record sets (0: none), or undefined when it is not one (then no cap is taken from it). */
export function parseCopyRate(text: string | null): number | undefined {
  if (text === null) return 0;
  try {
    const r = JSON.parse(text) as Partial<CopyRateRecord> | null;
    if (r && typeof r === 'object' && typeof r.bytesPerSecond === 'number' && Number.isFinite(r.bytesPerSecond) && r.bytesPerSecond >= 0) return r.bytesPerSecond;
  } catch {
    // not JSON
  }
  return undefined;
}

/** Every member's progress record (progress/<name>), by name; unreadable ones left out. */
export async function readCopyProgress(etcd: Etcd3, prefix: string): Promise<Map<string, CopyProgress>> {
  const keys = etcdKeys(prefix);
  const found = new Map<string, CopyProgress>();
  for (const [key, text] of Object.entries(await etcd.getAll().prefix(keys.progress).strings())) {
    const progress = parseCopyProgress(text);
    if (progress !== undefined) found.set(key.slice(keys.progress.length), progress);
  }
  return found;
}
