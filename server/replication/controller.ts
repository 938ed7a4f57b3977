// The controller: the one member that writes <prefix>/config. Every member with
// --etcd runs a ReplicationController; the one whose alive lease holds
// <prefix>/controller (created in a transaction when absent) is the controller,
// and it alone changes config:
//   - with --replicas 1, it recomputes placement (placement.ts) when members/
//     changes: a member registered, changed its zone, or was forgotten (kvctl
//     forget), until placement is frozen (also once members hold keys, by their load records:
//     load-guard.ts); drain and rebalance (below) move hash
//     slots with their keys as with more replicas. A dead member (alive key
//     gone) keeps its hash slots: there is nothing to fail over to.
//   - with --replicas > 1, it places the members that are registered and alive
//     (until placement is frozen, as above; kvctl rebalance freezes it, and moves hash
//     slots with their keys, below), and when a replica's alive key goes (its lease lapsed: it died, or lost
//     etcd), it fails it over: the member leaves every hash slot's replicas, each
//     such hash slot moving to a new epoch with its next replica as primary
//     (withoutReplicas; docs/replication-design.md §4.5). From then on placement
//     is frozen (<prefix>/frozen: no recomputation from members/, which would
//     move hash slots to members without copying them); instead
//   - repair (§5): a hash slot with fewer replicas than --replicas gets live
//     members syncing into it at a new epoch (withSyncing): they take every
//     write from then on while its primary copies what was there before
//     (copier.ts), and when the copier reports a copy done at the hash slot's
//     epoch (repair/<target>/<primary>), the target becomes a replica
//     (withSynced). A member that returns after a failover is such a target
//     like any other (its stale items are dropped first: epoch-follower.ts).
//   - drain (kvctl drain, <prefix>/drain/<name>): the member counts as holding
//     nothing, so repair gives its hash slots other members to sync into at
//     once; when every copy is done it is asked to quiesce (grant no more read
//     leases, quiesce.ts), and once it says its leases have ended (`quiet`) its
//     hash slots go to their copies at a new epoch (withDrained).
//   - rebalance (kvctl rebalance, <prefix>/target): the cluster moves to the
//     target placement by the same copies, the primaries that give hash slots
//     away quiescing first (rebalance-round.ts); repair waits meanwhile. With
//     <prefix>/auto-rebalance (kvctl rebalance --auto on) the controller starts
//     one itself when a member joins the frozen cluster and repair is idle.
// The controller key shares the holder's alive lease, so when the controller
// dies, the key goes when its lease lapses, the others see the deletion on their
// watch, and one of them takes over, from the config in etcd (its epoch is never
// reset), failing the dead controller over like any other member.
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import type { Logger } from 'pino';

import type { PlacedMember } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type ControllerRecord, type DrainRecord, type MemberRecord, type RepairRecord, cancelWatch, etcdKeys, frozenRecord, parseClusterConfig, parseDrainRecord, slotsHeld } from '../../protocol/registry.js';
import { slotsToMove } from '../../protocol/slot-table.js';
import { readStoredConfig, writeConfig } from './config-store.js';
import { clearHandoffs, rebalanceJoined, rebalanceRound } from './rebalance-round.js';
import { SerialRounds } from './rounds.js';
import { LoadGuard } from './load-guard.js';
import { type CopiedRange, drainReady, nextConfig, removedMembers, withDrained, withForgottenPlaced, withSynced, withSyncing, withoutReplicas } from './placement.js';

export interface ControllerOptions {
  client: Etcd3;
  prefix: string;
  /** This member's name and --replicas. */
  name: string;
  replicas: number;
  /** This member's current alive lease (undefined while it is lost and being claimed again). */
  leaseId: () => string | undefined;
  /** The members' lease TTL (--etcd-ttl): a member not seen alive since this process started is failed over only after it. */
  ttlMs: number;
  /** --replace-after: how long hash slots stay short of a replica before members holding others are made to sync into them. */
  replaceAfterMs: number;
  logger: Logger;
}

/** After a failed round (etcd unreachable), the next one is tried this much later. */
const RETRY_MS = 1000;

