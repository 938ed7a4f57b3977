// A replica's epoch words follow the config (docs/replication-design.md §4.2,
// §4.3): every member of an etcd cluster (any --replicas) watches <prefix>/config and, for each
// hash slot, makes its word in every namespace's epoch table say
//   (E, OPEN)    when this member is one of the hash slot's replicas at epoch E,
//                or syncing into it (repair, copier.ts: it takes every write
//                while the primary copies what was there before): through the
//                barrier (epoch-barrier.ts), so no write decided under an
//                earlier epoch commits here afterwards. A member that starts
//                syncing a hash slot it did not serve first drops whatever it
//                holds of it (stale since it left), while its word is fenced,
//                and so does one given a hash slot directly once placement is
//                frozen (--replicas 1: a forgotten member's, without keys);
//   (E, FENCED)  when it is not: a writer with an older config reads another
//                epoch (KV_EPOCH_MOVED, it refreshes), one with this config
//                waits (this member serves no write of the hash slot). What
//                it held of a hash slot it stops serving (a rebalance or a
//                drain moved it away, with its keys) is dropped once the config
//                is applied, if placement is frozen (only then do hash slots
//                move with their keys): it is never read again, and its
//                memory is freed.
// kv-server fences every word before it registers (EpochTable.fenceAll), so a
// member serves writes only for what the config in etcd gives it. Configs are
// applied one at a time, the latest after the one running. A member that is
// self-fenced (self-fence.ts) opens nothing until the fence is lifted.
import type { Etcd3, Watcher } from 'etcd3';
import type { Logger } from 'pino';

import { SLOT_COUNT } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type SlotRange, cancelWatch, etcdKeys } from '../../protocol/registry.js';
import type { EpochTable } from '../store/epoch-table.js';
import { readStoredConfig } from './config-store.js';
import { SerialRounds } from './rounds.js';
import type { EpochBarrierReport } from './epoch-barrier.js';
import { slotReplicaNames } from './placement.js';

/** What the follower needs of kv-server: its namespaces' tables and the barrier on each. */
export interface EpochWords {
  epochTables(): Array<{ name: string; table: EpochTable | undefined }>;
  /** Removes this member's items of `hashSlots` in namespace `name` (their words are fenced: no client writes them). */
  dropHashSlots(hashSlots: readonly number[], name: string): Promise<number>;
  epochBarrier(hashSlots: readonly number[], epoch: number, name: string, mayOpen: () => boolean): Promise<EpochBarrierReport>;
}

export interface EpochFollowerOptions {
  client: Etcd3;
  prefix: string;
  /** This member's name in config. */
  name: string;
  server: EpochWords;
  logger: Logger;
  /** While true (self-fence.ts: etcd unreachable), nothing opens: every word stays fenced. */
  selfFenced?: () => boolean;
  /** After each config is applied, its barriers passed (copier.ts starts its copies from here). */
  onApplied?: (config: ClusterConfig) => void;
  /** Tests only (RKV_TEST_APPLY_DELAY_MS): each config is read and applied this much later, as by a member whose watch lags. */
  applyDelayMs?: number;
}

/** After a failed read of config (etcd unreachable), the next one is tried this much later. */
const RETRY_MS = 500;

export class EpochFollower {
  private readonly keys: ReturnType<typeof etcdKeys>;
  private watcher: Watcher | undefined;
  private readonly rounds: SerialRounds;
  private closed = false;
  /** Counts forgetConfig() calls: a config read before the latest one proves nothing. */
  private generation = 0;
  private named = false;
  private applied = 0;
  /** Per hash slot, 1 if the last config applied named this member a replica or syncing: what it stops serving is dropped. */
  private served = new Uint8Array(SLOT_COUNT);
  /** Whether a config was applied since this process started (`served` then says what it served). */
  private appliedOnce = false;
  /** Hash slots left by the config just applied, per namespace: dropped after it (follow()). */
  private left = new Map<string, number[]>();
  private short = 0;
  private syncingSlots = 0;

  private constructor(private readonly options: EpochFollowerOptions) {
    this.keys = etcdKeys(options.prefix);
    this.rounds = new SerialRounds(() => this.follow(), {
      closed: () => this.closed,
      retryMs: RETRY_MS,
      failed: (error) => options.logger.warn({ err: error }, `epoch follower: cannot apply config; trying again in ${RETRY_MS} ms`),
    });
  }

