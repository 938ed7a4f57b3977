// The controller: the one member that writes <prefix>/config. Every member with
// --etcd runs a ReplicationController; the one whose alive lease holds
// <prefix>/controller (created in a transaction when absent) is the controller,
// and it alone changes config:
//   - with --replicas 1, it recomputes placement (placement.ts) when members/
//     changes: a member registered, changed its zone, or was forgotten (kvctl
//     forget). A dead member (alive key gone) keeps its hash slots.
//   - with --replicas > 1, it places the members that are registered and alive,
//     and when a replica's alive key goes (its lease lapsed: it died, or lost
//     etcd), it fails it over: the member leaves every hash slot's replicas, each
//     such hash slot moving to a new epoch with its next replica as primary
//     (withoutReplicas; docs/replication-design.md §4.5). From then on placement
//     is frozen (no recomputation from members/) while a failed-over member is
//     listed: the region of a member that returns is stale, and so would be any
//     member a recomputation gave hash slots without copying them; repair (step
//     7) will end the freeze.
// The controller key shares the holder's alive lease, so when the controller
// dies, the key goes when its lease lapses, the others see the deletion on their
// watch, and one of them takes over, from the config in etcd (its epoch is never
// reset), failing the dead controller over like any other member.
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import type { Logger } from 'pino';

import type { PlacedMember } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type ControllerRecord, type MemberRecord, etcdKeys } from '../../protocol/registry.js';
import { readStoredConfig, writeConfig } from './config-store.js';
import { nextConfig, removedMembers, withoutReplicas } from './placement.js';

export interface ControllerOptions {
  client: Etcd3;
  prefix: string;
  /** This member's name and --replicas. */
  name: string;
  replicas: number;
  /** This member's current alive lease (undefined while it is lost and being claimed again). */
  leaseId: () => string | undefined;
  logger: Logger;
}

/** After a failed round (etcd unreachable), the next one is tried this much later. */
const RETRY_MS = 1000;

export class ReplicationController {
  private readonly keys: ReturnType<typeof etcdKeys>;
  private watcher: Watcher | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;
  /** Whether this member held the controller key at its last look. */
  leading = false;
  /** The config epoch whose frozen placement was last reported. */
  private frozenAt = -1;

  private constructor(private readonly options: ControllerOptions) {
    this.keys = etcdKeys(options.prefix);
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
    const aliveChange = this.options.replicas > 1 ? key.startsWith(keys.alive) : key === keys.aliveKey(this.options.name);
    if (key.startsWith(keys.members) || key === keys.controller || (key === keys.config && deleted) || aliveChange) void this.poke();
  }

  /** Runs a round now, or once more after the one running: events during a round are never lost. */
  poke(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        try {
          await this.round();
        } catch (error) {
          this.options.logger.warn({ err: error }, `controller: etcd round failed; trying again in ${RETRY_MS} ms`);
          this.retry ??= setTimeout(() => {
            this.retry = undefined;
            void this.poke();
          }, RETRY_MS);
        }
      } while (this.again && !this.closed);
      this.running = undefined;
    })();
    return this.running;
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
      this.again = true; // read again, now as holder or not
      return;
    }
    this.leading = holder.lease === leaseId;
    if (!this.leading) return;
    const stored = await readStoredConfig(client, keys, (error) => logger.error({ err: error }, 'controller: the config in etcd is unreadable; replacing it'));
    const replicas = stored?.config?.replicas ?? this.options.replicas;
    let placed = placedMembers(read.kvs, replicas, logger);
    if (replicas > 1) {
      const alive = new Set((await client.getAll().prefix(keys.alive).keys()).map((key) => key.slice(keys.alive.length)));
      if (stored?.config && (await this.failOver(stored.config, stored.modRevision, alive, leaseId))) return;
      if (stored?.config && this.frozen(stored.config)) return;
      placed = placed.filter((member) => alive.has(member.name));
    }
    const next = nextConfig(stored?.config, placed, replicas, stored?.epoch ?? 0);
    if (next === undefined) return;
    if (await writeConfig(client, keys, next, stored?.modRevision, leaseId)) {
      logger.info({ epoch: next.epoch, replicas: next.replicas, members: next.members, ranges: next.slots.length }, 'controller: config written');
    } else {
      this.again = true; // someone else wrote it, or we lost the controller key: look again
    }
  }

  /**
   * Fails over the replicas of `config` that are not alive; says whether it acted (wrote, or lost
   * the race and must look again). The transaction holds only while their alive keys are absent:
   * a member that came back meanwhile is not failed over.
   */
  private async failOver(config: ClusterConfig, modRevision: string, alive: ReadonlySet<string>, leaseId: string): Promise<boolean> {
    const { client, logger } = this.options;
    const dead = new Set(config.members.filter((name) => !alive.has(name) && !removedMembers(config).includes(name)));
    if (dead.size === 0) return false;
    const next = withoutReplicas(config, dead);
    if (next === undefined) return false; // every hash slot of theirs has no live replica: nothing to promote
    if (await writeConfig(client, this.keys, next, modRevision, leaseId, [...dead].map((name) => this.keys.aliveKey(name)))) {
      const promoted = next.slots.filter((r) => r.epoch === next.epoch).reduce((n, r) => n + r.to - r.from + 1, 0);
      logger.warn({ failed: [...dead], epoch: next.epoch, hashSlots: promoted }, 'controller: failover: members without a live registration left their hash slots\' replicas');
    } else {
      this.again = true;
    }
    return true;
  }

  /** Whether placement is frozen (a failed-over member is listed; see the top of this file), said once per config. */
  private frozen(config: ClusterConfig): boolean {
    const removed = removedMembers(config);
    if (removed.length === 0) return false;
    if (this.frozenAt !== config.epoch) {
      this.frozenAt = config.epoch;
      this.options.logger.warn({ removed, epoch: config.epoch }, 'controller: placement is frozen after a failover: members joining or returning get no hash slots until repair exists (docs/replication-design.md, step 7)');
    }
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    await this.watcher?.cancel().catch(() => undefined);
    await this.running;
  }
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