export class ReplicationController {
  private readonly keys: ReturnType<typeof etcdKeys>;
  private watcher: Watcher | undefined;
  private readonly rounds: SerialRounds;
  private closed = false;
  /** Whether this member held the controller key at its last look. */
  leading = false;
  /** Failovers this member wrote as the controller (metrics). */
  failovers = 0;
  /** Hash slots the rebalance under way has still to move, as this member last saw it as the controller (metrics). */
  rebalanceLeft = 0;
  /** The config epoch whose frozen placement was last reported. */
  private frozenAt = -1;
  /** Members whose alive key this process saw deleted (their lease lapsed, or they stopped), and when. */
  private readonly deletedAt = new Map<string, number>();
  private readonly startedAt = performance.now();
  private grace: NodeJS.Timeout | undefined;
  /** Since when (this process's clock) config has had hash slots short of replicas; the timer that looks again at --replace-after. */
  private shortSince: number | undefined;
  private replaceTimer: NodeJS.Timeout | undefined;
  /** Before a direct placement: do the members it takes hash slots from hold keys? */
  private readonly loadGuard: LoadGuard;

  private constructor(private readonly options: ControllerOptions) {
    this.keys = etcdKeys(options.prefix);
    this.loadGuard = new LoadGuard({ client: options.client, prefix: options.prefix, logger: options.logger, ttlMs: options.ttlMs, poke: () => void this.poke() });
    this.rounds = new SerialRounds(() => this.round(), {
      closed: () => this.closed,
      retryMs: RETRY_MS,
      failed: (error) => options.logger.warn({ err: error }, `controller: etcd round failed; trying again in ${RETRY_MS} ms`),
    });
  }

  /** Watches the prefix, then runs a first round (which may make this member the controller and write config). */
  static async start(options: ControllerOptions): Promise<ReplicationController> {
    const controller = new ReplicationController(options);
    const { client } = options;
    const watcher = await client.watch().prefix(controller.keys.root).create();
    controller.watcher = watcher;
    watcher.on('put', (kv) => controller.changed(kv, false));
    watcher.on('delete', (kv) => controller.changed(kv, true));
    // A watch that reconnects may have missed events: look again.
    watcher.on('connected', () => controller.poke());
    watcher.on('error', (error) => options.logger.warn({ err: error }, 'controller: etcd watch failed; it retries'));
    await controller.poke();
    return controller;
  }

  /** Only what can change the controller's work wakes it; its own config writes do not. */
  private changed(kv: IKeyValue, deleted: boolean): void {
    const key = kv.key.toString();
    const { keys } = this;
    if (key.startsWith(keys.alive)) {
      const name = key.slice(keys.alive.length);
      if (deleted) this.deletedAt.set(name, performance.now());
      else this.deletedAt.delete(name);
    }
    const repairChange = (key.startsWith(keys.repair) && !deleted) || key.startsWith(keys.drain) || key.startsWith(keys.handoff) || key === keys.target;
    if (key.startsWith(keys.members) || key === keys.controller || (key === keys.config && deleted) || key.startsWith(keys.alive) || repairChange) void this.poke();
  }

  /** Runs a round now, or once more after the one running: events during a round are never lost. */
  poke(): Promise<void> {
    return this.rounds.poke();
  }