  /** Watches config, then applies the one in etcd; resolves once that is applied. */
  static async start(options: EpochFollowerOptions): Promise<EpochFollower> {
    const follower = new EpochFollower(options);
    const watcher = await options.client.watch().key(follower.keys.config).create();
    follower.watcher = watcher;
    watcher.on('put', () => void follower.poke());
    watcher.on('connected', () => void follower.poke()); // a reconnected watch may have missed a put
    watcher.on('error', (error) => options.logger.warn({ err: error }, 'epoch follower: etcd watch failed; it retries'));
    await follower.poke();
    return follower;
  }

  /** Applies the config in etcd now, or once more after the round running. */
  poke(): Promise<void> {
    return this.rounds.poke();
  }

  /** One round: read config and apply it. */
  private async follow(): Promise<void> {
    const generation = this.generation;
    if (this.options.applyDelayMs) await new Promise((resolve) => setTimeout(resolve, this.options.applyDelayMs));
    const stored = await readStoredConfig(this.options.client, this.keys);
    const named = stored?.config ? await this.apply(stored.config) : false;
    if (named !== undefined && generation === this.generation) {
      this.named = named;
      this.applied = stored?.config?.epoch ?? 0;
    }
    if (named !== undefined && stored?.config) {
      const { config } = stored;
      const count = (ranges: SlotRange[]) => ranges.reduce((n, r) => n + r.to - r.from + 1, 0);
      this.short = count(config.slots.filter((r) => r.replicas.length < config.replicas));
      this.syncingSlots = count(config.slots.filter((r) => r.syncing.length > 0));
      this.options.onApplied?.(config);
    }
    await this.dropLeft();
  }

  /**
   * Frees what this member held of the hash slots the config just applied moved away from it: their
   * words are fenced (no client writes them, none reads them: its read leases go only to clients whose
   * config is as new, which route elsewhere). After the config is applied, so a handed-over primary's
   * reads resume without waiting for it; before the next one (rounds are serial), so a later config that
   * has it sync into them again drops them itself. Only once placement is frozen (a failover, a drain,
   * kvctl rebalance): from then on hash slots move only with their keys. A failure leaves the items
   * (fenced, never read) and is logged: the next syncing into those hash slots drops them.
   */
  private async dropLeft(): Promise<void> {
    const { server, logger, client } = this.options;
    const left = this.left;
    this.left = new Map();
    if (left.size === 0) return;
    // Before placement freezes, configs move replicas without copying (a member that joins is placed directly): what
    // a member gave away then is kept, fenced, as before, so a placement moved back finds it again.
    if (!(await this.frozen())) return;
    for (const [namespace, slots] of left) {
      if (this.closed) return;
      try {
        const dropped = await server.dropHashSlots(slots, namespace);
        if (dropped > 0) logger.info({ namespace, hashSlots: slots.length, dropped }, 'epoch follower: freed what this member held of the hash slots it no longer serves');
      } catch (error) {
        logger.warn({ err: error, namespace, hashSlots: slots.length }, 'epoch follower: could not free what this member held of hash slots it no longer serves (they stay fenced, never read)');
      }
    }
  }

  /** Whether placement is frozen (<prefix>/frozen); false when etcd cannot say (what would be dropped is kept). */
  private frozen(): Promise<boolean> {
    return this.options.client.get(this.keys.frozen).string().then((text) => text !== null, () => false);
  }

  /**
   * Whether the last config applied since forgetConfig() names this member a replica of some
   * hash slot (or syncing into one): only then does it grant read leases (cli.ts). A member whose etcd lease lapsed
   * may have been failed over while it could not see config; a member just started has not
   * read it yet.
   */
  get namedInConfig(): boolean {
    return this.named;
  }

  /** Hash slots short of replicas, and with members syncing into them, in the last config applied (metrics). */
  get shortHashSlots(): number {
    return this.short;
  }

  get syncingHashSlots(): number {
    return this.syncingSlots;
  }

  /** The epoch of the last config applied (0: none yet): read leases go only to clients whose config is as new (read-leases.ts). */
  get appliedEpoch(): number {
    return this.applied;
  }

  /**
   * Resolves once a config of `epoch` or later is applied here (first-grant.ts); rejects when the follower
   * closes first. A round that cannot apply (self-fenced, etcd unreachable) is tried again.
   */
  async appliedAtLeast(epoch: number): Promise<void> {
    while (this.applied < epoch) {
      if (this.closed) throw new Error('the epoch follower closed');
      // A round running (the watch's) reads the config after it started waiting: it may apply this one. Poke only when none runs.
      if (!this.rounds.busy) await this.poke().catch(() => undefined);
      if (this.applied < epoch) await new Promise((resolve) => setTimeout(resolve, RETRY_MS / 10));
    }
  }

  /** Our etcd lease was lost, or claimed anew: until a config read after this is applied, we are named in none. */
  forgetConfig(): void {
    this.generation++;
    this.named = false;
  }

