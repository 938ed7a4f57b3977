// Repair's copier (docs/replication-design.md §5). When the config this member
// has applied (epoch-follower.ts) makes it the primary of hash slots that have
// members syncing into them, it copies what it holds of them: it walks its own
// index for their keys (slot-items.ts), and writes each bytes item again as it
// is through the hash slot's replica set, syncing members included, with a
// KvClient of its own (a CAS on the version read, so a client's write that
// raced it is never undone: that write went to the syncing members too).
// Counters, whose words change only by NIC atomics, are created on each target
// with the word read from this region (client/repair.ts says why it holds
// still). Locks are not replicated. Every write of the hash slots since their
// syncing epoch already goes to the targets, and this member applied that
// epoch through its barrier before the walk, so the walk sees every key
// written before. When every key is copied it reports the ranges done, with
// their epoch, at repair/<target>/<this member>; the controller then makes
// each target a replica at a new epoch (controller.ts). A newer config during
// a copy abandons it and starts over from the new one (a range whose epoch
// moved needs a copy at its new epoch). It copies at most --repair-rate bytes a
// second (pacer.ts), 64 keys in flight.
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';

import { KvClient } from '../../client/kv-client.js';
import { type RepairAccess, copyCounter } from '../../client/repair.js';
import { ItemHeader, ItemType, KvLayout } from '../../protocol/constants.js';
import { counterSealed, counterValue, itemAtomicWord, slotBlock } from '../../protocol/index-format.js';
import { type ClusterConfig, type RepairRecord, etcdKeys } from '../../protocol/registry.js';
import type { RegionStore } from '../store/region.js';
import { Pacer } from './pacer.js';
import { type SlotItem, hashSlotMask, itemsOfHashSlots } from './slot-items.js';

export interface CopierOptions {
  /** This member's name in config. */
  name: string;
  prefix: string;
  /** For the repair records. */
  client: Etcd3;
  /** For the copier's own KvClient. */
  etcdHosts: string[];
  /** Each hosted namespace's region, and its counters of what was copied (metrics). */
  namespaces: () => Array<{ name: string; store: RegionStore; copied: (items: number, bytes: number) => void }>;
  /** A write token for the namespace (undefined: the server asks for none). */
  tokenFor: (namespace: string) => string | undefined;
  /** --repair-rate: bytes a second (0: no limit). */
  rateBytesPerSecond: number;
  logger: Logger;
}

/** Keys copied at once. */
const IN_FLIGHT = 64;
/** A copy that failed (a target down, a timeout) is tried again this much later, unless a config comes first. */
const RETRY_MS = 1000;
/** The copier's client must see the config being copied for; it waits this long for its watch. */
const CONFIG_WAIT_MS = 10_000;

/** What one run copied. */
export interface CopyReport {
  items: number;
  bytes: number;
  ms: number;
}

export class Copier {
  private latest: ClusterConfig | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;
  private readonly clients = new Map<string, Promise<KvClient>>();
  /** Totals since start (metrics). */
  readonly totals = { items: 0, bytes: 0, copies: 0 };
  /** Hash slots being copied from this member now, and their targets (kvctl layout's progress). */
  progress: { hashSlots: number; items: number; copied: number; targets: string[] } | undefined;

  constructor(private readonly options: CopierOptions) {}

  /** The follower applied `config`: copy what it asks of this member (after the run going on, which it abandons). */
  configApplied(config: ClusterConfig): void {
    this.latest = config;
    void this.poke();
  }