  /** One look at etcd: take the controller key if it is free; if it is ours, bring config up to date. */
  private async round(): Promise<void> {
    const { client, name, logger } = this.options;
    const leaseId = this.options.leaseId();
    if (leaseId === undefined) return; // the registration is claiming a new lease; its alive key's put wakes us
    const { keys } = this;
    const read = await client.getAll().prefix(keys.members).exec();
    const holder = (await client.get(keys.controller).exec()).kvs[0];
    if (holder === undefined) {
      const record: ControllerRecord = { name, since: new Date().toISOString() };
      const won = await client.if(keys.controller, 'Create', '==', 0).then(client.put(keys.controller).value(JSON.stringify(record)).lease(leaseId)).commit();
      if (won.succeeded) logger.info({ member: name }, 'controller: this member is the controller');
      this.rounds.runAgain(); // read again, now as holder or not
      return;
    }
    this.leading = holder.lease === leaseId;
    if (!this.leading) this.rebalanceLeft = 0;
    if (!this.leading) return;
    const stored = await readStoredConfig(client, keys, (error) => logger.error({ err: error }, 'controller: the config in etcd is unreadable; replacing it'));
    const replicas = stored?.config?.replicas ?? this.options.replicas;
    const placed = placedMembers(read.kvs, replicas, logger);
    const alive = new Set((await client.getAll().prefix(keys.alive).keys()).map((key) => key.slice(keys.alive.length)));
    if (stored?.config) {
      // With --replicas 1 a dead member keeps its hash slots (nothing else holds them): it leaves only the ones it was syncing into.
      const dead = replicas > 1 ? this.deadReplicas(stored.config, alive) : this.deadSyncing(stored.config, alive);
      if (dead === undefined) return; // a member is down but may still be starting: look again after the grace
      // Never a recomputation while a replica is dead: it could give a dead member's hash slots to one without their data.
      // With --replicas 1 a failover that changes nothing (the hash slots they sync into have no live replica
      // either) lets the round go on: those members keep their hash slots anyway.
      if (dead.size > 0 && ((await this.failOver(stored.config, stored.modRevision, dead, leaseId)) || replicas > 1)) return;
      const drains = await this.drains();
      const target = (await client.get(keys.target).exec()).kvs[0];
      this.rebalanceLeft = target === undefined ? 0 : slotsLeft(stored.config, target.value.toString());
      if (target !== undefined) {
        const view = { config: stored.config, modRevision: stored.modRevision, target, alive, draining: drains.size > 0, copied: await this.copied() };
        if (await rebalanceRound({ client, keys, logger, leaseId }, view)) this.rounds.runAgain();
        return;
      }
      await clearHandoffs({ client, keys, logger, leaseId });
      const live = placed.filter((member) => alive.has(member.name));
      if (drains.size > 0 || (await this.frozen(stored.config))) {
        const candidates = live.filter((member) => !drains.has(member.name));
        if (replicas === 1 && (await this.placeForgotten(stored.config, stored.modRevision, new Set(placed.map((m) => m.name)), candidates, leaseId))) return;
        // Repair idle: members that joined get their share by a rebalance, if the cluster asked for that (--auto on).
        const idle = !(await this.repair(stored.config, stored.modRevision, live, leaseId, drains));
        if (idle && drains.size === 0 && (await rebalanceJoined({ client, keys, logger, leaseId }, stored.config, stored.modRevision, live, new Set(drains.keys())))) this.rounds.runAgain();
        return;
      }
    }
    // With --replicas 1 a member that is merely down keeps its hash slots (docs/cluster.md).
    const registered = new Set(placed.map((member) => member.name));
    const next = nextConfig(stored?.config, replicas > 1 ? placed.filter((member) => alive.has(member.name)) : placed, replicas, stored?.epoch ?? 0);
    if (next === undefined) return;
    const guard = stored?.config ? await this.loadGuard.check(stored.config, next, alive, registered) : { hold: false as const, unchanged: new Map<string, string>() };
    if (guard.hold) return;
    // Only while placement is not frozen and the holders' load records are as read (a first grant since changes them).
    if (await writeConfig(client, keys, next, stored?.modRevision, leaseId, [keys.frozen], guard.unchanged)) {
      logger.info({ epoch: next.epoch, replicas: next.replicas, members: next.members, ranges: next.slots.length }, 'controller: config written');
    } else {
      this.rounds.runAgain(); // someone else wrote it, or we lost the controller key: look again
    }
  }

  /**
   * The replicas of `config` to fail over: listed in a hash slot, not alive, and either seen to go
   * (their alive key's deletion) or down for a TTL since this process started (a member that is
   * merely starting up, as after a whole-cluster restart, is not failed over). undefined: a
   * member is down but within that grace; the controller looks again when it ends.
   */
  private deadReplicas(config: ClusterConfig, alive: ReadonlySet<string>): Set<string> | undefined {
    const removed = removedMembers(config);
    const down = config.members.filter((name) => !alive.has(name) && !removed.includes(name));
    const waitMs = this.startedAt + this.options.ttlMs - performance.now();
    const dead = new Set(down.filter((name) => this.deletedAt.has(name) || waitMs <= 0));
    if (dead.size < down.length) {
      this.grace ??= setTimeout(() => {
        this.grace = undefined;
        void this.poke();
      }, Math.max(waitMs, 0) + 50);
      if (dead.size === 0) return undefined;
    }
    return dead;
  }

