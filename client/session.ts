// One connection to one server: its queue pair on its host's CQ (the host,
// core-host.ts, is the KvClient's for the URL's provider: one core drives every
// member's connection, this one as link `link`), the server's hello, the heap
// blocks granted over this connection, the control channel (msgpack over
// SEND/RECV on the same queue pair: grants, returns, reclaim, keepalive) and
// its keepalive. A ServerClient opens one session per connection; losing the
// connection ends the session, and a reconnect opens a new one.
import { Access, type Completion, type Connection, type MemoryRegion, Opcode, Provider, SendFlag, WcStatus } from '../native/index.js';
import { type ControlMessage, type Hello, type Pong, decode, encode } from '../protocol/control.js';
import { KvLayout } from '../protocol/constants.js';
import { KvDisconnectedError, KvError, KvInvalidArgumentError, KvProtocolError } from '../protocol/errors.js';
import { schemeOf, urlExamples } from '../protocol/providers.js';
import { SendBuffers } from '../protocol/send-buffers.js';
import { StallClock } from '../protocol/stall-clock.js';
import { BlockPools } from './block-pools.js';
import { CONTROL_RECVS, CONTROL_SENDS, CoreHost, type CoreHosts } from './core-host.js';
import { CONTROL_TAG, connect, controlBytes, coreRegion, firstCompletion, providerError, recv } from './session-connect.js';

/** What a session needs to connect. */
export interface SessionOptions {
  url: string;
  token?: string;
  /** the namespace the token must open (refused with KV_NO_NAMESPACE where the server has none of that name) */
  namespace?: string;
  /** @default 16 MiB */
  scratchBytes?: number;
  /** Event mode: the core re-arms the CQ after each submit and poll. @default 'busy' */
  pollMode?: 'busy' | 'event';
  /** @default KvLayout.DEFAULT_LOCATION_CACHE_ENTRIES */
  locationCacheEntries?: number;
  /**
   * The epoch of the config this client routes by (a cluster's; undefined: no config, the
   * server was named directly). A replica's read lease counts only while it is at least the
   * replica's (protocol v9); `configBehind` hears the replica's when it is not.
   */
  configEpoch?: () => number;
  configBehind?: (epoch: number) => void;
  /** True: GETs count whatever the read lease (repair's copier reading its own member, quiet or not: a CAS on
   *  the version read follows each, at the hash slot's epoch, so a stale read writes nothing). */
  readsUnleased?: () => boolean;
  /** Aborted (the client closing): a connect in progress is given up, and open rejects. */
  signal?: AbortSignal;
}

/** A replica that grants no read lease now (self-fenced, or not registered yet) is asked again this often. */
const LEASE_RETRY_MS = 100;
/** How far an unleased connection's reads are permitted, again at each pong. */
const UNLEASED_MS = 2 ** 31;
/** A renewing ping's pong is polled for this many times, a millisecond apart. */
const PONG_POLLS = 200;

export class Session {
  /** Its index among the core's connections (OpLayout.CONNECTION). */
  readonly link: number;
  /** The largest item (header + key + value) the core's scratch holds for this server. */
  readonly itemLimit: number;
  /** The blocks granted over this connection. */
  readonly pools: BlockPools;
  /** Why the connection was lost (the transport's first error, or the keepalive's), once it is. */
  lostReason: string | undefined;
  /** Control buffers CONTROL_RECVS and up: a burst of sends (a reclaim's answer) waits for them, never overwrites one the NIC may still read. */
  private readonly sendBuffers: SendBuffers;
  private lastPong = 0;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private ended = false;
  /** When each ping not yet answered was sent (pongs answer them in order): a read lease counts from its ping. */
  private readonly pingsSent: number[] = [];
  /** The read lease's end (performance.now() time); only from a server whose hello has readLeaseMs. */
  private readsUntil = -Infinity;
  /** The config epoch the server last said it applied (appliedConfigEpoch). */
  private serverEpoch: number;
  /** The ping that renews the read lease before it ends. */
  private renewTimer: NodeJS.Timeout | undefined;
  /** startKeepalive's poll: also run while a renewing ping waits for its pong (an idle busy-mode client polls nowhere else). */
  private pollControl: (() => void) | undefined;
  private pongPoll: NodeJS.Timeout | undefined;

