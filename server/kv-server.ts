// kv-server's core: KvServer puts the parts together and runs their
// lifecycle. It maps the region (store/region.ts), listens on every URL
// (fabric.ts), accepts clients (sessions/), grants heap blocks (grants.ts),
// drains the notices clients leave after every PUT and DELETE (notices.ts),
// recovers a region file and departed clients (recovery/), and sweeps for
// silent clients (keepalive.ts). GETs never reach this code: clients read the
// region with RDMA READ.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';

import type { Logger } from 'pino';

import type { Listener } from '../native/index.js';
import { CQ_MODERATION_US, type Fabric, listenOn, openFabric, openLoopback, listenScheme, registerReadOnly } from './fabric.js';
import { AccessBits } from './eviction/access-bits.js';
import { Evictor } from './eviction/evictor.js';
import { ExpirySweep } from './eviction/expiry-sweep.js';
import { ItemUse } from './eviction/item-use.js';
import { Grants } from './grants.js';
import { KeepaliveSweeps } from './keepalive.js';
import { Notices } from './notices.js';
import { type KvServerOptions, type ServerSettings, checkOptions, checkTokens } from './options.js';
import type { TokenEntry } from '../protocol/tokens.js';
import { Chain } from './recovery/chain.js';
import { Departures } from './recovery/departures.js';
import { HeldBlocks } from './recovery/held-blocks.js';
import { LockRelease } from './recovery/locks.js';
import { OrphanScan } from './recovery/orphan-scan.js';
import { recoverRegionFile } from './recovery/restart.js';
import { Acceptor } from './sessions/accept.js';
import { ClientTable } from './sessions/clients.js';
import { Completions } from './sessions/completions.js';
import { ControlMessages } from './sessions/control.js';
import { SessionNumbers } from './sessions/session-numbers.js';
import { TokenTable } from './sessions/tokens.js';
import { type KvServerStats, ServerStats } from './stats.js';
import type { RegionLayout } from './store/layout.js';
import { RegionStore } from './store/region.js';
import { KvLayout } from '../protocol/constants.js';
import { EMPTY_SLOT, slotBlock } from '../protocol/index-format.js';

/** lfu: read counts halve this often, so a key's old popularity fades. */
const LFU_DECAY_MS = 10_000;

export { KvConfigError, type KvServerOptions } from './options.js';
export type { KvServerStats } from './stats.js';

/**
 * The server. Events: 'clientConnected' (id) once a client has its hello, 'clientDisconnected'
 * (id) once a departed client's locks are released, 'orphanScan' ({ released }) after each scan.
 */
export class KvServer extends EventEmitter {
  readonly urls: string[] = [];
  readonly layout: RegionLayout;
  private readonly settings: ServerSettings;
  private readonly log: Logger | undefined;
  private readonly store: RegionStore;
  private readonly counters = new ServerStats();
  /** fabrics by scheme */
  private readonly fabrics = new Map<string, Fabric>();
  private readonly listening: Listener[] = [];
  /** (test/kv/failures.test.ts reaches into it by this name) */
  private readonly clients: ClientTable;
  private readonly loopbackSecret = randomBytes(32);
  private readonly acceptor: Acceptor;
  private readonly completions: Completions;
  private readonly grants: Grants;
  private readonly locks: LockRelease;
  private readonly departures: Departures;
  private readonly orphanScan: OrphanScan;
  private readonly sessions: SessionNumbers;
  private readonly tokens: TokenTable;
  /** with eviction on: what the server knows of each item's use (eviction chooses by it) */
  private readonly use: ItemUse | undefined;
  private readonly expiry: ExpirySweep;
  private expiryTimer: NodeJS.Timeout | undefined;
  private decayTimer: NodeJS.Timeout | undefined;
  private reclaimTimer: NodeJS.Timeout | undefined;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private closed = false;

