// Repair's copier (docs/replication-design.md §5). When the config this member
// has applied (epoch-follower.ts) makes it the primary of hash slots that have
// members syncing into them, it copies what it holds of them: it walks its own
// index for their keys (slot-items.ts), and writes each bytes item again as it
// is onto the syncing members, under its own bucket locks, with a KvClient of
// its own (a CAS on the version read that keeps that version, so a client's
// write that raced it is never undone: that write went to the syncing members
// too, and a client's CAS token survives the copy).
// Counters, whose words change only by NIC atomics, are created on each target
// with the word read from this region (client/repair.ts says why it holds
// still). Locks are not replicated. Every write of the hash slots since their
// syncing epoch already goes to the targets, and this member applied that
// epoch through its barrier before the walk, so the walk sees every key
// written before. Each item is written only onto the targets (client/repair.ts
// rewriteOnto: the hash slot's other replicas hold it already). When every key
// is copied it reports the ranges done, with their epoch, at
// repair/<target>/<this member>; the controller then makes each target a
// replica at a new epoch (controller.ts). A newer config during
// a copy abandons it and starts over from the new one (a range whose epoch
// moved needs a copy at its new epoch). It copies at most --repair-rate bytes a
// second (pacer.ts), and at most <prefix>/copy-rate's while one is set (kvctl
// rebalance --max-mbps) or a drain's (kvctl drain --max-mbps), 64 keys in flight. At a copy's start, about once a
// second during it and at its end it puts its progress at progress/<name>,
// under this member's lease, with what it copied since it started (kvctl
// rebalance --wait and drain --wait read them), and every ten seconds it logs it.
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';

import { KvClient } from '../../client/kv-client.js';
import { type RepairAccess, copyCounter, copyLock, rewriteOnto } from '../../client/repair.js';
import { KvError, type KvErrorCode } from '../../protocol/errors.js';
import { ItemType, KvLayout } from '../../protocol/constants.js';
import { counterSealed, counterValue, itemAtomicWord, lockSealed, lockVersion, slotBlock } from '../../protocol/index-format.js';
import { type ClusterConfig, type CopyProgress, type RepairRecord, etcdKeys, parseCopyRate, parseDrainRecord, slotsHeld } from '../../protocol/registry.js';
import type { RegionStore } from '../store/region.js';
import { Pacer } from './pacer.js';
import { SerialRounds } from './rounds.js';
import { type SlotKey, findLinked, hashSlotMask, keysOfHashSlots } from './slot-items.js';

export interface CopierOptions {
  /** This member's name in config. */
  name: string;
  prefix: string;
  /** For the repair records. */
  client: Etcd3;
  /** For the copier's own KvClient. */
  etcdHosts: string[];
  /** Each hosted namespace's region, its counters of what was copied (metrics), and its bucket locks. */
  namespaces: () => CopiedRegion[];
  /** A write token for the namespace (undefined: the server asks for none). */
  tokenFor: (namespace: string) => string | undefined;
  /** --repair-rate: bytes a second (0: no limit). */
  rateBytesPerSecond: number;
  /** This member's etcd lease (undefined while lost): its progress record lives under it. */
  leaseId: () => string | undefined;
  logger: Logger;
}

/** Keys copied at once. */
const IN_FLIGHT = 64;
/** A copy that failed (a target down, a timeout) is tried again this much later, unless a config comes first. */
const RETRY_MS = 1000;
/** The copier's client must see the config being copied for; it waits this long for its watch. */
const CONFIG_WAIT_MS = 10_000;
/** How long the targets may take to apply it (a drop of what they held included). */
const TARGET_WAIT_MS = 60_000;
/** How often the progress record is put (and the copy-rate record read); every tenth time it is logged too. */
const PROGRESS_MS = 1000;

/** What one run copied. */
export interface CopyReport {
  items: number;
  bytes: number;
  ms: number;
}

export class Copier {
  /** The config to copy for, and the signature of what it asks of this member. */
  private latest: ClusterConfig | undefined;
  private latestWork = '';
  private readonly rounds: SerialRounds;
  private closed = false;
  private readonly clients = new Map<string, Promise<KvClient>>();
  /** Per hash slot, what its last complete copy was for (intoText): a run for the same copies it not again. */
  private readonly copiedFor = new Map<number, string>();
  /** The copy under way (metrics, the progress record). */
  private progress: Progress | undefined;
  /** Items and bytes copied since this member started (the progress record). */
  private readonly totals = { items: 0, bytes: 0 };

