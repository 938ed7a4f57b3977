// One ServerClient's connection to its server (server-client.ts), for as long
// as it wants it: the session of the moment (a Session per connection), the
// status, the reconnect loop after a failed start or a lost connection (its
// backoff timer, and the AbortController with which close() gives up a connect
// in progress), the control messages a session hands up (grants, reclaim,
// pongs), and the shutdown. The ServerClient composes one and runs the data
// path over its session; its withBackups views share it through their prototype.
import type { Completion } from '../native/index.js';
import { KvLayout } from '../protocol/constants.js';
import type { ControlMessage, Hello } from '../protocol/control.js';
import { KvDisconnectedError, KvOutOfMemoryError, KvProtocolError } from '../protocol/errors.js';
import type { CoreHost, CoreHosts } from './core-host.js';
import { Session, type SessionOptions } from './session.js';
import type { KvClientOptions, KvStatusName } from './types.js';

/** What a link needs: its sessions' options, how long a connect (and a closing drain) may take, whether to reconnect. */
export interface ServerLinkOptions extends SessionOptions, Pick<KvClientOptions, 'pollMode' | 'timeoutMs' | 'reconnect'> {
  /** The KvClient's hosts: its sessions share their provider's core and op queue. */
  hosts: CoreHosts;
}

/** Who hears the link: its ServerClient, which emits these as its own events. */
export interface ServerLinkListener {
  status(status: KvStatusName): void;
  error(error: Error): void;
}

export class ServerLink {
  private current: Session | undefined;
  private _status: KvStatusName = 'connecting';
  /** The host of its sessions (from the first on): shared with the KvClient's other servers. */
  private _host: CoreHost | undefined;
  /** The last hello (kept while reconnecting: its role and limits still say what the server takes). */
  private _hello: Hello | undefined;
  private unleased = false; // readWithoutLease() was called: each session's GETs count whatever the read lease
  private starting = false; // start() under way: keepTrying leaves it be (KvClient asks again if it fails), so no two connects race
  private readonly timeoutMs: number;
  private reconnectTimer: NodeJS.Timeout | undefined;
  /** The reconnect loop's attempts in progress (reconnectNow can start one while another runs). */
  private attempts = 0;
  /** The reconnect loop's backoff step (scheduleReconnect). */
  private step = 1;
  /** Why the reconnect loop's last attempt failed (undefined once one succeeds): ops refused meanwhile say it. */
  lastFailure: string | undefined;
  /** Aborted by close(): gives up any connect still in progress (else it would hold the process up to its timeout). */
  private readonly closer = new AbortController();
  private closing: Promise<void> | undefined;

  constructor(
    private readonly options: ServerLinkOptions,
    private readonly listener: ServerLinkListener,
  ) {
    this.timeoutMs = Math.ceil(options.timeoutMs ?? 5000); // the transport takes whole ms
  }

  /** The connection's session while it is up (undefined while connecting, reconnecting, and once closed). */
  get session(): Session | undefined {
    return this.current;
  }

  get status(): KvStatusName {
    return this._status;
  }

  get host(): CoreHost | undefined {
    return this._host;
  }

  get hello(): Hello | undefined {
    return this._hello;
  }

  /** Connects once; rejects with why not. */
  async start(): Promise<void> {
    this.starting = true;
    try {
      await this.establish();
    } catch (error) {
      this.lastFailure = (error as Error).message;
      throw error;
    } finally {
      this.starting = false;
    }
  }

  /** After a failed start: keep trying in the background (status 'reconnecting'), as after losing an established connection. */
  keepTrying(): void {
    if (this.starting || this._status === 'closed' || this._status === 'ready' || this._status === 'reconnecting') return; // trying already
    this.setStatus('reconnecting');
    this.step = 1;
    this.scheduleReconnect();
  }

  /** The server is (back) at its address: try now rather than at the next backoff step (the loop's step is kept). */
  reconnectNow(): void {
    if (this._status !== 'reconnecting') return;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    this.scheduleReconnect(0);
  }

  /** From now on each session's GETs count whatever the read lease (SessionOptions.readsUnleased), this one's too. */
  readWithoutLease(): void {
    this.unleased = true;
    this.current?.liftLease();
  }

