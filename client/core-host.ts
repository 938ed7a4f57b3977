// What the sessions of one KvClient over one provider share: the provider,
// one CQ, one native client core and one op queue. Each session adds its
// connection to the core (its link index names it in every op), so a batch
// over several members is one submit and one poll. Control completions come
// back from the core (or, while no core exists, straight from the CQ) and go
// to the session whose queue pair they are for (by qpNum).
//
// Ownership: a host is its CoreHosts' (one per scheme, made on first use);
// the core lives while any connection is attached (the last to go closes it,
// and the next session makes a new one), the provider and CQ until close().
import { ClientCore, type CompletionQueue, type Completion, type Connection, type CoreRegion, type LocationStats, Provider } from '../native/index.js';
import { KvLayout } from '../protocol/constants.js';
import { OpQueue } from './op-queue.js';

/** What the hosts need of the client's options. */
export interface HostOptions {
  /** @default 16 MiB */
  scratchBytes?: number;
  pollMode?: 'busy' | 'event';
  locationCacheEntries?: number;
  /** The op timeout, whole ms. */
  timeoutMs: number;
}

/**
 * Receive buffers per session for the server's messages (session.ts), reposted as they are
 * handled. The server may send a burst (a grant for each of ~30 size classes, a reclaim,
 * pongs) before this client polls: with 16, rxe in the guest counted 2 RNR NAKs per
 * memory-reuse run; with 64, none.
 */
export const CONTROL_RECVS = 64;
/** Send buffers per session, after the receive buffers. */
export const CONTROL_SENDS = 32;
/**
 * Keys and values of one submit, past the largest value scratch holds (whichever member's:
 * a value past a member's item limit goes through a registered buffer, not the arena).
 */
const ARENA_BYTES = 4 << 20;
/**
 * The CQ: the core's own requests (its MAX_INFLIGHT ops, shared by every member) as one
 * session's CQ held before (1024 less its control buffers), and every attached session's
 * control buffers; no deeper than the device allows.
 */
const CORE_CQ_ENTRIES = 1024 - CONTROL_RECVS - CONTROL_SENDS;

export class CoreHost {
  readonly cq: CompletionQueue;
  readonly queue: OpQueue;
  core: ClientCore | undefined;
  private readonly byQp = new Map<number, (completion: Completion) => void>();
  /** Completions of queue pairs nobody listens to yet, kept while sessions are being set up: a hello may come before its connect() resolves. */
  private readonly parked = new Map<number, Completion[]>();
  private settingUp = 0;
  private attached = 0;
  private closing = false;
  private released = false;
  private past = { doorbells: 0, hits: 0, misses: 0, validationFailures: 0 };

  constructor(
    readonly provider: Provider,
    private readonly options: HostOptions,
  ) {
    const wanted = CORE_CQ_ENTRIES + KvLayout.MAX_CORE_CONNECTIONS * (CONTROL_RECVS + CONTROL_SENDS);
    this.cq = provider.createCq(Math.max(1024, Math.min(wanted, provider.deviceInfo.maxCqe)));
    this.queue = new OpQueue(this, options.timeoutMs, options.pollMode ?? 'busy');
  }

  /** `handler` hears the control completions of the queue pair `qpNum`, parked ones first (undefined: no longer). */
  listen(qpNum: number, handler: ((completion: Completion) => void) | undefined): void {
    const parked = this.parked.get(qpNum);
    this.parked.delete(qpNum);
    if (!handler) {
      this.byQp.delete(qpNum);
      return;
    }
    this.byQp.set(qpNum, handler);
    if (parked) for (const completion of parked) handler(completion);
  }

  /** A session is being set up (until settled()): completions of queue pairs not yet listened to are kept for them. */
  settingUpOne(): void {
    this.settingUp++;
  }
  settled(): void {
    if (--this.settingUp > 0) return;
    this.parked.clear();
    this.releaseIfIdle(); // a session whose setup failed after close()
  }

  /** A control completion, to its session (one of a session gone is dropped: a flush). */
  route(completion: Completion): void {
    const handler = this.byQp.get(completion.qpNum);
    if (handler) return handler(completion);
    if (this.settingUp === 0) return;
    const parked = this.parked.get(completion.qpNum);
    if (parked) parked.push(completion);
    else this.parked.set(completion.qpNum, [completion]);
  }

