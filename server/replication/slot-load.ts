// The keys and bytes this member holds per hash slot, for kvctl rebalance --by
// bytes (protocol/balance-by-bytes.ts) and for the controller, which never
// places a joining member directly over keys (load-guard.ts). Every
// namespace's index is walked in the background, in chunks (a setImmediate
// between them, so grants and notices are served). A walk starts
// LOAD_INTERVAL_MS after the last one ended, or twenty times its own length
// when that is longer (at most about 5 % of a core), and at once when the
// member's live item count goes from none to some (polled), or its lease
// changes. The counts go to <prefix>.load/<name> under this member's lease
// (they go with it), beside the cluster's prefix so that the watches of the
// prefix do not carry them, and only when it matters: whether the member
// holds keys at all changed, or its lease did, or its bytes moved by more than
// MATERIAL of them since the last put (a relative step: a load from empty to
// any size takes a few hundred puts at most), or anything changed at least
// REFRESH_MS since (etcd keeps every revision until it compacts). Before this
// member answers its first block grant, its record says `granted` (and every
// record after it: recordGranted): a write may land the moment after, long
// before a walk counts it, and the controller must not place a member directly
// over it (load-guard.ts conditions its config write on the records it read).
// The CPU only reads: each index slot is read whole (its 64-bit
// word, as RDMA atomics change it), its item must lie in the heap within the
// slot's length before its key is hashed; an entry that moves while the walk
// passes (a displacement) may be missed or counted twice: the counts are an
// estimate, as a rebalance by bytes needs (a hash slot is its unit).
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';

import { ItemHeader, ItemType, KvLayout } from '../../protocol/constants.js';
import { SLOT_COUNT, keySlot } from '../../protocol/hash-slots.js';
import { EMPTY_SLOT, slotBlock, slotUnits } from '../../protocol/index-format.js';
import { type LoadRecord, etcdKeys } from '../../protocol/registry.js';
import type { RegionStore } from '../store/region.js';

/** The least time from a walk's end to the next one's start. */
const LOAD_INTERVAL_MS = 5000;
/** Buckets read between two turns of the event loop. */
const CHUNK_BUCKETS = 4096;
/** A walk waits at least this many times its own length before the next one. */
const IDLE_FACTOR = 20;
/** How often the live item count and the lease are looked at, for a walk at once on a change that matters. */
const POLL_MS = 200;
/** Counts whose bytes moved by this share or more are put at once; smaller changes after REFRESH_MS. */
const MATERIAL = 0.05;
const REFRESH_MS = 600_000;

export interface SlotLoadOptions {
  name: string;
  prefix: string;
  client: Etcd3;
  /** Each namespace's region and live item count. */
  regions: () => Array<{ store: RegionStore; items: () => number }>;
  leaseId: () => string | undefined;
  logger: Logger;
  /** Tests only (RKV_TEST_LOAD_INTERVAL_MS): walks this far apart and no early walk, as a member whose record lags. */
  intervalMs?: number;
}

interface Put {
  leaseId: string;
  heldKeys: boolean;
  granted: boolean;
  bytes: number;
  counts: string;
  at: number;
}

export class SlotLoad {
  private timer: NodeJS.Timeout | undefined;
  private poll: NodeJS.Timeout | undefined;
  private closed = false;
  private walking: Promise<void> = Promise.resolve();
  private lastPut: Put | undefined;
  /** The live item count the poll saw last (outside walks). */
  private itemsSeen = 0;
  /** When the last walk ended, and how long it took: an early walk still waits IDLE_FACTOR times that. */
  private lastWalk = { end: 0, took: 0 };
  /** The lease an early walk was asked for already (once per lease, whether its put succeeds or not). */
  private earlyFor: string | undefined;
  /** Whether this member granted blocks (recordGranted): every record from then on says so. */
  private granted = false;
  /** The counts of the last walk, which a put for `granted` alone repeats. */
  private lastCounts: Pick<LoadRecord, 'slots' | 'keys' | 'bytes'> = { slots: [], keys: [], bytes: [] };
  /** Puts one after another: a walk's put that started before recordGranted must not land after its put. */
  private putting: Promise<void> = Promise.resolve();

  private constructor(private readonly options: SlotLoadOptions) {}