  /**
   * With --replicas 1, placement frozen: the hash slots of forgotten members go to the others
   * directly, without their keys (kvctl forget said so), as before the freeze. Whether it wrote.
   */
  private async placeForgotten(config: ClusterConfig, modRevision: string, registered: ReadonlySet<string>, candidates: PlacedMember[], leaseId: string): Promise<boolean> {
    const next = withForgottenPlaced(config, registered, candidates);
    if (next === undefined) return false;
    if (await writeConfig(this.options.client, this.keys, next, modRevision, leaseId)) {
      this.options.logger.warn({ epoch: next.epoch }, 'controller: hash slots of forgotten members go to the others, without their keys (--replicas 1: they had no other copy)');
    }
    this.rounds.runAgain();
    return true;
  }

  /** With --replicas 1: the dead members (as deadReplicas says) that are syncing into some hash slot, the only ones a failover changes. */
  private deadSyncing(config: ClusterConfig, alive: ReadonlySet<string>): Set<string> | undefined {
    // A member merely down that syncs into nothing does not hold the round up for the startup grace.
    if (!config.slots.some((range) => range.syncing.some((i) => !alive.has(config.members[i]!)))) return new Set();
    const dead = this.deadReplicas(config, alive);
    if (dead === undefined) return undefined;
    const syncing = new Set(config.slots.flatMap((range) => range.syncing.map((i) => config.members[i]!)));
    return new Set([...dead].filter((name) => syncing.has(name)));
  }

  /**
   * Fails `dead` over (withoutReplicas). The transaction holds only while their alive keys are
   * absent: a member that came back meanwhile is not failed over. A hash slot whose replicas are
   * all dead keeps them, unavailable, until one returns. Whether there was a config to write.
   */
  private async failOver(config: ClusterConfig, modRevision: string, dead: ReadonlySet<string>, leaseId: string): Promise<boolean> {
    const { client, logger } = this.options;
    const next = withoutReplicas(config, dead);
    if (next === undefined) return false; // every hash slot of theirs has no live replica: nothing to promote
    await client.put(this.keys.frozen).value(frozenRecord('failover', next.epoch, [...dead]));
    if (await writeConfig(client, this.keys, next, modRevision, leaseId, [...dead].map((name) => this.keys.aliveKey(name)))) {
      this.failovers++;
      this.rounds.runAgain(); // our own config write wakes no watch: look again, for repair (its --replace-after clock starts there)
      const promoted = next.slots.filter((r) => r.epoch === next.epoch).reduce((n, r) => n + r.to - r.from + 1, 0);
      logger.warn({ failed: [...dead], epoch: next.epoch, hashSlots: promoted }, 'controller: failover: members without a live registration left their hash slots\' replicas');
    } else {
      this.rounds.runAgain();
    }
    return true;
  }