  private constructor(
    readonly host: CoreHost,
    /** A host of its own (Session.open without one): closed with the session. */
    private readonly ownsHost: boolean,
    readonly connection: Connection,
    private readonly control: MemoryRegion,
    readonly hello: Hello,
    /** When the connect request was sent: the hello's read lease counts from then. */
    askedAt: number,
    private readonly config: Pick<SessionOptions, 'configEpoch' | 'configBehind' | 'readsUnleased'>,
  ) {
    this.serverEpoch = hello.configEpoch ?? 0;
    this.link = host.attach(connection, coreRegion(hello));
    this.itemLimit = host.core!.connectionItemLimit(this.link);
    this.pools = new BlockPools(hello.layout.classes, Number(hello.layout.heapBytes), (message) => this.sendControl(message));
    this.sendBuffers = new SendBuffers(CONTROL_SENDS, (buffer, bytes) => {
      const index = CONTROL_RECVS + buffer;
      const localOffset = index * KvLayout.CONTROL_RECV_BYTES;
      bytes.copy(control.bytes, localOffset);
      connection.postSend([{ wrId: CONTROL_TAG + index, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: control, localOffset, length: bytes.length }]);
    });
    if (hello.readLeaseMs !== undefined && !config.readsUnleased?.()) {
      // A replica: no GET of ours counts past its lease (until then the core would not limit them).
      this.core.permitReads(this.link, askedAt - performance.now());
      this.permitReads(askedAt, hello.readLeaseMs, hello.configEpoch);
    }
  }

  /** The host's core, while this session is attached. */
  get core() {
    return this.host.core!;
  }

  /**
   * Connects on `host` (by default a host of its own), waits for the server's hello and adds
   * the connection to the host's core; from then on `onControl` hears its control completions.
   * Rejects with a KvError: KV_AUTH, KV_NO_NAMESPACE, KV_PROTOCOL, KV_INVALID_ARGUMENT (no such
   * provider, or not usable here), KV_DISCONNECTED (anything else).
   */
  static async open(options: SessionOptions, timeoutMs: number, hosts?: CoreHosts, onControl?: (session: Session, completion: Completion) => void): Promise<Session> {
    const { url } = options;
    const scheme = schemeOf(url);
    if (!scheme) throw new KvInvalidArgumentError(`unknown URL '${url}': expected ${urlExamples()}`);
    let host: CoreHost;
    try {
      host = hosts ? hosts.of(scheme) : new CoreHost(new Provider(scheme), { ...options, timeoutMs });
    } catch (error) {
      throw providerError(url, error);
    }
    let control: MemoryRegion | undefined;
    let connection: Connection | undefined;
    const askedAt = performance.now();
    host.settingUpOne();
    try {
      control = host.provider.allocate((CONTROL_RECVS + CONTROL_SENDS) * KvLayout.CONTROL_RECV_BYTES, Access.LOCAL_WRITE);
      connection = await connect(host, control, options, timeoutMs);
      // The hello is the server's first message; what follows it (grants) waits for the session.
      const early: Completion[] = [];
      const wc = await firstCompletion(host, connection.qpNum, early, timeoutMs, options.signal);
      if (options.signal?.aborted) throw new KvDisconnectedError(`${url}: the client was closed while it connected`);
      if (!wc || wc.statusName !== 'SUCCESS' || wc.opcode !== Opcode.RECV) {
        throw new KvDisconnectedError(`${url}: no hello from the server (${wc?.statusName ?? 'nothing'})`);
      }
      const index = wc.wrId - CONTROL_TAG;
      const hello = decode(controlBytes(control, index, wc.byteLen));
      if (hello.t !== 'hello' || hello.v !== KvLayout.PROTOCOL_VERSION) throw new KvProtocolError(`${url}: unexpected first message`);
      connection.postRecv([recv(control, index)]);
      const session = new Session(host, !hosts, connection, control, hello, askedAt, options);
      const handler = (completion: Completion) => onControl?.(session, completion);
      host.listen(connection.qpNum, handler);
      for (const completion of early) handler(completion);
      return session;
    } catch (error) {
      if (connection) {
        host.listen(connection.qpNum, undefined);
        connection.disconnect();
      }
      if (!hosts) host.close();
      else if (control && !connection) control.deregister();
      else if (control) void connection!.fenced({ warnMs: 60_000 }).then((fenced) => fenced && control!.deregister());
      throw providerError(url, error);
    } finally {
      host.settled();
    }
  }