  private poke(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        const config = this.latest;
        if (!config) break;
        try {
          await this.copyFor(config);
        } catch (error) {
          if (this.closed) break;
          this.options.logger.warn({ err: error, epoch: config.epoch }, `repair: copy failed; trying again in ${RETRY_MS} ms`);
          clearTimeout(this.retry);
          this.retry = setTimeout(() => void this.poke(), RETRY_MS);
        }
      } while (this.again && !this.closed);
      this.running = undefined;
      this.progress = undefined;
    })();
    return this.running;
  }

  /** Copies every range this member is primary of and others sync into, at `config`'s epochs; then reports them done. */
  private async copyFor(config: ClusterConfig): Promise<void> {
    const me = config.members.indexOf(this.options.name);
    const ranges = config.slots.filter((r) => r.replicas[0] === me && r.syncing.length > 0);
    if (me < 0 || ranges.length === 0) return;
    const targets = [...new Set(ranges.flatMap((r) => r.syncing))].map((i) => config.members[i]!);
    const hashSlots = ranges.flatMap((r) => Array.from({ length: r.to - r.from + 1 }, (_, k) => r.from + k));
    const syncingOf = new Map<number, string[]>();
    for (const r of ranges) for (let slot = r.from; slot <= r.to; slot++) syncingOf.set(slot, r.syncing.map((i) => config.members[i]!));
    const started = performance.now();
    const report: CopyReport = { items: 0, bytes: 0, ms: 0 };
    const pacer = new Pacer(this.options.rateBytesPerSecond);
    const { logger } = this.options;
    logger.info({ epoch: config.epoch, hashSlots: hashSlots.length, targets }, 'repair: copying hash slots to the members syncing into them');
    for (const { name: namespace, store, copied } of this.options.namespaces()) {
      const access = await this.accessFor(namespace, config.epoch);
      const items = await itemsOfHashSlots(store, hashSlotMask(hashSlots), () => this.closed || this.latest !== config);
      // Counters first: a replicated INCR of one waits while a target lacks it.
      items.sort((x, y) => Number(x.type !== ItemType.COUNTER) - Number(y.type !== ItemType.COUNTER));
      this.progress = { hashSlots: hashSlots.length, items: items.length, copied: 0, targets };
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < items.length) {
          if (this.closed || this.latest !== config) return;
          const item = items[next++]!;
          const bytes = await this.copyItem(access, store, item, syncingOf.get(item.hashSlot)!);
          report.bytes += bytes;
          report.items++;
          this.progress!.copied++;
          copied(bytes > 0 ? 1 : 0, bytes);
          const wait = pacer.spent(bytes);
          if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        }
      };
      await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
      if (this.closed || this.latest !== config) return; // a newer config: the next run copies for it
    }
    report.ms = performance.now() - started;
    this.totals.items += report.items;
    this.totals.bytes += report.bytes;
    this.totals.copies++;
    for (const target of targets) {
      const t = config.members.indexOf(target);
      const record: RepairRecord = {
        copied: ranges.filter((r) => r.syncing.includes(t)).map(({ from, to, epoch }) => ({ from, to, epoch })),
        items: report.items,
        bytes: report.bytes,
        at: new Date().toISOString(),
      };
      await this.options.client.put(etcdKeys(this.options.prefix).repairKey(target, this.options.name)).value(JSON.stringify(record));
    }
    const mbps = report.bytes / 1e6 / Math.max(report.ms / 1000, 1e-3);
    logger.warn({ epoch: config.epoch, hashSlots: hashSlots.length, targets, items: report.items, bytes: report.bytes, ms: Math.round(report.ms), mbps: Number(mbps.toFixed(1)) }, 'repair: copy done');
  }

  /** Copies one item; resolves the bytes it copied (0: gone since the walk, a lock, or already on the targets). */
  private async copyItem(access: RepairAccess, store: RegionStore, item: SlotItem, targets: string[]): Promise<number> {
    if (item.type === ItemType.BYTES) {
      // Gone since the walk: its DELETE went to the targets too.
      return (await access.rewrite(item.key)) ? itemBytes(store, item) : 0;
    }
    if (item.type !== ItemType.COUNTER) return 0; // locks are not replicated (a replicated cluster refuses LOCK)
    // Still this item? (The slot changes only under its bucket lock; a stale read is caught by the seal.)
    if (store.index.slot(item.bucket, item.i) !== item.slot) return 0;
    const word = itemAtomicWord(store.bytes, store.itemAt(slotBlock(item.slot)));
    if (counterSealed(word)) return 0; // being deleted, on the targets too
    let copied = 0;
    for (const target of targets) if (await copyCounter(access, item.key, counterValue(word), target)) copied += itemBytes(store, item);
    return copied;
  }

  /** The KvClient for `namespace`, once its config has reached `epoch` (its writes must go to the syncing members). */
  private async accessFor(namespace: string, epoch: number): Promise<RepairAccess> {
    let pending = this.clients.get(namespace);
    if (!pending) {
      const token = this.options.tokenFor(namespace);
      pending = KvClient.connect({ etcd: { hosts: this.options.etcdHosts, prefix: this.options.prefix }, namespace, ...(token === undefined ? {} : { token }), timeoutMs: 10_000 });
      pending.catch(() => this.clients.delete(namespace));
      this.clients.set(namespace, pending);
    }
    const access = (await pending).repairAccess();
    const deadline = performance.now() + CONFIG_WAIT_MS;
    while ((access.configEpoch() ?? 0) < epoch) {
      if (performance.now() > deadline) throw new Error(`repair: the copier's client has not seen config epoch ${epoch} after ${CONFIG_WAIT_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return access;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    await this.running;
    for (const pending of this.clients.values()) await pending.then((c) => c.close()).catch(() => undefined);
  }
}

/** An item's bytes (header, key, value), as the walk read it. */
function itemBytes(store: RegionStore, item: SlotItem): number {
  const at = store.itemAt(slotBlock(item.slot));
  return KvLayout.ITEM_HEADER_BYTES + item.key.length + store.bytes.readUInt32LE(at + ItemHeader.VALUE_LEN);
}
