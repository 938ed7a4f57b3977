// A member's side of moving hash slots' primary away from it (docs/cluster.md,
// "Draining a member" and "Rebalancing"). The controller gives such hash slots
// to their new primary only once no client can still count a read of this
// member: a client routing by the old config would read its stale values after
// the new primary takes writes. Two records ask for that:
//   - <prefix>/drain/<name> (kvctl drain): every hash slot leaves this member;
//   - <prefix>/handoff/<name> (kvctl rebalance): some do, it keeps the others.
// When either says `quiesce`, this member grants no more read leases (hellos
// and pongs say 0, sessions/read-leases.ts), waits until every lease it granted
// has ended (each ends no later than its grant time plus its length, as the
// client counts it from before it asked), and sets that record to `quiet`.
// Reads here meanwhile fail KV_READ_LEASE_LAPSED, which clients' failover waits
// retry until the config that moved them arrives. A drained member stays so
// (it holds nothing); a handoff says `moved` with the epoch of the config that
// moved the hash slots, and this member grants leases again once it has
// applied that config (leases carry the epoch applied, so a client still
// routing by an older config counts none), then removes the record.
// While a rebalance is pending (<prefix>/target) or this member's drain copies,
// its leases are short (SHORT_LEASE_MS): when the quiesce comes, reads stall
// only until those end, not for a whole lease (up to half of --etcd-ttl).
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import type { Logger } from 'pino';

import { type DrainRecord, cancelWatch, etcdKeys, parseDrainRecord, parseHandoffRecord } from '../../protocol/registry.js';

/** Added to the last lease's end: timer lateness is on the safe side, this covers rounding. */
const MARGIN_MS = 20;
/** The longest read lease granted while a quiesce may come (clients renew at half of it). */
export const SHORT_LEASE_MS = 500;
/** How often a member whose hash slots moved looks whether it has applied that config yet. */
const APPLIED_POLL_MS = 100;

type Kind = 'drain' | 'handoff';

/** What one record says now. */
interface RecordState {
  /** No lease while this holds (and `until` is above the applied epoch, when set). */
  quiescing: boolean;
  /** `moved`: leases again once this epoch is applied. */
  untilEpoch?: number;
  kv?: IKeyValue;
}

export class Quiesce {
  /** By when (performance.now()) every read lease this member granted has ended. */
  private grantedUntil = 0;
  private readonly states = new Map<Kind, RecordState>([['drain', { quiescing: false }], ['handoff', { quiescing: false }]]);
  private readonly timers = new Map<Kind, NodeJS.Timeout>();
  private readonly watchers: Watcher[] = [];
  private closed = false;
  /** Whether <prefix>/target exists: a rebalance may ask this member to quiesce. */
  private rebalancing = false;
  private readonly keys: Record<Kind, string>;
  private readonly targetKey: string;

  private constructor(
    private readonly client: Etcd3,
    prefix: string,
    private readonly name: string,
    /** The epoch of the config this member has applied (epoch-follower.ts). */
    private readonly appliedEpoch: () => number,
    private readonly logger: Logger,
  ) {
    const keys = etcdKeys(prefix);
    this.keys = { drain: keys.drainKey(name), handoff: keys.handoffKey(name) };
    this.targetKey = keys.target;
  }

  /** Watches this member's drain and handoff records (and reads them once: a member restarted while quiescing goes on). */
  static async start(client: Etcd3, prefix: string, name: string, appliedEpoch: () => number, logger: Logger): Promise<Quiesce> {
    const quiesce = new Quiesce(client, prefix, name, appliedEpoch, logger);
    for (const kind of ['drain', 'handoff'] as const) {
      const watcher = await client.watch().key(quiesce.keys[kind]).create();
      quiesce.watchers.push(watcher);
      watcher.on('put', (kv) => quiesce.seen(kind, kv));
      watcher.on('delete', () => quiesce.seen(kind, undefined));
      watcher.on('connected', () => void quiesce.reread(kind));
      watcher.on('error', (error) => logger.warn({ err: error }, `${kind}: etcd watch failed; it retries`));
      await quiesce.reread(kind);
    }
    const target = await client.watch().key(quiesce.targetKey).create();
    quiesce.watchers.push(target);
    target.on('put', () => void (quiesce.rebalancing = true));
    target.on('delete', () => void (quiesce.rebalancing = false));
    target.on('connected', () => void quiesce.rereadTarget());
    target.on('error', (error) => logger.warn({ err: error }, 'rebalance: etcd watch failed; it retries'));
    await quiesce.rereadTarget();
    return quiesce;
  }