  /** Brings every namespace's words to what `config` says of this member; whether it names it (undefined: self-fenced, nothing applied). */
  private async apply(config: ClusterConfig): Promise<boolean | undefined> {
    const { name, server, logger, selfFenced = () => false } = this.options;
    if (selfFenced()) return undefined; // lifting the fence pokes us again
    // Only what this config takes away is dropped after it: lists left by an earlier round that failed may
    // name hash slots this config gives back.
    this.left = new Map();
    const { names, syncing, epochs } = slotReplicaNames(config);
    for (const { name: namespace, table } of server.epochTables()) {
      if (!table) continue; // format 4: kv-server refuses it with --etcd
      const opening = new Map<number, number[]>();
      const fencing = new Map<number, number[]>();
      const entering: number[] = []; // syncing into, from not serving: dropped before they open
      const leaving: number[] = []; // served until now (open, or named in the config applied before): dropped after
      // A replica now without syncing first, of a hash slot not served since this process applied its first config
      // (--replicas 1: a forgotten member's hash slots, placed anew without keys): what it still holds from before is
      // stale, dropped before it opens once placement is frozen. Not at the first config: a restarted member serves its own.
      const gaining: number[] = [];
      for (let slot = 0; slot < SLOT_COUNT; slot++) {
        const epoch = epochs[slot]!;
        const entersSync = syncing[slot]!.includes(name);
        const mine = entersSync || names[slot]!.includes(name);
        const now = table.read(slot);
        if (!mine && (now.state === 'open' || this.served[slot] === 1)) leaving.push(slot);
        if (now.epoch === epoch && now.state === (mine ? 'open' : 'fenced')) continue;
        // Not open, at another epoch: it did not take this hash slot's writes (it returned, or was fenced since an
        // older epoch). Fenced at this very epoch (self-fenced meanwhile), it missed none: writes wait for its word.
        if (entersSync && now.state !== 'open' && now.epoch !== epoch) entering.push(slot);
        else if (mine && this.appliedOnce && this.served[slot] === 0 && now.state !== 'open' && now.epoch !== epoch) gaining.push(slot);
        const into = mine ? opening : fencing;
        let list = into.get(epoch);
        if (!list) into.set(epoch, (list = []));
        list.push(slot);
      }
      // Fenced first: nothing this member stops serving stays open while a barrier waits.
      for (const [epoch, slots] of fencing) table.store(slots, epoch, 'fenced');
      if (entering.length > 0) {
        const dropped = await server.dropHashSlots(entering, namespace);
        logger.info({ namespace, epoch: config.epoch, hashSlots: entering.length, dropped }, 'epoch follower: syncing into hash slots: dropped what this member held of them');
      }
      // etcd unreadable: the round fails and is tried again (these words stay fenced), never opened with stale items.
      if (gaining.length > 0 && (await this.options.client.get(this.keys.frozen).string()) !== null) {
        const dropped = await server.dropHashSlots(gaining, namespace);
        logger.info({ namespace, epoch: config.epoch, hashSlots: gaining.length, dropped }, 'epoch follower: given hash slots without their keys: dropped what this member held of them from before');
      }
      for (const [epoch, slots] of opening) {
        if (this.closed) return undefined;
        // Self-fenced meanwhile: the barrier ends them fenced, not open.
        const report = await server.epochBarrier(slots, epoch, namespace, () => !selfFenced());
        if (selfFenced()) return undefined;
        logger.info({ namespace, epoch, hashSlots: slots.length, waitedFor: report.waitedFor, ms: Math.round(report.totalMs) }, 'epoch follower: hash slots open at a new epoch');
      }
      const fenced = [...fencing.values()].reduce((n, s) => n + s.length, 0);
      if (fenced > 0) logger.info({ namespace, epoch: config.epoch, hashSlots: fenced }, 'epoch follower: hash slots fenced (not a replica of them)');
      if (leaving.length > 0) this.left.set(namespace, leaving);
    }
    for (let slot = 0; slot < SLOT_COUNT; slot++) this.served[slot] = names[slot]!.includes(name) || syncing[slot]!.includes(name) ? 1 : 0;
    this.appliedOnce = true;
    // Syncing counts: a client reads only primaries, and one whose config is older than ours gets no lease (read-leases.ts).
    return names.some((replicas, slot) => replicas.includes(name) || syncing[slot]!.includes(name));
  }

  /** Stops following. A barrier running ends when the server closes (kv-server closes it next), not before. */
  async close(): Promise<void> {
    this.closed = true;
    void this.rounds.stop(); // drops a pending retry; the round running is not waited for (see above)
    await cancelWatch(this.watcher);
  }
}