  /** Polls once for control completions of sessions being set up (with a core: the queue's poll, which routes them). */
  pump(): void {
    if (this.core) return this.queue.pollOnce();
    for (const completion of this.cq.poll()) this.route(completion);
  }

  /** Connections attached to the core now (the last to detach closes it). */
  get links(): number {
    return this.attached;
  }

  /** Adds a connection (made on this host's CQ) to the core, making the core first if there is none; returns its link index. */
  attach(connection: Connection, region: CoreRegion): number {
    let link = 0;
    if (this.core) {
      link = this.core.addConnection(this.provider, connection, region);
    } else {
      const scratchBytes = this.options.scratchBytes ?? 16 << 20;
      const arenaBytes = ARENA_BYTES + Math.min(scratchBytes / 2, 1 << 30) + KvLayout.MAX_KEY_BYTES;
      const event = this.options.pollMode === 'event';
      this.core = new ClientCore(this.provider, connection, this.cq, region, {
        scratchBytes, opTimeoutMs: this.options.timeoutMs, arenaBytes, armWhenDone: event, locationCacheEntries: this.options.locationCacheEntries,
      });
      if (event) {
        this.cq.watch(() => this.queue.pollOnce());
        this.cq.arm();
      }
    }
    this.attached++;
    return link;
  }

  /** Ends a link's data path (its ops fail); the last one closes the core. */
  detach(link: number): void {
    const core = this.core;
    if (!core) return;
    if (--this.attached > 0) {
      core.closeConnection(link);
      // Its wait drained the CQ: the other members' completions it took wake no event-mode watcher.
      setImmediate(() => this.queue.pollOnce());
      return;
    }
    const s = core.locationStats();
    const p = this.past;
    this.past = { doorbells: p.doorbells + core.doorbells, hits: p.hits + s.hits, misses: p.misses + s.misses, validationFailures: p.validationFailures + s.validationFailures };
    this.core = undefined;
    if (this.options.pollMode === 'event') this.cq.unwatch();
    core.close(); // scratch is safe to free once it returns
    // What it answered as it closed (a replicated write the queue left to it while other links
    // were attached: failInflight) is handed out now; nothing would poll this core again.
    this.queue.closed(core);
    this.releaseIfIdle();
  }

  /** post_send calls over every core so far. */
  get doorbells(): number {
    return this.past.doorbells + (this.core?.doorbells ?? 0);
  }

  /** The location caches' counts over every core so far. */
  get locationStats(): LocationStats {
    const now = this.core?.locationStats();
    const { hits, misses, validationFailures } = this.past;
    return now ? { hits: hits + now.hits, misses: misses + now.misses, validationFailures: validationFailures + now.validationFailures } : { hits, misses, validationFailures };
  }

  /** Releases the provider once no session is attached (now, or when the last detaches). */
  close(): void {
    if (this.closing) return;
    this.closing = true;
    this.queue.stop();
    this.releaseIfIdle();
  }

  private releaseIfIdle(): void {
    if (!this.closing || this.released || this.attached > 0 || this.settingUp > 0) return;
    this.released = true;
    this.provider.close();
  }
}

/** A KvClient's hosts, one per provider scheme. */
export class CoreHosts {
  private readonly hosts = new Map<string, CoreHost>();

  constructor(private readonly options: HostOptions) {}

  /** The host of `scheme`, made on first use; throws (TransportError) where the provider cannot be had. */
  of(scheme: string): CoreHost {
    let host = this.hosts.get(scheme);
    if (!host) {
      const provider = new Provider(scheme);
      try {
        host = new CoreHost(provider, this.options);
      } catch (error) {
        provider.close();
        throw error;
      }
      this.hosts.set(scheme, host);
    }
    return host;
  }

  /** Location-cache counts over every host. */
  locationStats(): LocationStats {
    const sum = { hits: 0, misses: 0, validationFailures: 0 };
    for (const host of this.hosts.values()) {
      const s = host.locationStats;
      sum.hits += s.hits;
      sum.misses += s.misses;
      sum.validationFailures += s.validationFailures;
    }
    return sum;
  }

  /** Each host's retries by KvOp (metrics). */
  retried(): Float64Array[] {
    return Array.from(this.hosts.values(), (host) => host.queue.retried);
  }

  close(): void {
    for (const host of this.hosts.values()) host.close();
  }
}