  constructor(private readonly options: CopierOptions) {
    this.rounds = new SerialRounds(() => this.copyLatest(), {
      closed: () => this.closed,
      retryMs: RETRY_MS,
      failed: (error) => options.logger.warn({ err: error, epoch: this.latest?.epoch }, `repair: copy failed; trying again in ${RETRY_MS} ms`),
    });
  }

  /**
   * The follower applied `config`: copy what it asks of this member. A copy under way goes on if
   * the config asks the same of this member (same ranges, epochs and targets), else it is
   * abandoned for the new one.
   */
  configApplied(config: ClusterConfig): void {
    const work = this.workOf(config);
    if (work === this.latestWork && this.rounds.busy) return;
    this.latest = config;
    this.latestWork = work;
    void this.rounds.poke();
  }

  /** What `config` asks this member to copy, as a string: its ranges as primary with syncing members, their epochs and targets. */
  private workOf(config: ClusterConfig): string {
    const me = config.members.indexOf(this.options.name);
    return config.slots.filter((r) => r.replicas[0] === me && r.syncing.length > 0).map((r) => `${r.from}-${r.to}@${r.epoch}:${r.syncing.map((i) => config.members[i]).join(',')}`).join(' ');
  }

  /** Keys found and not yet copied by the copy under way (0: none): rdmakv_copy_keys_left. */
  get keysLeft(): number {
    return this.progress ? this.progress.keys - this.progress.done : 0;
  }

  /** Whether a copy for `work` is to be abandoned: closing, or a config asks something else now. */
  private abandoned(work: string): boolean {
    return this.closed || this.latestWork !== work;
  }

  /**
   * One round: copy for the latest config. A failed run forgets every hash slot it remembers as
   * copied (copiedFor): a target may have lost what it was copied (a restart), so the retry copies all.
   */
  private async copyLatest(): Promise<void> {
    const config = this.latest;
    try {
      if (config) await this.copyFor(config, this.latestWork);
    } catch (error) {
      this.copiedFor.clear();
      throw error;
    }
  }

  /** Copies every range this member is primary of and others sync into, at `config`'s epochs; then reports them done. */
  private async copyFor(config: ClusterConfig, work: string): Promise<void> {
    const me = config.members.indexOf(this.options.name);
    const ranges = config.slots.filter((r) => r.replicas[0] === me && r.syncing.length > 0);
    if (me < 0 || ranges.length === 0) return;
    const targets = [...new Set(ranges.flatMap((r) => r.syncing))].map((i) => config.members[i]!);
    const hashSlots = ranges.flatMap((r) => Array.from({ length: r.to - r.from + 1 }, (_, k) => r.from + k));
    const syncingOf = new Map<number, Into>();
    for (const r of ranges) {
      const into = { targets: r.syncing.map((i) => config.members[i]!), epoch: r.epoch };
      for (let slot = r.from; slot <= r.to; slot++) syncingOf.set(slot, into);
    }
    // Hash slots copied already for the same epoch and targets by an earlier run are not copied again
    // (a rebalance's config moved others meanwhile); the records name them all.
    const toCopy = hashSlots.filter((slot) => this.copiedFor.get(slot) !== intoText(syncingOf.get(slot)!));
    const started = performance.now();
    const report: CopyReport = { items: 0, bytes: 0, ms: 0 };
    const pacer = new Pacer(this.options.rateBytesPerSecond);
    const { logger } = this.options;
    logger.info({ epoch: config.epoch, hashSlots: toCopy.length, copiedBefore: hashSlots.length - toCopy.length, targets }, 'repair: copying hash slots to the members syncing into them');
    const progress = (this.progress = { epoch: config.epoch, keys: 0, done: 0, bytes: 0, since: new Date().toISOString() });
    const ticker = this.tick(progress, pacer, config, toCopy.length, targets);
    await ticker.last(); // before the first key: a cap set with the rebalance holds from the start
    let finished = false;
    try {
      if (toCopy.length > 0) await this.copyRanges(config, work, { hashSlots: toCopy, syncingOf, report, pacer, progress });
      finished = !this.abandoned(work);
    } finally {
      clearInterval(ticker.timer);
      await ticker.last(); // its put must not land after the last one
      this.progress = undefined;
      await this.putProgress(progress, false).catch(() => undefined);
    }
    if (!finished) return;
    report.ms = performance.now() - started;
    // One transaction: the controller promotes every target of a range at once (a promotion moves the range's epoch).
    const { client } = this.options;
    const keys = etcdKeys(this.options.prefix);
    const puts = targets.map((target) => {
      const t = config.members.indexOf(target);
      const record: RepairRecord = {
        copied: ranges.filter((r) => r.syncing.includes(t)).map(({ from, to, epoch }) => ({ from, to, epoch })),
        items: report.items,
        bytes: report.bytes,
        at: new Date().toISOString(),
      };
      return client.put(keys.repairKey(target, this.options.name)).value(JSON.stringify(record));
    });
    await client.if(keys.config, 'Create', '>', 0).then(...puts).commit();
    const mbps = report.bytes / 1e6 / Math.max(report.ms / 1000, 1e-3);
    logger.warn({ epoch: config.epoch, hashSlots: hashSlots.length, targets, items: report.items, bytes: report.bytes, ms: Math.round(report.ms), mbps: Number(mbps.toFixed(1)) }, 'repair: copy done');
  }

