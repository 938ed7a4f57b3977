// The keys and bytes this member holds per hash slot, for kvctl rebalance --by
// bytes (protocol/balance-by-bytes.ts): every namespace's index is walked in
// the background, in chunks (a setImmediate between them, so grants and
// notices are served), and the counts are put at <prefix>/load/<name> under
// this member's lease (they go with it) when they changed. A walk starts
// LOAD_INTERVAL_MS after the last one ended, or twenty times its own length
// when that is longer: the walk costs at most about 5 % of a core; and at once
// when a member that held no key takes one (its live item count, polled). The CPU
// only reads; each entry's item header is bounds-checked before its key is
// hashed, and an entry that moves while the walk passes (a displacement) may
// be missed or counted twice: the counts are an estimate, as a rebalance by
// bytes needs (a hash slot is its unit). The controller reads the records
// too: a cluster whose members hold keys is never placed directly (clusterLoad).
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';

import { ItemHeader, ItemType, KvLayout } from '../../protocol/constants.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { type LoadRecord, etcdKeys, parseLoadRecord } from '../../protocol/registry.js';
import type { RegionStore } from '../store/region.js';

/** The least time between two walks' starts. */
const LOAD_INTERVAL_MS = 5000;
/** Buckets read between two turns of the event loop. */
const CHUNK_BUCKETS = 4096;
/** A walk waits at least this many times its own length before the next one. */
const IDLE_FACTOR = 20;

export interface SlotLoadOptions {
  name: string;
  prefix: string;
  client: Etcd3;
  stores: () => RegionStore[];
  /** The items this member holds now (the stats' live count): a first key is published at once, not a walk later. */
  itemsHeld: () => number;
  leaseId: () => string | undefined;
  logger: Logger;
  /** Tests only (RKV_TEST_LOAD_INTERVAL_MS): walks this far apart, and no early walk on a first key, as a record that lags. */
  intervalMs?: number;
}

/** How often the live item count is looked at, for a walk at once when the member goes from holding none to some. */
const ITEMS_POLL_MS = 200;

export class SlotLoad {
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private walking: Promise<void> = Promise.resolve();
  /** What was last put (its slots, keys and bytes), to put only a change. */
  private lastPut = '';
  /** Whether the last walk found any key; undefined before the first. */
  private heldKeys: boolean | undefined;
  private readonly poll: NodeJS.Timeout | undefined;

  private constructor(private readonly options: SlotLoadOptions) {
    // The controller places a joining member directly only while every record says empty (clusterLoad):
    // a member's first key must not wait out a whole interval to show.
    if (options.intervalMs === undefined) {
      this.poll = setInterval(() => {
        if (this.heldKeys === false && options.itemsHeld() > 0 && this.timer !== undefined) this.schedule(0);
      }, ITEMS_POLL_MS);
      this.poll.unref();
    }
  }

  static start(options: SlotLoadOptions): SlotLoad {
    const load = new SlotLoad(options);
    load.schedule(0);
    return load;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.poll);
    await this.walking;
  }

  /** The next walk in `ms` (one pending is replaced; none starts while one runs: timer is unset then). */
  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.closed) return;
    const interval = this.options.intervalMs ?? LOAD_INTERVAL_MS;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.walking = this.walkAndPut().then(
        (took) => this.schedule(Math.max(interval, took * IDLE_FACTOR)),
        (error: Error) => {
          this.options.logger.warn({ err: error.message }, 'load: the walk or its put failed; trying again later');
          this.schedule(interval);
        },
      );
    }, ms);
    this.timer.unref();
  }

  /** One walk of every namespace, then the put if the counts changed (or the lease did); its ms. */
  private async walkAndPut(): Promise<number> {
    const started = performance.now();
    const keys = new Float64Array(SLOT_COUNT);
    const bytes = new Float64Array(SLOT_COUNT);
    for (const store of this.options.stores()) await countItems(store, keys, bytes, () => this.closed);
    const took = performance.now() - started;
    const leaseId = this.options.leaseId();
    if (this.closed || leaseId === undefined) return took;
    const slots: number[] = [];
    for (let slot = 0; slot < SLOT_COUNT; slot++) if (keys[slot]! > 0) slots.push(slot);
    this.heldKeys = slots.length > 0;
    const counts = { slots, keys: slots.map((s) => keys[s]!), bytes: slots.map((s) => bytes[s]!) };
    const text = `${leaseId} ${JSON.stringify(counts)}`;
    if (text === this.lastPut) return took;
    const record: LoadRecord = { at: new Date().toISOString(), ...counts };
    await this.options.client.put(etcdKeys(this.options.prefix).loadKey(this.options.name)).value(JSON.stringify(record)).lease(leaseId);
    this.lastPut = text;
    return took;
  }
}

