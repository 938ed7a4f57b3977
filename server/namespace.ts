// One namespace: an isolated store inside kv-server. Its region (store/), the
// region's registration with each provider (fabric.ts: a registration, rkey
// and completion queue of its own, so no key handed out by another namespace
// covers its memory), its clients and their grants, notices, recovery,
// eviction and expiry, its counters and its logs (a child logger naming it).
// KvServer (kv-server.ts) owns the providers and the listeners, and routes
// each connection request to the namespace its token opens.
import { randomBytes } from 'node:crypto';
import type { EventEmitter } from 'node:events';

import type { Logger } from 'pino';

import type { Provider } from '../native/index.js';
import { KvLayout } from '../protocol/constants.js';
import { EMPTY_SLOT, slotBlock } from '../protocol/index-format.js';
import type { Role } from '../protocol/tokens.js';
import { CQ_ENTRIES_PER_CLIENT, CQ_MODERATION_US, type Fabric, openFabric, openLoopback, registerReadOnly } from './fabric.js';
import { AccessBits } from './eviction/access-bits.js';
import { Evictor } from './eviction/evictor.js';
import { ExpirySweep } from './eviction/expiry-sweep.js';
import { ItemUse } from './eviction/item-use.js';
import { type GrantGate, Grants } from './grants.js';
import { KeepaliveSweeps } from './keepalive.js';
import { Notices } from './notices.js';
import type { ServerSettings } from './options.js';
import { Chain } from './recovery/chain.js';
import { Departures } from './recovery/departures.js';
import { type DropParts, dropHashSlots, underBucketLocks } from './replication/own-region.js';
import { type EpochBarrierReport, runEpochBarrier } from './replication/epoch-barrier.js';
import { HeldBlocks } from './recovery/held-blocks.js';
import { LockRelease } from './recovery/locks.js';
import { OrphanScan } from './recovery/orphan-scan.js';
import { recoverRegionFile } from './recovery/restart.js';
import { Acceptor } from './sessions/accept.js';
import { ClientTable } from './sessions/clients.js';
import { Completions } from './sessions/completions.js';
import { ControlMessages } from './sessions/control.js';
import type { ReadLeases } from './sessions/read-leases.js';
import { SessionNumbers } from './sessions/session-numbers.js';
import type { TokenTable } from './sessions/tokens.js';
import { type KvServerStats, type ReplicationView, ServerStats } from './stats.js';
import type { RegionLayout } from './store/layout.js';
import { RegionStore } from './store/region.js';

/** lfu: read counts halve this often, so a key's old popularity fades. */
const LFU_DECAY_MS = 10_000;

export class Namespace {
  readonly layout: RegionLayout;
  readonly store: RegionStore;
  readonly counters = new ServerStats();
  /** its fabrics by scheme: its region registered with each provider */
  readonly fabrics = new Map<string, Fabric>();
  readonly clients: ClientTable;
  /** proves its loopback queue pairs (KvServer routes a loopback request by it) */
  readonly loopbackSecret = randomBytes(32);
  readonly acceptor: Acceptor;
  private readonly completions: Completions;
  private readonly grants: Grants;
  private readonly locks: LockRelease;
  readonly departures: Departures;
  private readonly orphanScan: OrphanScan;
  private readonly sessions: SessionNumbers;
  /** with eviction on: what the server knows of each item's use (eviction chooses by it) */
  readonly use: ItemUse | undefined;
  private readonly expiry: ExpirySweep;
  private readonly removal: DropParts;
  private readonly timers: NodeJS.Timeout[] = [];
  private closed = false;