  /**
   * At once and every PROGRESS_MS while a copy runs: the copy-rate cap is read and applied, the progress record
   * put under this member's lease (it goes with the member), and every tenth time logged. Failures
   * are let be: the next tick tries again.
   */
  private tick(progress: Progress, pacer: Pacer, config: ClusterConfig, hashSlots: number, targets: string[]): { timer: NodeJS.Timeout; last: () => Promise<void> } {
    const { logger } = this.options;
    let ticks = 0;
    let last = { at: performance.now(), bytes: 0 };
    let running: Promise<void> = Promise.resolve();
    const once = () => {
      running = running.then(async () => {
        await this.capRate(pacer, config);
        if (this.progress === progress) await this.putProgress(progress, true);
        if (++ticks % 10 === 0) {
          const now = performance.now();
          const mbps = (progress.bytes - last.bytes) / 1e3 / Math.max(now - last.at, 1);
          last = { at: now, bytes: progress.bytes };
          logger.info({ epoch: progress.epoch, hashSlots, targets, keys: progress.keys, done: progress.done, bytes: progress.bytes, mbps: Number(mbps.toFixed(1)) }, 'repair: copying');
        }
      }).catch(() => undefined);
    };
    once();
    return { timer: setInterval(once, PROGRESS_MS), last: () => running };
  }

  /** Puts progress/<name>: the copy `progress` (running or ended), and what was copied since this member started. */
  private async putProgress(progress: Progress, running: boolean): Promise<void> {
    const leaseId = this.options.leaseId();
    if (leaseId === undefined) return;
    const record: CopyProgress = { ...progress, running, totalItems: this.totals.items, totalBytes: this.totals.bytes };
    await this.options.client.put(etcdKeys(this.options.prefix).progressKey(this.options.name)).value(JSON.stringify(record)).lease(leaseId);
  }

  /**
   * Paces at the lowest cap in force: <prefix>/copy-rate's (kvctl rebalance --max-mbps), each drain's
   * whose member still holds hash slots (kvctl drain --max-mbps: while it runs, every copy of the
   * cluster goes at most at its rate, repairs included), and --repair-rate's. An unreadable
   * copy-rate record sets no cap.
   */
  private async capRate(pacer: Pacer, config: ClusterConfig): Promise<void> {
    const keys = etcdKeys(this.options.prefix);
    const [rateText, drains] = await Promise.all([this.options.client.get(keys.copyRate).string(), this.options.client.getAll().prefix(keys.drain).strings()]);
    const caps = [this.options.rateBytesPerSecond, parseCopyRate(rateText) ?? 0];
    for (const [key, text] of Object.entries(drains)) {
      if (slotsHeld(config, key.slice(keys.drain.length)) > 0) caps.push(parseDrainRecord(text)?.maxBytesPerSecond ?? 0);
    }
    const set = caps.filter((cap) => cap > 0);
    pacer.setRate(set.length > 0 ? Math.min(...set) : 0);
  }

