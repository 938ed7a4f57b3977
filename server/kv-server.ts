// kv-server's core: KvServer puts the parts together and runs their
// lifecycle. It opens a provider per scheme and listens on every URL
// (fabric.ts), and hosts one or more namespaces (namespace.ts): isolated
// stores, each with its own region (store/region.ts) registered with every
// provider, clients (sessions/), grants (grants.ts), notices (notices.ts),
// recovery of a region file and of departed clients (recovery/) and sweeps
// for silent clients (keepalive.ts). A connection request is checked here
// (protocol version, the namespace it names, its token) and handed to the
// namespace its token opens. GETs never reach this code: clients read their
// namespace's region with RDMA READ.
import { timingSafeEqual } from 'node:crypto';
import { EventEmitter } from 'node:events';

import type { Logger } from 'pino';

import type { ConnectionRequest, Listener, Provider } from '../native/index.js';
import { RejectReason, parseConnectData } from '../protocol/connect.js';
import { KvLayout } from '../protocol/constants.js';
import { DEFAULT_NAMESPACE, type TokenEntry } from '../protocol/tokens.js';
import { listenOn, listenScheme, openProvider } from './fabric.js';
import { GrantGate } from './grants.js';
import { Namespace } from './namespace.js';
import type { EpochBarrierReport } from './replication/epoch-barrier.js';
import type { EpochTable } from './store/epoch-table.js';
import { type KvServerOptions, type ServerSettings, KvConfigError, checkOptions, checkTokens, namespaceNames, namespaceRegionFile } from './options.js';
import { type LeaseGrant, ReadLeases } from './sessions/read-leases.js';
import type { RegionStore } from './store/region.js';
import { TokenTable } from './sessions/tokens.js';
import type { KvServerStats, ReplicationView } from './stats.js';
import type { RegionLayout } from './store/layout.js';

export { KvConfigError, type KvServerOptions } from './options.js';
export type { KvServerStats } from './stats.js';

/**
 * The server. Events: 'clientConnected' (id) once a client has its hello, 'clientDisconnected'
 * (id) once a departed client's locks are released, 'orphanScan' ({ released }) after each scan.
 * Client ids are numbered per namespace.
 */
export class KvServer extends EventEmitter {
  readonly urls: string[] = [];
  private readonly settings: ServerSettings;
  private readonly log: Logger | undefined;
  /** the namespaces by name: the default one first */
  private readonly hosted = new Map<string, Namespace>();
  /** providers by scheme, shared by every namespace */
  private readonly providers = new Map<string, Provider>();
  private readonly listening: Listener[] = [];
  private readonly tokens: TokenTable;
  private readonly leases = new ReadLeases();
  private readonly grantGate: GrantGate;
  private replication: (() => ReplicationView) | undefined;
  private closed = false;

  private constructor(options: KvServerOptions) {
    super();
    this.settings = checkOptions(options);
    this.log = options.logger;
    this.grantGate = new GrantGate(this.log);
    const { token, tokens, regionFile } = this.settings;
    this.tokens = new TokenTable(token !== undefined ? [{ token, role: 'write', namespace: DEFAULT_NAMESPACE }] : tokens);
    const sizes = [{ name: DEFAULT_NAMESPACE, memoryBytes: this.settings.memoryBytes, buckets: this.settings.buckets }, ...(this.settings.namespaces ?? []).map((n) => ({ ...n, buckets: undefined }))];
    const named = sizes.length > 1;
    for (const { name, memoryBytes, buckets } of sizes) {
      const settings = { ...this.settings, memoryBytes, buckets, regionFile: namespaceRegionFile(regionFile, name) };
      // With one namespace the logs stay as they were; with more, each line names its namespace.
      const log = named ? this.log?.child({ namespace: name }) : this.log;
      this.hosted.set(name, new Namespace(name, settings, this.tokens, log, this, this.leases, this.grantGate));
    }
  }

  /** The default namespace (the only one without --namespace; test/kv/evict-grant-wait.test.ts reaches its grants). */
  private get main(): Namespace {
    return this.hosted.get(DEFAULT_NAMESPACE)!;
  }

  /** The default namespace's layout. */
  get layout(): RegionLayout {
    return this.main.layout;
  }

  /** (test/kv/failures.test.ts and evict.test.ts reach into these by name) */
  private get clients() {
    return this.main.clients;
  }
  private get use() {
    return this.main.use;
  }

  /** The namespaces this server hosts, the default one first. */
  get namespaces(): string[] {
    return [...this.hosted.keys()];
  }

  /** Namespace `name` (KvConfigError if not hosted): its layout, region bytes and stats. */
  namespace(name: string): { layout: RegionLayout; region: Buffer; stats: () => KvServerStats } {
    const ns = this.hosted.get(name);
    if (!ns) throw new KvConfigError(`no namespace '${name}' on this server (it hosts ${this.namespaces.join(', ')})`);
    return { layout: ns.layout, region: ns.store.bytes, stats: () => ns.stats(this.replication?.()) };
  }