  static start(options: SlotLoadOptions): SlotLoad {
    const load = new SlotLoad(options);
    // A member holding no item says so at once: a walk of a large empty index takes seconds, and the
    // controller holds a placement back while a holder has no record.
    if (options.regions().every((r) => r.items() === 0)) {
      void load.put({ slots: [], keys: [], bytes: [] }).catch(() => undefined);
    }
    load.schedule(0);
    if (options.intervalMs === undefined) {
      load.poll = setInterval(() => load.look(), POLL_MS);
      load.poll.unref();
    }
    return load;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.poll);
    await this.walking;
  }

  /**
   * A walk soon when a first key came (the controller places members directly only while every record
   * says none) or the lease changed (the record went with the old one), not sooner than the idle rule.
   */
  private look(): void {
    // While a walk runs, what comes is left for after it: a key it passed by shows as a first key then.
    if (this.timer === undefined) return;
    const items = this.options.regions().reduce((n, r) => n + r.items(), 0);
    const firstKey = this.itemsSeen === 0 && items > 0 && this.lastPut?.heldKeys === false;
    this.itemsSeen = items;
    const leaseId = this.options.leaseId();
    const newLease = leaseId !== undefined && this.lastPut?.leaseId !== leaseId && this.earlyFor !== leaseId;
    if (!firstKey && !newLease) return;
    if (newLease) this.earlyFor = leaseId;
    this.schedule(Math.max(0, this.lastWalk.end + this.lastWalk.took * IDLE_FACTOR - performance.now()));
  }

  /** The next walk in `ms`, replacing one pending; none is pending while one runs (timer unset then). */
  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.closed) return;
    const interval = this.options.intervalMs ?? LOAD_INTERVAL_MS;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.walking = this.walkAndPut().then(
        () => this.schedule(Math.max(interval, this.lastWalk.took * IDLE_FACTOR)),
        (error: Error) => {
          this.options.logger.warn({ err: error.message }, 'load: the walk or its put failed; trying again later');
          this.schedule(interval);
        },
      );
    }, ms);
    this.timer.unref();
  }

  /** One walk of every namespace, then the put if it matters (see the top). */
  private async walkAndPut(): Promise<void> {
    const started = performance.now();
    const keys = new Float64Array(SLOT_COUNT);
    const bytes = new Float64Array(SLOT_COUNT);
    for (const { store } of this.options.regions()) await countItems(store, keys, bytes, () => this.closed);
    const now = performance.now();
    this.lastWalk = { end: now, took: now - started };
    const slots: number[] = [];
    for (let slot = 0; slot < SLOT_COUNT; slot++) if (keys[slot]! > 0) slots.push(slot);
    if (this.closed) return;
    await this.put({ slots, keys: slots.map((s) => keys[s]!), bytes: slots.map((s) => bytes[s]!) });
  }

  /**
   * Before this member's first block grant (kv-server --etcd waits for it: replication/first-grant.ts):
   * its record says `granted` from now on, put under its lease. Rejects when there is no lease to put it
   * under (lost: the caller tries again) or the put fails.
   */
  async recordGranted(): Promise<void> {
    this.granted = true;
    await this.put(this.lastCounts);
    if (this.lastPut?.granted !== true) throw new Error('no etcd lease to put the load record under');
  }

  /** Puts `counts` under the lease, if it matters (due), after any put still running. */
  private put(counts: Pick<LoadRecord, 'slots' | 'keys' | 'bytes'>): Promise<void> {
    this.lastCounts = counts;
    const done = this.putting.then(() => this.putNow(counts));
    this.putting = done.catch(() => undefined);
    return done;
  }

  private async putNow(counts: Pick<LoadRecord, 'slots' | 'keys' | 'bytes'>): Promise<void> {
    const leaseId = this.options.leaseId();
    if (leaseId === undefined) return;
    const { granted } = this;
    const next: Put = { leaseId, heldKeys: counts.slots.length > 0, granted, bytes: counts.bytes.reduce((a, b) => a + b, 0), counts: JSON.stringify(counts), at: performance.now() };
    if (!this.due(next)) return;
    const record: LoadRecord = { at: new Date().toISOString(), ...counts, ...(granted ? { granted: true as const } : {}) };
    await this.options.client.put(etcdKeys(this.options.prefix).loadKey(this.options.name)).value(JSON.stringify(record)).lease(leaseId);
    this.lastPut = next;
  }

  private due(next: Put): boolean {
    const last = this.lastPut;
    if (last === undefined || last.leaseId !== next.leaseId || last.heldKeys !== next.heldKeys || last.granted !== next.granted) return true;
    if (last.counts === next.counts) return false;
    return Math.abs(next.bytes - last.bytes) > MATERIAL * Math.max(last.bytes, 1) || next.at - last.at >= REFRESH_MS;
  }
}

/** Adds each item linked in `store`'s index to its hash slot's count of keys and bytes (header, key and value). */
export async function countItems(store: RegionStore, keys: Float64Array, bytes: Float64Array, isClosed: () => boolean): Promise<void> {
  const { layout, bytes: region, index } = store;
  // The index as 32-bit halves, to pass empty slots without a BigInt: [lock lo, lock hi, slot 1 lo, slot 1 hi, ...]
  const halves = new Uint32Array(region.buffer, region.byteOffset + layout.indexOffset, (layout.bucketCount * KvLayout.BUCKET_BYTES) / 4);
  const perBucket = KvLayout.BUCKET_BYTES / 4;
  for (let start = 0; start < layout.bucketCount && !isClosed(); start += CHUNK_BUCKETS) {
    const end = Math.min(layout.bucketCount, start + CHUNK_BUCKETS);
    for (let bucket = start; bucket < end; bucket++) {
      for (let i = 0, at = bucket * perBucket + 2; i < KvLayout.SLOTS_PER_BUCKET; i++, at += 2) {
        if ((halves[at]! | halves[at + 1]!) === 0) continue;
        // The slot whole (an atomic 64-bit read), its item inside the heap and within the slot's length.
        const slot = index.slot(bucket, i);
        if (slot === EMPTY_SLOT || !store.slotInHeap(slot)) continue;
        const item = store.itemAt(slotBlock(slot));
        const room = slotUnits(slot) * KvLayout.UNIT_BYTES;
        if (room < KvLayout.ITEM_HEADER_BYTES) continue;
        const type = region.readUInt16LE(item + ItemHeader.TYPE);
        if (type !== ItemType.BYTES && type !== ItemType.COUNTER && type !== ItemType.LOCK) continue;
        const keyLength = region.readUInt16LE(item + ItemHeader.KEY_LEN);
        const size = KvLayout.ITEM_HEADER_BYTES + keyLength + region.readUInt32LE(item + ItemHeader.VALUE_LEN);
        if (keyLength === 0 || keyLength > KvLayout.MAX_KEY_BYTES || size > room) continue;
        const hashSlot = keySlot(region.subarray(item + KvLayout.ITEM_HEADER_BYTES, item + KvLayout.ITEM_HEADER_BYTES + keyLength));
        keys[hashSlot]! += 1;
        bytes[hashSlot]! += size;
      }
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}