  /** Waits for operations in flight, gives unused blocks back, disconnects. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private setStatus(status: KvStatusName): void {
    if (this._status === status) return;
    this._status = status;
    this.listener.status(status);
  }

  private async establish(): Promise<void> {
    const session = await Session.open({ ...this.options, signal: this.closer.signal, readsUnleased: () => this.unleased }, this.timeoutMs, this.options.hosts, (s, completion) => this.onControl(s, completion));
    if (this._status === 'closed') {
      // close() came while we connected: nothing will ever use or close this session.
      session.close();
      throw new KvDisconnectedError('the client was closed');
    }
    if (this.current) {
      // Another attempt connected first (reconnectNow starts one while a reconnect's still runs): this session is
      // surplus. Kept, it would hold a ring and blocks on the server and keep the client's core open for good.
      session.close();
      return;
    }
    this.current = session;
    this._host = session.host;
    this._hello = session.hello;
    session.connection.once('disconnected', (reason) => this.lost(session, reason));
    session.host.queue.attach(session);
    session.startKeepalive(() => session.host.queue.pollOnce(), (reason) => this.lost(session, reason));
    this.setStatus('ready');
  }

  private lost(session: Session, reason: string): void {
    if (this.current !== session) return;
    session.host.queue.lose(session, reason); // fails what is in flight, then its link can close
    session.abandon();
    this.current = undefined;
    if (this._status === 'closed') return;
    if (this.options.reconnect === false) {
      this.setStatus('closed');
      return;
    }
    this.lastFailure = undefined;
    this.setStatus('reconnecting');
    this.step = 1;
    this.scheduleReconnect();
  }

  /** An attempt of the reconnect loop after `delay` ms (by default its backoff step's: about 50 ms × 2^step, at most 2 s). */
  private scheduleReconnect(delay = Math.min(2000, 50 * 2 ** this.step) * (0.5 + Math.random() / 2)): void {
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      if (this._status !== 'reconnecting') return;
      this.attempts++;
      this.establish().then(
        () => {
          this.attempts--;
          this.lastFailure = undefined;
        },
        (error: Error) => {
          this.attempts--;
          if (this._status !== 'reconnecting') return; // another attempt connected, or the client closed
          this.lastFailure = error.message;
          // One loop of attempts: another attempt still running, or one scheduled, goes on instead of this one.
          if (this.attempts > 0 || this.reconnectTimer) return;
          this.step++;
          this.scheduleReconnect();
        },
      );
    }, delay);
  }

  private async shutdown(): Promise<void> {
    const wasReady = this._status === 'ready';
    this.setStatus('closed');
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.closer.abort(); // every attempt in progress: reconnectNow() can start one while another still runs
    const session = this.current;
    if (!session) return;
    session.host.queue.close(session, new KvDisconnectedError('the client was closed'));
    session.stopKeepalive();
    // In-flight ops may hold bucket locks: let them finish rather than abandon them.
    await session.host.queue.drain(session, wasReady ? performance.now() + this.timeoutMs : 0, new KvDisconnectedError('the client was closed'));
    this.current = undefined;
    session.close(); // nothing in flight is the queue's any more: its link closes too
  }

  // ---- control messages --------------------------------------------------------------------

  /** A completion of one of the session's control requests, as the core handed it back. */
  private onControl(session: Session, completion: Completion): void {
    let message: ControlMessage | undefined;
    try {
      message = session.received(completion);
    } catch (error) {
      if (!(error instanceof KvProtocolError)) throw error;
      this.listener.error(error);
      return;
    }
    if (message?.t === 'pong') {
      session.pong(message);
    } else if (message?.t === 'reclaim') {
      try {
        session.pools.answerReclaim(session.host.queue.needed(session));
      } catch {
        // the connection is going away
      }
    } else if (message?.t === 'granted') {
      if (!session.pools.granted(message)) return;
      if (message.blocks.length === 0) {
        // Nothing left of that size: PUTs waiting for it fail now.
        const bytes = session.pools.unitsOf(message.c) * KvLayout.UNIT_BYTES;
        session.host.queue.failWaiting(session, message.c, new KvOutOfMemoryError(`the server has no free block of ${bytes} bytes`));
      }
      // Not flush(): we are inside the queue's result loop, and flush polls,
      // which would overwrite the result words still being read.
      session.host.queue.scheduleFlush();
    }
  }
}