  /**
   * Repair (withSynced, then withSyncing): promotes the targets whose copies are reported done,
   * else gives hash slots short of replicas members to sync into. Whether it wrote a config (or
   * must look again).
   */
  private async repair(config: ClusterConfig, modRevision: string, live: PlacedMember[], leaseId: string, drains: ReadonlyMap<string, Drain>): Promise<boolean> {
    const { client, logger, replaceAfterMs } = this.options;
    const copied = await this.copied();
    const leaving = new Set(drains.keys());
    if (leaving.size > 0) {
      // A drain moves hash slots by copying, as repair does: placement is never recomputed from members/ again.
      const frozen = this.keys.frozen;
      await client.if(frozen, 'Create', '==', 0).then(client.put(frozen).value(frozenRecord('drain', config.epoch, [...leaving]))).commit();
    }
    // A quiet member leaves all its hash slots in one config (never some, then read again under a
    // lease at a config that moved them), and only while its record is as read: a cancel that
    // comes first wins (kvctl drain --cancel is conditioned on config, in turn).
    const quiet = new Map([...drains].flatMap(([name, drain]) => (drain.record.phase === 'quiet' && drainReady(config, copied, name) ? [[this.keys.drainKey(name), name] as const] : [])));
    let unchanged = new Map<string, string>();
    let next = withSynced(config, copied, leaving);
    let why = 'repair: copies done, their targets are replicas now';
    if (next === undefined && (next = withDrained(config, copied, new Set(quiet.values()), leaving))) {
      why = 'drain: members whose read leases have ended left their hash slots to their copies';
      unchanged = new Map([...quiet.keys()].map((key) => [key, [...drains.values()].find((d) => d.key === key)!.modRevision]));
    }
    if (next === undefined && (next = withSyncing(config, this.repairCandidates(config, live, replaceAfterMs, leaving), leaving))) why = 'repair: hash slots short of replicas get members syncing into them';
    if (next === undefined) {
      await this.quiesceDrained(config, copied, drains, new Set(live.map((m) => m.name)));
      return false;
    }
    if (await writeConfig(client, this.keys, next, modRevision, leaseId, [], unchanged)) {
      this.rounds.runAgain(); // a promotion may leave hash slots to give targets to, and our write wakes no watch
      const syncing = next.slots.reduce((n, r) => n + (r.syncing.length > 0 ? r.to - r.from + 1 : 0), 0);
      logger.warn({ epoch: next.epoch, syncingHashSlots: syncing }, `controller: ${why}`);
    } else {
      this.rounds.runAgain();
    }
    return true;
  }

  /**
   * Who may sync into hash slots short of replicas: a live member holding none at once (one that
   * returned after a failover, or joined), the others once the shortage is --replace-after old
   * (the dead member may return meanwhile, and copying to it costs no other member memory).
   */
  private repairCandidates(config: ClusterConfig, live: PlacedMember[], replaceAfterMs: number, leaving: ReadonlySet<string>): PlacedMember[] {
    const staying = (r: (typeof config.slots)[number]) => [...r.replicas, ...r.syncing].filter((i) => !leaving.has(config.members[i]!)).length;
    const short = config.slots.some((r) => staying(r) < config.replicas);
    if (!short) {
      this.shortSince = undefined;
      return [];
    }
    // An operator's drain: every other live member may take a drained member's hash slots, at once.
    if (config.slots.some((r) => staying(r) < config.replicas && [...r.replicas, ...r.syncing].some((i) => leaving.has(config.members[i]!)))) return live.filter((m) => !leaving.has(m.name));
    const now = performance.now();
    this.shortSince ??= now;
    const holding = new Set(config.slots.flatMap((r) => [...r.replicas, ...r.syncing]).map((i) => config.members[i]!));
    const spare = live.filter((m) => !holding.has(m.name));
    if (now - this.shortSince >= replaceAfterMs) return live;
    this.replaceTimer ??= setTimeout(() => {
      this.replaceTimer = undefined;
      void this.poke();
    }, this.shortSince + replaceAfterMs - now + 50);
    return spare;
  }

  /** What copiers reported copied (repair/<target>/<primary>), by target; an unreadable record counts as nothing done. */
  private async copied(): Promise<Map<string, CopiedRange[]>> {
    const records = await this.options.client.getAll().prefix(this.keys.repair).exec();
    const copied = new Map<string, CopiedRange[]>();
    for (const kv of records.kvs) {
      const [target] = kv.key.toString().slice(this.keys.repair.length).split('/');
      try {
        const record = JSON.parse(kv.value.toString()) as Partial<RepairRecord>;
        if (target && Array.isArray(record.copied)) copied.set(target, [...(copied.get(target) ?? []), ...record.copied.filter(isCopiedRange)]);
      } catch {
        // unreadable: that copy is simply not counted as done
      }
    }
    return copied;
  }

  /** The drain records (kvctl drain), by member; an unreadable one counts as `copying`. */
  private async drains(): Promise<Map<string, Drain>> {
    const read = await this.options.client.getAll().prefix(this.keys.drain).exec();
    return new Map(
      read.kvs.map((kv) => {
        const key = kv.key.toString();
        return [key.slice(this.keys.drain.length), { key, record: parseDrainRecord(kv.value.toString()) ?? { since: '', phase: 'copying' }, modRevision: kv.mod_revision }];
      }),
    );
  }