  /** The copy itself: each namespace's keys of the hash slots, onto their targets. Throws on a failed key; returns early once abandoned. */
  private async copyRanges(config: ClusterConfig, work: string, run: { hashSlots: number[]; syncingOf: Map<number, Into>; report: CopyReport; pacer: Pacer; progress: Progress }): Promise<void> {
    const { hashSlots, syncingOf, report, pacer, progress } = run;
    const targets = [...new Set([...syncingOf.values()].flatMap((into) => into.targets))];
    const regions = this.options.namespaces();
    // A hash slot whose keys are copied in every namespace is done for its epoch and targets (copiedFor), even
    // if this run is abandoned later: a run for the same need not copy it again.
    const complete = new Map<number, number>();
    const slotDone = (slot: number) => {
      const namespaces = (complete.get(slot) ?? 0) + 1;
      complete.set(slot, namespaces);
      if (namespaces === regions.length) this.copiedFor.set(slot, intoText(syncingOf.get(slot)!));
    };
    for (const region of regions) {
      const access = await this.accessFor(region.name, config.epoch, work);
      await this.targetsApplied(access, targets, config.epoch, work);
      if (this.abandoned(work)) return;
      // The walk returns what it found so far when it stops early: then nothing may count as done (slotDone below).
      let stopped = false;
      const keys = await keysOfHashSlots(region.store, hashSlotMask(hashSlots), () => (stopped ||= this.abandoned(work)));
      if (stopped) return;
      progress.keys += keys.length;
      // Counters first: a replicated INCR of one waits while a target lacks it. Then hash slot by hash slot, so
      // that a run abandoned midway leaves whole hash slots done (slotDone) rather than parts of each.
      keys.sort((x, y) => Number(x.type !== ItemType.COUNTER) - Number(y.type !== ItemType.COUNTER) || x.hashSlot - y.hashSlot);
      const pending = new Map<number, number>();
      for (const { hashSlot } of keys) pending.set(hashSlot, (pending.get(hashSlot) ?? 0) + 1);
      for (const slot of hashSlots) if (!pending.has(slot)) slotDone(slot);
      let next = 0;
      let failed: { error: unknown } | undefined;
      const worker = async (): Promise<void> => {
        while (next < keys.length && failed === undefined && !this.abandoned(work)) {
          const key = keys[next++]!;
          try {
            const bytes = await this.copyKey(access, region, key, syncingOf.get(key.hashSlot)!);
            report.items += bytes > 0 ? 1 : 0;
            report.bytes += bytes;
            progress.done++;
            progress.bytes += bytes;
            this.totals.items += bytes > 0 ? 1 : 0;
            this.totals.bytes += bytes;
            region.copied(bytes > 0 ? 1 : 0, bytes);
            const left = pending.get(key.hashSlot)! - 1;
            pending.set(key.hashSlot, left);
            if (left === 0) slotDone(key.hashSlot);
            const wait = pacer.spent(bytes);
            if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
          } catch (error) {
            failed ??= { error }; // the other workers stop at their next key
          }
        }
      };
      await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
      if (failed) throw failed.error;
      if (this.abandoned(work)) return; // a newer config: the next run copies for it
    }
  }

  /** Copies one key; resolves the bytes it copied (0: gone since the walk, a lock, or already on the targets). */
  private async copyKey(access: RepairAccess, region: CopiedRegion, { key }: SlotKey, { targets, epoch }: Into): Promise<number> {
    // The type is the linked item's now, not the heap block's the key was found in (an old one may be another's).
    const type = findLinked(region.store, key)?.type ?? ItemType.BYTES;
    if (type === ItemType.BYTES) {
      // Gone since the walk (its DELETE went to the targets too): false. A counter now: copied as one.
      const valueLength = await withRetries(() => rewriteOnto(access, key, this.options.name, targets, epoch)).catch((error: unknown) => {
        if (error instanceof KvError && error.code === 'KV_TYPE_MISMATCH') return 'counter' as const;
        throw error;
      });
      if (valueLength !== 'counter') return valueLength === false ? 0 : KvLayout.ITEM_HEADER_BYTES + key.length + valueLength;
    } else if (type !== ItemType.COUNTER && type !== ItemType.LOCK) {
      return 0;
    }
    return this.copyAtomic(access, region, key, targets);
  }

  /**
   * Creates counter or lock `key` on the targets that lack it, holding its bucket locks here; resolves the bytes
   * copied. A lock is created free, above its token here (client/repair.ts, copyLock).
   */
  private copyAtomic(access: RepairAccess, region: CopiedRegion, key: Buffer, targets: string[]): Promise<number> {
    // Under the key's bucket locks here, no DELETE or creation of it comes between our look at the word and
    // the creation on the targets; INCRs of it wait while a target lacks it (client/repair.ts).
    return region.underBucketLocks(key, async () => {
      // What the key is now (copyKey's look came before its locks; a bytes item then may be a counter now):
      // anything but a counter or lock is gone since, or was written since, onto the targets too.
      const linked = findLinked(region.store, key);
      if (linked === undefined || (linked.type !== ItemType.COUNTER && linked.type !== ItemType.LOCK)) return 0;
      const { type } = linked;
      const word = itemAtomicWord(region.store.bytes, region.store.itemAt(slotBlock(linked.slot)));
      if (type === ItemType.COUNTER ? counterSealed(word) : lockSealed(word)) return 0; // being deleted, on the targets too
      let copied = 0;
      for (const target of targets) {
        const made = type === ItemType.COUNTER ? await copyCounter(access, key, counterValue(word), target) : await copyLock(access, key, lockVersion(word), target);
        if (made) copied += KvLayout.ITEM_HEADER_BYTES + key.length;
      }
      return copied;
    });
  }