  /**
   * `settings`: the server's, with this namespace's memoryBytes, buckets and regionFile.
   * `tokens`: the server's (it keeps the READ-only registrations and fencing in step with them).
   */
  constructor(
    readonly name: string,
    private readonly settings: ServerSettings,
    private readonly tokens: TokenTable,
    private readonly log: Logger | undefined,
    events: EventEmitter,
    leases: ReadLeases,
    grantGate: GrantGate,
  ) {
    this.store = RegionStore.open(settings);
    this.layout = this.store.layout;
    const { store } = this;
    const stats = this.counters;
    const isClosed = () => this.closed;
    const { eviction, graceMs } = settings;
    // 4 bytes of server memory per 64-byte heap unit (5 under lfu): only when evicting.
    this.use = eviction === 'none' ? undefined : new ItemUse(this.layout.heapBytes / KvLayout.UNIT_BYTES, eviction === 'lfu');
    const notices = new Notices(store, stats, log, this.use);
    this.clients = new ClientTable(this.layout.maxClients, notices);
    this.sessions = new SessionNumbers(store.bytes, settings.replica === true);
    const loopbackChain = new Chain();
    // Removals (eviction, expiry) take bucket locks as an owner id no client ever has.
    const removal = { store, stats, use: this.use, owner: this.clients.serverId(), loopbackChain, log, isClosed, fabric: () => this.loopbackFabric() };
    this.removal = { ...removal, unannounced: (block) => unannounced(block) };
    let evictor: Evictor | undefined;
    if (eviction !== 'none') {
      const high = settings.evictionHighPercent / 100;
      const low = settings.evictionLowPercent / 100;
      stats.watermarks = { high, low };
      evictor = new Evictor({ ...removal, use: this.use!, policy: eviction, high, low, graceMs, accessBits: new AccessBits(store, this.use!) });
    }
    const unannounced = (block: number): boolean => {
      for (const client of this.clients.values()) if (client.held.get(block) !== undefined) return true;
      return false;
    };
    this.expiry = new ExpirySweep({ ...removal, unannounced });
    this.grants = new Grants(store, this.clients, stats, settings.keepaliveMs, log, this.use, evictor, graceMs, grantGate);
    const control = new ControlMessages(this.grants, stats, log, leases);
    this.completions = new Completions(this.clients, notices, control, stats, log);
    this.locks = new LockRelease(store, stats, log, isClosed);
    this.departures = new Departures({
      clients: this.clients,
      loopbackChain,
      locks: this.locks,
      heldBlocks: new HeldBlocks(store, stats, log, isClosed),
      drain: (fabric) => this.completions.drain(fabric),
      stats,
      log,
      events,
      isClosed,
    });
    this.orphanScan = new OrphanScan({
      store,
      clients: this.clients,
      departing: this.departures.departing,
      loopbackChain,
      fabrics: () => this.fabrics.values(),
      stats,
      log,
      events,
      isClosed,
    });
    this.acceptor = new Acceptor({
      namespace: name,
      settings,
      store,
      clients: this.clients,
      sessions: this.sessions,
      stats,
      log,
      events,
      isClosed,
      onDisconnected: (client, reason) => this.departures.forget(client, reason),
      leases,
    });
  }

  /** Registers its region with `provider` (the server's, for `scheme`) and watches its own completion queue there. */
  attach(scheme: string, provider: Provider, readTokens: boolean): Fabric {
    const fabric = openFabric(provider, this.store);
    const { maxClients } = this.store.layout;
    if (fabric.admits < maxClients) {
      const { name, maxCqe } = provider.deviceInfo;
      this.log?.warn({ provider: scheme, device: name, maxCqe, maxClients, admits: fabric.admits }, `${name}'s completion queues hold ${maxCqe} entries: ${fabric.admits} of --max-clients ${maxClients} can connect on ${scheme}:// (each may have ${CQ_ENTRIES_PER_CLIENT} completions outstanding); the others are refused as FULL`);
    }
    this.fabrics.set(scheme, fabric);
    this.counters.memoryWindows.set(scheme, fabric.windows ? 1 : 0);
    if (readTokens) registerReadOnly(fabric, this.store);
    const log = this.log;
    fabric.cq.watch(() => this.completions.drain(fabric), CQ_MODERATION_US, log ? (reason) => log.error({ provider: scheme }, reason) : undefined);
    fabric.cq.arm();
    return fabric;
  }

  /** Each fabric's connection to the server itself (to `urlOf(scheme)`, a URL the server listens on). */
  async openLoopbacks(urlOf: (scheme: string) => string): Promise<void> {
    for (const [scheme, fabric] of this.fabrics) {
      const url = urlOf(scheme);
      try {
        await openLoopback(fabric, url, this.loopbackSecret);
      } catch (error) {
        // Without it, a dead client's bucket locks stay taken: say so loudly.
        this.log?.error({ url, err: (error as Error).message }, 'no loopback connection: locks of dead clients cannot be released');
      }
    }
  }

  /** Recovers its region file (if it held data), then serves: held requests answered, timers started. */
  async open(urls: readonly string[]): Promise<void> {
    if (this.store.existed) await this.recover(urls);
    this.acceptor.open();
    const { graceMs, keepaliveMs, expirySweepMs, eviction } = this.settings;
    const every = (ms: number, run: () => void) => this.timers.push(setInterval(run, ms).unref());
    every(Math.max(10, Math.min(100, graceMs / 4)), () => this.grants.tick());
    const sweeps = this.keepaliveSweeps();
    every(keepaliveMs, () => sweeps.sweep());
    every(expirySweepMs, () => {
      this.expiry.pass().catch((error: Error) => this.log?.error({ err: error.message }, 'expiry sweep failed'));
    });
    if (eviction === 'lfu') every(LFU_DECAY_MS, () => this.use?.decay());
  }