  /** Starts serving; resolves when every URL listens. Throws KvConfigError for bad options. */
  static async start(options: KvServerOptions): Promise<KvServer> {
    const server = new KvServer(options);
    try {
      for (const url of options.listen) server.listenOn(url);
      const urlOf = (scheme: string) => server.urls.find((u) => u.startsWith(`${scheme}://`))!;
      for (const ns of server.hosted.values()) await ns.openLoopbacks(urlOf);
      for (const ns of server.hosted.values()) await ns.open([...server.urls]);
    } catch (error) {
      server.shutdownNow();
      throw error;
    }
    return server;
  }

  private listenOn(url: string): void {
    const scheme = listenScheme(url);
    let provider = this.providers.get(scheme);
    if (!provider) {
      const opened = openProvider(scheme, url);
      this.providers.set(scheme, opened);
      provider = opened;
      const { tokens } = this.settings;
      for (const ns of this.hosted.values()) {
        const readTokens = tokens?.some((e) => e.role === 'read' && (e.namespace ?? DEFAULT_NAMESPACE) === ns.name) ?? false;
        const fabric = ns.attach(scheme, opened, readTokens);
        // Whether a leaked rkey is bound to its connection (docs/operations.md, threat model): said in the
        // `listening` line, and without windows once more, as a warning.
        if (ns === this.main && !fabric.windows) this.log?.warn({ provider: scheme, why: fabric.windowsNote }, 'no memory windows: clients get the region\'s rkey, which works on any connection');
      }
      // The namespaces' registrations share the provider's protection domain: without windows, an rkey
      // of one namespace that a client of another finds (by trying, or a leak) works on its connection.
      if (this.hosted.size > 1 && !opened.deviceInfo.memoryWindows) this.log?.warn({ provider: scheme }, 'no memory windows: namespaces are not isolated from a client that finds another namespace\'s rkey');
      opened.on('connectRequest', (request) => this.onConnectRequest(scheme, request));
    }
    const listener = listenOn(provider, url);
    this.listening.push(listener);
    this.urls.push(listener.url);
    // The region's pages are said here, with its size: huge pages, or why not ('4k' and pagesWhy).
    const fabric = this.main.fabrics.get(scheme)!;
    const { kind: pages, note: pagesWhy } = this.main.store.memory.pages;
    const namespaces = this.hosted.size > 1 ? { namespaces: this.namespaces } : {};
    this.log?.info({ url: listener.url, regionBytes: this.layout.regionBytes, buckets: this.layout.bucketCount, pages, ...(pagesWhy ? { pagesWhy } : {}), memoryWindows: fabric.windows, ...(fabric.windows ? {} : { memoryWindowsWhy: fabric.windowsNote }), ...namespaces }, 'listening');
  }

  /**
   * A connection request on `scheme`'s provider: a namespace's loopback (by its secret), or a
   * client, checked here (protocol version, the namespace it names, its token) and handed to
   * the namespace its token opens. Rejections before a namespace is known count in the default
   * namespace's stats.
   */
  private onConnectRequest(scheme: string, request: ConnectionRequest): void {
    const { version, digest, loopback, namespace: named } = parseConnectData(request.privateData);
    if (loopback) {
      for (const ns of this.hosted.values()) {
        if (timingSafeEqual(loopback, ns.loopbackSecret)) return ns.acceptor.acceptLoopback(ns.fabrics.get(scheme)!, request);
      }
    }
    const front = this.main.acceptor;
    if (this.closed) return front.reject(request, RejectReason.FULL, 'shutting down');
    // The second byte names ours, so the client can say which side to upgrade.
    if (version !== KvLayout.PROTOCOL_VERSION) return front.reject(request, RejectReason.VERSION, `protocol version ${version}, this server ${KvLayout.PROTOCOL_VERSION}`, KvLayout.PROTOCOL_VERSION);
    // Names are not secrets (tokens are): a client that names one this server lacks is told so.
    if (named !== undefined && !this.hosted.has(named)) return front.reject(request, RejectReason.NAMESPACE, `no namespace '${named.slice(0, 40)}'`);
    const grant = this.tokens.grantOf(digest, named);
    if (grant === undefined) return front.reject(request, RejectReason.AUTH, 'wrong token');
    const ns = this.hosted.get(grant.namespace)!; // every token's namespace is hosted (checkTokens)
    if (named !== undefined && grant.namespace !== named) return ns.acceptor.reject(request, RejectReason.AUTH, `a token of namespace '${grant.namespace}' for namespace '${named}'`);
    ns.acceptor.onConnectRequest(ns.fabrics.get(scheme)!, request, { role: grant.role, digest });
  }

  /** Tests: one pass of the default namespace's expiry sweep now; resolves with the items it removed. */
  sweepExpired(): Promise<number> {
    return this.main.sweepExpired();
  }