  /**
   * The message of a control completion (of a request posted with CONTROL_TAG + a control
   * buffer's index), its receive buffer posted again; undefined for flushes (the connection is
   * going away) and for our own SENDs completing (their buffers are free again: messages waiting
   * for one go out). A malformed message throws a KvProtocolError.
   */
  received(completion: Completion): ControlMessage | undefined {
    const { wrId, byteLen, status, opcode } = completion;
    if (opcode === Opcode.SEND && status === WcStatus.SUCCESS) {
      try {
        this.sendBuffers.completed(wrId - CONTROL_TAG - CONTROL_RECVS);
      } catch {
        // the connection is going away
      }
      return undefined;
    }
    if (opcode !== Opcode.RECV || status !== WcStatus.SUCCESS) return undefined;
    const index = wrId - CONTROL_TAG;
    try {
      return decode(controlBytes(this.control, index, byteLen));
    } catch (error) {
      throw new KvProtocolError(`malformed control message from the server: ${(error as Error).message}`);
    } finally {
      this.connection.postRecv([recv(this.control, index)]);
    }
  }

  /** Sends a control message now, or once a send buffer is free (see received); throws if the connection cannot post. */
  sendControl(message: ControlMessage): void {
    this.sendBuffers.send(encode(message));
  }


  /**
   * RDMA has no keepalive of its own: every interval the server gave, `poll`
   * runs (an idle busy-mode client polls nowhere else: pongs and SEND
   * completions land there) and a ping goes out; three intervals without a
   * pong, and `lost` is called (not counting time this process itself stalled).
   */
  startKeepalive(poll: () => void, lost: (reason: string) => void): void {
    const interval = this.hello.keepaliveMs;
    this.pollControl = poll;
    const clock = new StallClock(interval);
    this.lastPong = performance.now();
    this.keepaliveTimer = setInterval(() => {
      if (this.ended) return;
      const stalledMs = clock.stalledMs();
      if (stalledMs > 0) this.lastPong = Math.min(performance.now(), this.lastPong + stalledMs); // our own stall, not the server's silence
      poll();
      if (this.ended) return;
      if (performance.now() - this.lastPong > 3 * interval) return lost(`no keepalive answer for ${3 * interval} ms`);
      try {
        this.ping();
      } catch (error) {
        lost((error as Error).message);
      }
    }, interval);
    this.keepaliveTimer.unref();
  }

  stopKeepalive(): void {
    clearInterval(this.keepaliveTimer);
    clearTimeout(this.renewTimer);
    clearTimeout(this.pongPoll);
  }

  /** Whether a GET answered now would count: the server grants no leases, or ours has not ended. */
  get readLeaseHeld(): boolean {
    return this.hello.readLeaseMs === undefined || this.config.readsUnleased?.() === true || this.readsUntil > performance.now();
  }

  /** The config epoch the server last said it applied (a replica's hello and pongs, protocol v9; 0: none said). */
  get appliedConfigEpoch(): number {
    return this.serverEpoch;
  }

  /**
   * undefined when the server grants no read leases (no config behind it); else why a GET of a hash slot at config
   * `epoch` waits (retryable), having asked the server's applied epoch again (a ping; at most one per 20 ms).
   */
  behindEpoch(epoch: number): KvError | undefined {
    if (this.hello.readLeaseMs === undefined) return undefined;
    const last = this.pingsSent[this.pingsSent.length - 1];
    if (!this.ended && (last === undefined || performance.now() - last >= 20)) {
      try {
        this.ping();
        this.awaitPong();
      } catch {
        // the connection is going away: the keepalive notices
      }
    }
    return new KvError('KV_READ_LEASE_LAPSED', `the replica has not applied config epoch ${epoch} of this key's hash slot yet (it is at ${this.serverEpoch})`, true);
  }