  /** A region file with data: recovered through the first fabric's loopback before any client is served. */
  private async recover(urls: readonly string[]): Promise<void> {
    const fabric = [...this.fabrics.values()][0]!;
    const { store, sessions, locks, log } = this;
    const { beforeRecovery } = this.settings;
    await recoverRegionFile({ store, sessions, locks, stats: this.counters, log, beforeRecovery: beforeRecovery && (() => beforeRecovery(urls)) }, fabric);
    // The live items it kept are candidates for eviction, as if published now.
    const { use } = this;
    if (!use) return;
    const now = use.now();
    for (let bucket = 0; bucket < store.index.bucketCount; bucket++) {
      for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
        const slot = store.index.slot(bucket, i);
        if (slot !== EMPTY_SLOT && store.slotInHeap(slot)) use.published(slotBlock(slot), now);
      }
    }
  }

  /** The first fabric with a loopback connection (removals go through it). */
  private loopbackFabric(): Fabric | undefined {
    for (const fabric of this.fabrics.values()) if (fabric.loopback) return fabric;
    return undefined;
  }

  /** Tests: one pass of the expiry sweep now; resolves with the items it removed. */
  sweepExpired(): Promise<number> {
    return this.expiry.pass();
  }

  private keepaliveSweeps(): KeepaliveSweeps {
    return new KeepaliveSweeps({
      clients: this.clients,
      keepaliveMs: this.settings.keepaliveMs,
      stats: this.counters,
      log: this.log,
      forget: (client, reason) => this.departures.forget(client, reason),
      afterSweep: () => this.orphanScan.queue(),
    });
  }

  /**
   * The server's tokens were replaced: the READ-only registration a read token of this namespace
   * needs (throws KvConfigError if the device refuses it; call before replacing), then.
   */
  prepareFor(readTokens: boolean): void {
    if (readTokens) for (const fabric of this.fabrics.values()) registerReadOnly(fabric, this.store);
  }

  /**
   * After the tokens were replaced: fences and forgets every client whose token is gone, gives
   * another role, or opens another namespace. Returns how many.
   */
  fenceChanged(): number {
    let fenced = 0;
    for (const client of [...this.clients.values()]) {
      const grant = this.tokens.grantOf(client.digest, this.name);
      const role: Role | undefined = grant?.namespace === this.name ? grant.role : undefined;
      if (role === client.role) continue;
      this.departures.forget(client, role === undefined ? (grant ? 'its token opens another namespace now' : 'its token was removed') : `its token's role is now ${role}`);
      fenced++;
    }
    return fenced;
  }

  /**
   * The epoch barrier for `hashSlots` into `epoch` (replication/epoch-barrier.ts): no write
   * decided under an earlier epoch commits here once it resolves. Rejects on a region without an
   * epoch table (format 4 and earlier) and if the server closes meanwhile.
   */
  epochBarrier(hashSlots: readonly number[], epoch: number, mayOpen?: () => boolean): Promise<EpochBarrierReport> {
    const liveOwners = () => this.clients.liveIds(this.departures.departing);
    return runEpochBarrier({ store: this.store, liveOwners, isClosed: () => this.closed }, hashSlots, epoch, mayOpen);
  }

  /** Removes every item of `hashSlots` (a member syncing into them: replication/own-region.ts); resolves how many. */
  dropHashSlots(hashSlots: readonly number[]): Promise<number> {
    return dropHashSlots(this.removal, hashSlots);
  }

  /** Runs `task` holding both bucket locks of `key` (repair's copier: replication/own-region.ts). */
  underBucketLocks<T>(key: Buffer, task: () => Promise<T>): Promise<T> {
    return underBucketLocks(this.removal, key, task);
  }

  stats(replication?: ReplicationView): KvServerStats {
    return this.counters.report(this.layout, this.store.heap, this.clients.size, this.store.epochs, replication);
  }

  /** Stops its timers, answers held requests (rejected), disconnects its clients and loopbacks. */
  shutdownNow(): void {
    this.closed = true;
    for (const timer of this.timers) clearInterval(timer);
    this.acceptor.answerHeld(); // rejected: closed
    for (const connection of this.clients.connections()) connection.disconnect();
    this.acceptor.closeLoopbacks();
    for (const { loopback, cq } of this.fabrics.values()) {
      loopback?.connection.disconnect();
      cq.unwatch();
    }
  }
}
