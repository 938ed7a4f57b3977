// The controller: the one member that writes <prefix>/config. Every member with
// --etcd runs a ReplicationController; the one whose alive lease holds
// <prefix>/controller (created in a transaction when absent) is the controller,
// and it alone recomputes config (placement.ts) when members/ changes: a member
// registered, changed its zone, or was forgotten (kvctl forget). A dead member
// (alive key gone) keeps its hash slots: failover is step 6 of
// docs/replication-design.md. The controller key shares the holder's alive
// lease, so when the controller dies, the key goes when its lease lapses, the
// others see the deletion on their watch, and one of them takes over, from the
// config in etcd (its epoch is never reset).
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import type { Logger } from 'pino';

import type { PlacedMember } from '../../protocol/hash-slots.js';
import { type ControllerRecord, type MemberRecord, etcdKeys } from '../../protocol/registry.js';
import { readStoredConfig, writeConfig } from './config-store.js';
import { nextConfig } from './placement.js';

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
    if (key.startsWith(keys.members) || key === keys.controller || (key === keys.config && deleted) || key === keys.aliveKey(this.options.name)) void this.poke();
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
    const next = nextConfig(stored?.config, placedMembers(read.kvs, replicas, logger), replicas, stored?.epoch ?? 0);
    if (next === undefined) return;
    if (await writeConfig(client, keys, next, stored?.modRevision, leaseId)) {
      logger.info({ epoch: next.epoch, replicas: next.replicas, members: next.members, ranges: next.slots.length }, 'controller: config written');
    } else {
      this.again = true; // someone else wrote it, or we lost the controller key: look again
    }
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