  /** The server answered a ping (a replica's pong renews the read lease from that ping's sending). */
  pong(message: Pong): void {
    this.lastPong = performance.now();
    if (message.configEpoch !== undefined) this.serverEpoch = Math.max(this.serverEpoch, message.configEpoch);
    const sentAt = this.pingsSent.shift();
    if (this.config.readsUnleased?.()) this.liftLease();
    else if (this.hello.readLeaseMs !== undefined && sentAt !== undefined) this.permitReads(sentAt, message.leaseMs ?? 0, message.configEpoch);
  }

  /** From now on this connection's reads (GETs, INCRs' answers) count whatever the lease (readsUnleased; renewed at each pong). */
  liftLease(): void {
    if (this.ended || this.hello.readLeaseMs === undefined) return;
    clearTimeout(this.renewTimer);
    this.core.permitReads(this.link, UNLEASED_MS);
  }

  private ping(): void {
    this.pingsSent.push(performance.now());
    this.sendControl({ t: 'ping' });
  }

  /**
   * The server granted a read lease of `leaseMs` from `sentAt` (docs/replication-design.md §4.4):
   * the core counts this connection's GETs answered until then (less 10⁻³ of it, for clock rates),
   * and a ping renews it halfway. No lease (0: the server is self-fenced, or not yet registered),
   * or one from a replica whose config is newer than ours (`serverEpoch`: our routing may send it
   * a hash slot it no longer serves; we read config again): the one held runs out, and a ping asks
   * again shortly.
   */
  private permitReads(sentAt: number, leaseMs: number, serverEpoch: number | undefined): void {
    if (this.ended) return;
    const ours = this.config.configEpoch?.();
    if (ours !== undefined && serverEpoch !== undefined && ours < serverEpoch) {
      leaseMs = 0;
      this.config.configBehind?.(serverEpoch);
    }
    const until = sentAt + leaseMs * (1 - 1e-3);
    const now = performance.now();
    if (leaseMs > 0 && until > this.readsUntil) {
      this.readsUntil = until;
      this.core.permitReads(this.link, until - now);
    }
    clearTimeout(this.renewTimer);
    const renewIn = this.readsUntil > now ? (this.readsUntil - now) / 2 : LEASE_RETRY_MS;
    this.renewTimer = setTimeout(() => {
      if (this.ended) return;
      try {
        this.ping();
      } catch {
        return; // the connection is going away: the keepalive notices
      }
      this.awaitPong();
    }, renewIn);
    this.renewTimer.unref();
  }

  /**
   * Polls every millisecond (at most PONG_POLLS times) until the pings sent are answered: a pong
   * left in the CQ of an idle busy-mode client would renew its lease only at its next op, whose
   * own answer the core checks first (and finds the lease over).
   */
  private awaitPong(): void {
    if (this.pongPoll || !this.pollControl) return;
    let polls = 0;
    const again = () => {
      this.pongPoll = undefined;
      if (this.ended || this.pingsSent.length === 0 || ++polls > PONG_POLLS) return;
      this.pollControl!();
      if (this.pingsSent.length > 0) this.pongPoll = setTimeout(again, 1).unref();
    };
    this.pongPoll = setTimeout(again, 0).unref();
  }

  /** The connection is lost: stop using it, close the core and release the transport. Call it once the ops in flight have failed. */
  abandon(): void {
    if (this.ended) return;
    this.end();
    this.release();
  }

  /** Gives unused blocks back, disconnects, closes the core and releases the transport. Call it once the ops in flight are done or failed. */
  close(): void {
    if (this.ended) return; // abandoned already: nothing to give back over a lost connection
    this.end();
    try {
      // Blocks we were granted and never used go back before we leave.
      this.pools.returnAll();
    } catch {
      // the connection is already gone
    }
    this.release();
  }

  private end(): void {
    this.ended = true;
    this.stopKeepalive();
  }

  /**
   * Disconnects first, so that whatever the core still has posted on it is
   * flushed at once and closing its link never waits on a silent server; then
   * the link (the last closes the core: scratch is safe to free once it returns).
   */
  private release(): void {
    const { connection, control } = this;
    connection.disconnect();
    this.host.listen(connection.qpNum, undefined);
    this.host.detach(this.link);
    if (this.ownsHost) this.host.close();
    // The provider outlives the session: its control buffers go once the server can no longer write them.
    else void connection.fenced({ warnMs: 60_000 }).then((fenced) => fenced && control.deregister());
  }
}