  /**
   * Waits until every target says (in its pongs) it has applied `epoch`: it has dropped what it
   * held of the hash slots it syncs into and opened them. Before that a look at what it holds
   * (copyCounter's) could see items about to be dropped.
   */
  private async targetsApplied(access: RepairAccess, targets: readonly string[], epoch: number, work: string): Promise<void> {
    const deadline = performance.now() + TARGET_WAIT_MS;
    while (!this.abandoned(work) && targets.some((name) => (access.member(name)?.appliedConfigEpoch ?? 0) < epoch)) {
      if (performance.now() > deadline) throw new Error(`repair: the targets ${targets.join(', ')} have not applied config epoch ${epoch} after ${TARGET_WAIT_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** The KvClient for `namespace`, once its config has reached `epoch` (its writes must go to the syncing members). */
  private async accessFor(namespace: string, epoch: number, work: string): Promise<RepairAccess> {
    let pending = this.clients.get(namespace);
    if (!pending) {
      const token = this.options.tokenFor(namespace);
      // Event mode: a copy is background work in the server's own process, and a client spinning on its
      // completions would take a core from the server's etcd keepalives (the Soft-RoCE guest: self-fences).
      const etcd = { hosts: this.options.etcdHosts, prefix: this.options.prefix };
      pending = KvClient.connect({ etcd, namespace, ...(token === undefined ? {} : { token }), timeoutMs: 10_000, pollMode: 'event' });
      pending.catch(() => this.clients.delete(namespace));
      this.clients.set(namespace, pending);
    }
    const access = (await pending).repairAccess();
    // Reads of our own items count even while this member grants no read lease (quiet for a handoff or a drain,
    // or self-fenced for a moment): each is checked by the CAS that follows it (client/repair.ts, rewriteOnto).
    access.member(this.options.name)?.readWithoutLease();
    const deadline = performance.now() + CONFIG_WAIT_MS;
    while ((access.configEpoch() ?? 0) < epoch && !this.abandoned(work)) {
      if (performance.now() > deadline) throw new Error(`repair: the copier's client has not seen config epoch ${epoch} after ${CONFIG_WAIT_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return access;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.rounds.stop();
    for (const pending of this.clients.values()) await pending.then((c) => c.close()).catch(() => undefined);
  }
}

/** A copy's targets and the epoch of its range. */
interface Into {
  targets: string[];
  epoch: number;
}

/** A copy under way, as the progress record says it (without what the record adds). */
type Progress = Omit<CopyProgress, 'running' | 'totalItems' | 'totalBytes'>;

/** A copy's signature: the same epoch and targets ask for the same copy (every write since went to those targets too). */
function intoText({ targets, epoch }: Into): string {
  return `${epoch}:${targets.join(',')}`;
}

/** What the copier uses of one namespace (KvServer.regionStores). */
interface CopiedRegion {
  name: string;
  store: RegionStore;
  copied: (items: number, bytes: number) => void;
  underBucketLocks: <T>(key: Buffer, task: () => Promise<T>) => Promise<T>;
}

/**
 * A key's copy, tried again after a moment when it timed out (a target's word closed by a barrier, or this
 * member self-fenced for a moment), or when its GET's answer came after the read lease (only before
 * readWithoutLease reached a new session): nothing was written then, and the CAS after the GET checks the
 * version anyway. Other failures, or too many tries, end the run: it is tried again, but from its first hash
 * slot not yet copied.
 */
export async function withRetries<T>(copy: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await copy();
    } catch (error) {
      const tries = error instanceof KvError ? KEY_TRIES[error.code] : undefined;
      if (tries === undefined || attempt >= tries) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
    }
  }
}

/** How many times one key's copy is tried on each error that may pass (50 ms more between tries each time: 0.5 s, 9.5 s). */
const KEY_TRIES: Partial<Record<KvErrorCode, number>> = { KV_TIMEOUT: 5, KV_READ_LEASE_LAPSED: 20 };