  /**
   * Replaces the tokens (kv-server's SIGHUP reload of --token-file). New connections are checked
   * against the new ones at once. A connected client whose token is gone, or whose token's role
   * or namespace changed, is fenced and forgotten as a departed client is
   * (recovery/departures.ts): a downgraded client must not keep the writable rkey's connection,
   * and an upgraded one gets its new rkey by reconnecting. Clients of unchanged tokens are not
   * touched. Returns how many clients were fenced. Throws KvConfigError for bad entries (a
   * namespace this server does not host, say): the old tokens stay.
   */
  setTokens(entries: TokenEntry[]): number {
    checkTokens(entries, this.namespaces);
    for (const ns of this.hosted.values()) ns.prepareFor(entries.some((e) => e.role === 'read' && (e.namespace ?? DEFAULT_NAMESPACE) === ns.name));
    this.tokens.replace(entries);
    let fenced = 0;
    for (const ns of this.hosted.values()) fenced += ns.fenceChanged();
    this.log?.info({ tokens: entries.length, fenced }, 'tokens replaced');
    return fenced;
  }

  /** Resolves when every departed client's locks have been released and its blocks taken back. */
  async settled(): Promise<void> {
    for (const ns of this.hosted.values()) await ns.departures.settled();
  }

  /** The default namespace's stats, or namespace `name`'s (KvConfigError if not hosted). */
  stats(name: string = DEFAULT_NAMESPACE): KvServerStats {
    return this.namespace(name).stats();
  }

  /**
   * Runs the epoch barrier (docs/replication-design.md §4.3) on namespace `name`'s region for
   * `hashSlots` into `epoch`. replication/epoch-follower.ts calls it as the config moves; tests and benchmarks too.
   */
  epochBarrier(hashSlots: readonly number[], epoch: number, name: string = DEFAULT_NAMESPACE, mayOpen?: () => boolean): Promise<EpochBarrierReport> {
    const ns = this.hosted.get(name);
    if (!ns) return Promise.reject(new KvConfigError(`no namespace '${name}' on this server (it hosts ${this.namespaces.join(', ')})`));
    return ns.epochBarrier(hashSlots, epoch, mayOpen);
  }

  /** Removes namespace `name`'s items of `hashSlots` (a member syncing into them, epoch-follower.ts); resolves how many. */
  dropHashSlots(hashSlots: readonly number[], name: string = DEFAULT_NAMESPACE): Promise<number> {
    const ns = this.hosted.get(name);
    if (!ns) return Promise.reject(new KvConfigError(`no namespace '${name}' on this server (it hosts ${this.namespaces.join(', ')})`));
    return ns.dropHashSlots(hashSlots);
  }

  /**
   * From now on this server grants read leases as `grant()` says (its `leaseMs` undefined or not
   * above 0: none now), with the config epoch it has applied, in its hellos and pongs
   * (sessions/read-leases.ts). kv-server --replicas > 1 calls it with its self-fence deadline
   * (replication/self-fence.ts) before it registers.
   */
  grantReadLeases(grant: () => LeaseGrant): void {
    this.leases.grantFrom(grant);
  }

  /**
   * From now on no namespace answers a block grant until `check` has resolved once (tried again while
   * it rejects): kv-server --etcd calls it before it serves (replication/first-grant.ts).
   */
  checkBeforeFirstGrant(check: () => Promise<void>): void {
    this.grantGate.set(check);
  }

  /**
   * Each namespace's region (repair's copier reads it: replication/copier.ts; so does slot-load.ts), its
   * live item count, its counters of what was copied from it, and a key's bucket locks.
   */
  regionStores(): Array<{ name: string; store: RegionStore; items: () => number; copied: (items: number, bytes: number) => void; underBucketLocks: <T>(key: Buffer, task: () => Promise<T>) => Promise<T> }> {
    return [...this.hosted.values()].map((ns) => ({
      name: ns.name,
      store: ns.store,
      items: () => ns.counters.count.items,
      underBucketLocks: <T>(key: Buffer, task: () => Promise<T>) => ns.underBucketLocks(key, task),
      copied: (items: number, bytes: number) => {
        ns.counters.count.repairCopiedItems += items;
        ns.counters.count.repairCopiedBytes += bytes;
      },
    }));
  }

  /** From now on stats() reports `view()`: the cluster as this member sees it (kv-server --replicas > 1). */
  watchReplication(view: () => ReplicationView): void {
    this.replication = view;
  }

  /** Each namespace's epoch table (undefined: a region of format 4 or earlier has none). */
  epochTables(): Array<{ name: string; table: EpochTable | undefined }> {
    return [...this.hosted.values()].map((ns) => ({ name: ns.name, table: ns.store.epochs }));
  }

  /** The default namespace's region bytes (tests and kvctl's layout dump read them). */
  get region(): Buffer {
    return this.main.store.bytes;
  }

  /** Stops listening, disconnects every client, releases the regions. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.shutdownNow();
    this.log?.info('stopped');
  }

  private shutdownNow(): void {
    this.closed = true;
    this.grantGate.close();
    for (const listener of this.listening) listener.close();
    for (const ns of this.hosted.values()) ns.shutdownNow();
    for (const provider of this.providers.values()) provider.close();
  }
}