  private constructor(options: KvServerOptions) {
    super();
    this.settings = checkOptions(options);
    this.log = options.logger;
    this.store = RegionStore.open(this.settings);
    this.layout = this.store.layout;
    const { store, log } = this;
    const stats = this.counters;
    const isClosed = () => this.closed;
    const { eviction, graceMs } = this.settings;
    // 4 bytes of server memory per 64-byte heap unit (5 under lfu): only when evicting.
    this.use = eviction === 'none' ? undefined : new ItemUse(this.layout.heapBytes / KvLayout.UNIT_BYTES, eviction === 'lfu');
    const notices = new Notices(store, stats, log, this.use);
    this.clients = new ClientTable(this.layout.maxClients, notices);
    this.sessions = new SessionNumbers(store.bytes);
    const loopbackChain = new Chain();
    // Removals (eviction, expiry) take bucket locks as an owner id no client ever has.
    const removal = { store, stats, use: this.use, owner: this.clients.newId(), loopbackChain, log, isClosed, fabric: () => this.loopbackFabric() };
    let evictor: Evictor | undefined;
    if (eviction !== 'none') {
      const high = this.settings.evictionHighPercent / 100;
      const low = this.settings.evictionLowPercent / 100;
      stats.watermarks = { high, low };
      evictor = new Evictor({ ...removal, use: this.use!, policy: eviction, high, low, graceMs, accessBits: new AccessBits(store, this.use!) });
    }
    const unannounced = (block: number): boolean => {
      for (const client of this.clients.values()) if (client.held.get(block) !== undefined) return true;
      return false;
    };
    this.expiry = new ExpirySweep({ ...removal, unannounced });
    this.grants = new Grants(store, this.clients, stats, this.settings.keepaliveMs, log, this.use, evictor, graceMs);
    const control = new ControlMessages(this.grants, stats, log);
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
      events: this,
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
      events: this,
      isClosed,
    });
    const { token, tokens } = this.settings;
    this.tokens = new TokenTable(token !== undefined ? [{ token, role: 'write', namespace: 'default' }] : tokens);
    this.acceptor = new Acceptor({
      settings: this.settings,
      tokens: this.tokens,
      store,
      clients: this.clients,
      sessions: this.sessions,
      stats,
      log,
      events: this,
      loopbackSecret: this.loopbackSecret,
      isClosed,
      onDisconnected: (client, reason) => this.departures.forget(client, reason),
    });
  }

  /** Starts serving; resolves when every URL listens. Throws KvConfigError for bad options. */
  static async start(options: KvServerOptions): Promise<KvServer> {
    const server = new KvServer(options);
    try {
      for (const url of options.listen) server.listenOn(url);
      await server.openLoopbacks();
      if (server.store.existed) await server.recover();
      server.acceptor.open();
    } catch (error) {
      server.shutdownNow();
      throw error;
    }
    const { graceMs, keepaliveMs } = server.settings;
    server.reclaimTimer = setInterval(() => server.grants.tick(), Math.max(10, Math.min(100, graceMs / 4)));
    server.reclaimTimer.unref();
    const sweeps = server.keepaliveSweeps();
    server.keepaliveTimer = setInterval(() => sweeps.sweep(), keepaliveMs);
    server.keepaliveTimer.unref();
    server.expiryTimer = setInterval(() => {
      server.expiry.pass().catch((error: Error) => server.log?.error({ err: error.message }, 'expiry sweep failed'));
    }, server.settings.expirySweepMs);
    server.expiryTimer.unref();
    if (server.settings.eviction === 'lfu') {
      server.decayTimer = setInterval(() => server.use?.decay(), LFU_DECAY_MS);
      server.decayTimer.unref();
    }
    return server;
  }

  private listenOn(url: string): void {
    const scheme = listenScheme(url);
    let fabric = this.fabrics.get(scheme);
    if (!fabric) {
      const opened = openFabric(scheme, url, this.store);
      this.fabrics.set(scheme, opened);
      // Whether a leaked rkey is bound to its connection (docs/operations.md, threat model): said in the
      // `listening` line, and without windows once more, as a warning.
      this.counters.memoryWindows.set(scheme, opened.windows ? 1 : 0);
      if (!opened.windows) this.log?.warn({ provider: scheme, why: opened.windowsNote }, 'no memory windows: clients get the region\'s rkey, which works on any connection');
      if (this.settings.tokens?.some((e) => e.role === 'read')) registerReadOnly(opened, this.store);
      opened.provider.on('connectRequest', (request) => this.acceptor.onConnectRequest(opened, request));
      opened.cq.watch(() => this.completions.drain(opened), CQ_MODERATION_US);
      opened.cq.arm();
      fabric = opened;
    }
    const listener = listenOn(fabric, url);
    this.listening.push(listener);
    this.urls.push(listener.url);
    // The region's pages are said here, with its size: huge pages, or why not ('4k' and pagesWhy).
    const { kind: pages, note: pagesWhy } = this.store.memory.pages;
    this.log?.info({ url: listener.url, regionBytes: this.layout.regionBytes, buckets: this.layout.bucketCount, pages, ...(pagesWhy ? { pagesWhy } : {}), memoryWindows: fabric.windows, ...(fabric.windows ? {} : { memoryWindowsWhy: fabric.windowsNote }) }, 'listening');
  }

  /** Each fabric's connection to this server itself (to its first listener of that scheme). */
  private async openLoopbacks(): Promise<void> {
    for (const [scheme, fabric] of this.fabrics) {
      const url = this.urls.find((u) => u.startsWith(`${scheme}://`))!;
      try {
        await openLoopback(fabric, url, this.loopbackSecret);
      } catch (error) {
        // Without it, a dead client's bucket locks stay taken: say so loudly.
        this.log?.error({ url, err: (error as Error).message }, 'no loopback connection: locks of dead clients cannot be released');
      }
    }
  }

  /** A region file with data: recovered through the first fabric's loopback before any client is served. */
  private async recover(): Promise<void> {
    const fabric = [...this.fabrics.values()][0]!;
    const { store, sessions, locks, log } = this;
    const { beforeRecovery } = this.settings;
    const urls = [...this.urls];
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
   * Replaces the tokens (kv-server's SIGHUP reload of --token-file). New connections are checked
   * against the new ones at once. A connected client whose token is gone, or whose token's role
   * changed, is fenced and forgotten as a departed client is (recovery/departures.ts): a
   * downgraded client must not keep the writable rkey's connection, and an upgraded one gets its
   * new rkey by reconnecting. Clients of unchanged tokens are not touched. Returns how many
   * clients were fenced. Throws KvConfigError for bad entries (the old tokens stay).
   */
  setTokens(entries: TokenEntry[]): number {
    checkTokens(entries);
    if (entries.some((e) => e.role === 'read')) for (const fabric of this.fabrics.values()) registerReadOnly(fabric, this.store);
    this.tokens.replace(entries);
    let fenced = 0;
    for (const client of [...this.clients.values()]) {
      const role = this.tokens.roleOf(client.digest);
      if (role === client.role) continue;
      this.departures.forget(client, role === undefined ? 'its token was removed' : `its token's role is now ${role}`);
      fenced++;
    }
    this.log?.info({ tokens: entries.length, fenced }, 'tokens replaced');
    return fenced;
  }

  /** Resolves when every departed client's locks have been released and its blocks taken back. */
  settled(): Promise<void> {
    return this.departures.settled();
  }

  stats(): KvServerStats {
    return this.counters.report(this.layout, this.store.heap, this.clients.size);
  }

  /** The region's bytes (tests and kvctl's layout dump read them). */
  get region(): Buffer {
    return this.store.bytes;
  }

  /** Stops listening, disconnects every client, releases the region. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.shutdownNow();
    this.log?.info('stopped');
  }

  private shutdownNow(): void {
    this.closed = true;
    if (this.reclaimTimer) clearInterval(this.reclaimTimer);
    if (this.keepaliveTimer) clearInterval(this.keepaliveTimer);
    if (this.expiryTimer) clearInterval(this.expiryTimer);
    if (this.decayTimer) clearInterval(this.decayTimer);
    for (const listener of this.listening) listener.close();
    this.acceptor.answerHeld(); // rejected: closed
    for (const connection of this.clients.connections()) connection.disconnect();
    this.acceptor.closeLoopbacks();
    for (const { loopback } of this.fabrics.values()) loopback?.connection.disconnect();
    for (const { provider, cq } of this.fabrics.values()) {
      cq.unwatch();
      provider.close();
    }
  }
}