  /** The read lease to grant now: none while quiescing; else `leaseMs`, whose end is remembered. */
  lease(leaseMs: number | undefined): number | undefined {
    if (this.quiescing()) return undefined;
    const drain = this.states.get('drain')!;
    if (leaseMs !== undefined && (this.rebalancing || drain.kv !== undefined)) leaseMs = Math.min(leaseMs, SHORT_LEASE_MS);
    if (leaseMs !== undefined && leaseMs > 0) this.grantedUntil = Math.max(this.grantedUntil, performance.now() + leaseMs);
    return leaseMs;
  }

  close(): void {
    this.closed = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    for (const watcher of this.watchers) void cancelWatch(watcher);
  }

  private quiescing(): boolean {
    for (const state of this.states.values()) {
      if (!state.quiescing) continue;
      if (state.untilEpoch === undefined || this.appliedEpoch() < state.untilEpoch) return true;
    }
    return false;
  }

  private async rereadTarget(): Promise<void> {
    try {
      this.rebalancing = (await this.client.get(this.targetKey).exec()).kvs.length > 0;
    } catch (error) {
      this.logger.warn({ err: error }, 'rebalance: cannot read the target; the watch tells');
    }
  }

  private async reread(kind: Kind): Promise<void> {
    try {
      const read = await this.client.get(this.keys[kind]).exec();
      this.seen(kind, read.kvs[0]);
    } catch (error) {
      this.logger.warn({ err: error }, `${kind}: cannot read this member's ${kind} record; the watch tells`);
    }
  }

  private seen(kind: Kind, kv: IKeyValue | undefined): void {
    if (this.closed) return;
    const before = this.quiescing();
    const text = kv?.value.toString();
    let phase: string | undefined;
    let untilEpoch: number | undefined;
    let since: string | undefined;
    let drain: DrainRecord | undefined;
    if (kv !== undefined && kind === 'drain') {
      drain = parseDrainRecord(text!);
      phase = drain?.phase ?? 'copying';
      since = drain?.since;
    } else if (kv !== undefined) {
      const record = parseHandoffRecord(text!);
      phase = record?.phase ?? 'quiesce';
      untilEpoch = record?.epoch;
      since = record?.since;
    }
    this.states.set(kind, { quiescing: phase !== undefined && phase !== 'copying', untilEpoch, kv });
    const after = this.quiescing();
    if (after && !before) this.logger.warn({ member: this.name, record: kind }, `${kind}: granting no more read leases; hash slots go to their new primaries once the granted ones end`);
    if (!after && before) this.logger.warn({ member: this.name, record: kind }, `${kind}: granting read leases again`);
    clearTimeout(this.timers.get(kind));
    if (kv && phase === 'quiesce') {
      // A record as the formats say, whatever was there (an unreadable one counts as `quiesce`).
      // A drain record keeps its other fields (its --max-mbps: a failover may have copies start over).
      const quiet = JSON.stringify({ ...drain, since: since ?? new Date().toISOString(), phase: 'quiet' });
      this.later(kind, () => void this.sayQuiet(kind, kv.mod_revision, quiet), Math.max(0, this.grantedUntil - performance.now()) + MARGIN_MS);
    }
    if (kv && phase === 'moved') this.later(kind, () => void this.removeMoved(kind, kv.mod_revision), 0);
  }

  private later(kind: Kind, run: () => void, ms: number): void {
    const timer = setTimeout(run, ms);
    timer.unref();
    this.timers.set(kind, timer);
  }

  /** Every lease granted has ended: say so, unless the record changed meanwhile (a cancel). */
  private async sayQuiet(kind: Kind, modRevision: string, quiet: string): Promise<void> {
    const key = this.keys[kind];
    try {
      const put = await this.client.if(key, 'Mod', '==', modRevision).then(this.client.put(key).value(quiet)).commit();
      if (put.succeeded) this.logger.warn({ member: this.name, record: kind }, `${kind}: every read lease granted here has ended`);
    } catch (error) {
      if (this.closed) return;
      this.logger.warn({ err: error }, `${kind}: cannot say quiet; trying again`);
      this.later(kind, () => void this.sayQuiet(kind, modRevision, quiet), 500);
    }
  }

  /** A handoff done: once its config is applied here (leases are granted again from then on), the record goes. */
  private async removeMoved(kind: Kind, modRevision: string): Promise<void> {
    if (this.closed) return;
    const { untilEpoch } = this.states.get(kind)!;
    if (untilEpoch !== undefined && this.appliedEpoch() < untilEpoch) {
      this.later(kind, () => void this.removeMoved(kind, modRevision), APPLIED_POLL_MS);
      return;
    }
    const key = this.keys[kind];
    try {
      await this.client.if(key, 'Mod', '==', modRevision).then(this.client.delete().key(key)).commit();
    } catch (error) {
      if (this.closed) return;
      this.logger.warn({ err: error }, `${kind}: cannot remove the record; trying again`);
      this.later(kind, () => void this.removeMoved(kind, modRevision), 500);
    }
  }
}