  /**
   * A drained member (`copying`) all of whose hash slots have copies done is asked to quiesce: it
   * grants no more read leases, and says `quiet` once those it granted have ended (quiesce.ts). A
   * transaction on the record's revision: a drain cancelled meanwhile is not brought back.
   */
  private async quiesceDrained(config: ClusterConfig, copied: ReadonlyMap<string, CopiedRange[]>, drains: ReadonlyMap<string, Drain>, alive: ReadonlySet<string>): Promise<void> {
    const { client, logger } = this.options;
    for (const [name, { key, record, modRevision }] of drains) {
      // Drained and stopped: the record goes, so that the member, started again, is a member like any other.
      if (record.phase === 'quiet' && !alive.has(name) && slotsHeld(config, name) === 0) {
        const gone = await client.if(key, 'Mod', '==', modRevision).then(client.delete().key(key)).commit();
        if (gone.succeeded) logger.info({ member: name }, 'drain: the drained member stopped; its drain record is removed');
        continue;
      }
      if (record.phase !== 'copying' || !config.members.includes(name) || !drainReady(config, copied, name)) continue;
      const next: DrainRecord = { ...record, phase: 'quiesce' };
      const put = await client.if(key, 'Mod', '==', modRevision).then(client.put(key).value(JSON.stringify(next))).commit();
      if (put.succeeded) logger.warn({ member: name }, 'drain: every hash slot of the member is copied; it stops granting read leases');
    }
  }

  /**
   * Whether placement is frozen: the cluster has failed over (<prefix>/frozen) or lists a member
   * holding nothing. A recomputation would move hash slots to members without their items; repair
   * fills hash slots short of replicas instead. Said once per config.
   */
  private async frozen(config: ClusterConfig): Promise<boolean> {
    const removed = removedMembers(config);
    const marked = removed.length > 0 || (await this.options.client.get(this.keys.frozen).exec()).kvs.length > 0;
    if (!marked) return false;
    if (this.frozenAt !== config.epoch) {
      this.frozenAt = config.epoch;
      this.options.logger.warn({ removed, epoch: config.epoch }, 'controller: placement is frozen since a failover or a drain: members joining get hash slots as repair targets, or by kvctl rebalance (docs/cluster.md)');
    }
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.grace) clearTimeout(this.grace);
    if (this.replaceTimer) clearTimeout(this.replaceTimer);
    await cancelWatch(this.watcher);
    await this.rounds.stop();
  }
}

interface Drain {
  key: string;
  record: DrainRecord;
  modRevision: string;
}

function isCopiedRange(c: unknown): c is CopiedRange {
  const r = c as Partial<CopiedRange> | null;
  return r !== null && typeof r === 'object' && Number.isInteger(r.from) && Number.isInteger(r.to) && Number.isInteger(r.epoch);
}

/** The members to place: those whose record is compatible with the cluster's replica count. */
function placedMembers(kvs: IKeyValue[], replicas: number, logger: Logger): PlacedMember[] {
  const placed: PlacedMember[] = [];
  for (const kv of kvs) {
    const name = kv.key.toString().replace(/^.*\/members\//, '');
    let record: Partial<MemberRecord> = {};
    try {
      record = JSON.parse(kv.value.toString()) as Partial<MemberRecord>;
    } catch {
      // a member key's existence is what makes it a member; it has no zone then
    }
    // A member started with another --replicas refuses to run; until it has removed its key, it gets no hash slot.
    if (record.replicas !== undefined && record.replicas !== replicas) {
      logger.warn({ member: name, replicas: record.replicas, cluster: replicas }, 'controller: member has another --replicas; not placing it');
      continue;
    }
    placed.push({ name, zone: typeof record.zone === 'string' ? record.zone : undefined });
  }
  return placed;
}

/** Hash slots that do not have `targetText`'s replicas in `config` yet (metrics); 0 for an unreadable target (the round gives it up). */
function slotsLeft(config: ClusterConfig, targetText: string): number {
  try {
    return slotsToMove(config, parseClusterConfig(targetText));
  } catch {
    return 0;
  }
}