/** Adds each item linked in `store`'s index to its hash slot's count of keys and bytes (header, key and value). */
export async function countItems(store: RegionStore, keys: Float64Array, bytes: Float64Array, isClosed: () => boolean): Promise<void> {
  const { layout, bytes: region } = store;
  // The index as 32-bit halves: [lock lo, lock hi, slot 1 lo (its block), slot 1 hi, ...]
  const halves = new Uint32Array(region.buffer, region.byteOffset + layout.indexOffset, (layout.bucketCount * KvLayout.BUCKET_BYTES) / 4);
  const heapUnits = layout.heapBytes / KvLayout.UNIT_BYTES;
  const heapEnd = layout.heapOffset + layout.heapBytes;
  const perBucket = KvLayout.BUCKET_BYTES / 4;
  for (let start = 0; start < layout.bucketCount && !isClosed(); start += CHUNK_BUCKETS) {
    const end = Math.min(layout.bucketCount, start + CHUNK_BUCKETS);
    for (let bucket = start; bucket < end; bucket++) {
      for (let i = 0, at = bucket * perBucket + 2; i < KvLayout.SLOTS_PER_BUCKET; i++, at += 2) {
        const block = halves[at]!;
        if ((block | halves[at + 1]!) === 0 || block >= heapUnits) continue;
        const item = store.itemAt(block);
        if (item + KvLayout.ITEM_HEADER_BYTES > heapEnd) continue;
        const type = region.readUInt16LE(item + ItemHeader.TYPE);
        if (type !== ItemType.BYTES && type !== ItemType.COUNTER && type !== ItemType.LOCK) continue;
        const keyLength = region.readUInt16LE(item + ItemHeader.KEY_LEN);
        const size = KvLayout.ITEM_HEADER_BYTES + keyLength + region.readUInt32LE(item + ItemHeader.VALUE_LEN);
        if (keyLength === 0 || keyLength > KvLayout.MAX_KEY_BYTES || item + size > heapEnd) continue;
        const slot = keySlot(region.subarray(item + KvLayout.ITEM_HEADER_BYTES, item + KvLayout.ITEM_HEADER_BYTES + keyLength));
        keys[slot]! += 1;
        bytes[slot]! += size;
      }
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/**
 * For the controller, before a direct placement (placement not frozen) takes hash slots from
 * `members`: whether they hold keys, by their load records. `loaded`: one does, or one is down (its
 * keys unknown): the placement would hide keys, so placement freezes instead. `unknown`: a live
 * one has put no record yet (it just started): look again shortly.
 */
export async function clusterLoad(client: Etcd3, prefix: string, members: readonly string[], alive: ReadonlySet<string>): Promise<'empty' | 'loaded' | 'unknown'> {
  const keys = etcdKeys(prefix);
  const records = await client.getAll().prefix(keys.load).strings();
  let unknown = false;
  for (const name of members) {
    if (!alive.has(name)) return 'loaded';
    const text = records[keys.loadKey(name)];
    const record = text === undefined ? undefined : parseLoadRecord(text);
    if (record === undefined) unknown = true;
    else if (record.keys.some((n) => n > 0)) return 'loaded';
  }
  return unknown ? 'unknown' : 'empty';
}
