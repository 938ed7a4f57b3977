// Accepting clients: the loopback queue pair recognised by its secret, the
// protocol version, the token, a session number and a free client ring
// checked, the ring emptied, the connection accepted with its receives posted,
// its memory window bound (where the fabric has windows: an rkey for this
// connection alone, READ-only for a read client), and the hello sent once it
// is established. While a region file is being
// recovered, requests wait (serving only when ready).
import { timingSafeEqual } from 'node:crypto';
import type { EventEmitter } from 'node:events';

import type { Logger } from 'pino';

import type { Connection, ConnectionRequest } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { RejectReason, parseConnectData } from '../../protocol/connect.js';
import { type Fabric, RECVS_PER_CLIENT, bindClientWindow } from '../fabric.js';
import type { ServerSettings } from '../options.js';
import type { ServerStats } from '../stats.js';
import type { RegionStore } from '../store/region.js';
import { UnitTable } from '../store/unit-table.js';
import { recvRequest, send, sendBuffersFor } from './channel.js';
import type { Client, ClientTable } from './clients.js';
import { helloFor } from './hello.js';
import type { SessionNumbers } from './session-numbers.js';
import type { TokenTable } from './tokens.js';

export interface AcceptorParts {
  settings: ServerSettings;
  /** the tokens and their roles (replaced on a reload: KvServer.setTokens) */
  tokens: TokenTable;
  store: RegionStore;
  clients: ClientTable;
  sessions: SessionNumbers;
  stats: ServerStats;
  log: Logger | undefined;
  /** emits 'clientConnected' (id) */
  events: EventEmitter;
  /** the loopback queue pairs' proof (fabric.ts, openLoopback) */
  loopbackSecret: Buffer;
  isClosed: () => boolean;
  /** a client's connection is gone (recovery/departures.ts) */
  onDisconnected: (client: Client, reason: string) => void;
}

export class Acceptor {
  /** the accepted ends of the fabrics' loopback queue pairs */
  private readonly loopbacks = new Set<Connection>();
  /** true from construction on an existing region file until its recovery has finished (see open) */
  private holding: boolean;
  /** connection requests that arrived while holding, answered when it ends */
  private readonly held: Array<{ fabric: Fabric; request: ConnectionRequest }> = [];

  constructor(private readonly parts: AcceptorParts) {
    this.holding = parts.store.existed;
  }

  /** Serving starts: the requests held while recovering are answered, in arrival order. */
  open(): void {
    this.holding = false;
    this.answerHeld();
  }

  /** Answers the held requests: rejected if the server is closing. */
  answerHeld(): void {
    for (const { fabric, request } of this.held.splice(0)) this.onConnectRequest(fabric, request);
  }

  /** Disconnects the accepted ends of the loopback queue pairs (the server is closing). */
  closeLoopbacks(): void {
    for (const connection of this.loopbacks) connection.disconnect();
  }

  onConnectRequest(fabric: Fabric, request: ConnectionRequest): void {
    const { stats, log, clients, store } = this.parts;
    const { version, digest, loopback } = parseConnectData(request.privateData);
    if (loopback && timingSafeEqual(loopback, this.parts.loopbackSecret)) {
      const connection = request.accept({ cq: fabric.cq });
      this.loopbacks.add(connection);
      try {
        // Its atomics need the region's words: a window like a write client's (openLoopback reads it).
        fabric.loopbackWindow = bindClientWindow(fabric, connection, 'write');
      } catch (error) {
        log?.error({ err: (error as Error).message }, 'cannot bind the loopback connection\'s memory window');
      }
      return;
    }
    const closed = this.parts.isClosed();
    if (this.holding && !closed) return this.hold(fabric, request);
    const reject = (reason: number, why: string) => {
      stats.count.rejectedConnections++;
      log?.warn({ peer: request.peerAddress, why }, 'connection rejected');
      request.reject(Buffer.from([reason]));
    };
    if (closed) return reject(RejectReason.FULL, 'shutting down');
    if (version !== KvLayout.PROTOCOL_VERSION) {
      // The second byte names ours, so the client can say which side to upgrade.
      stats.count.rejectedConnections++;
      log?.warn({ peer: request.peerAddress, why: `protocol version ${version}, this server ${KvLayout.PROTOCOL_VERSION}` }, 'connection rejected');
      return request.reject(Buffer.from([RejectReason.VERSION, KvLayout.PROTOCOL_VERSION]));
    }
    const role = this.parts.tokens.roleOf(digest);
    if (role === undefined) return reject(RejectReason.AUTH, 'wrong token');
    // Registered before any read token was accepted (KvServer); a defect if missing: never hand out the writable rkey.
    if (role === 'read' && !fabric.readOnly && !fabric.windows) return reject(RejectReason.FULL, 'no READ-only registration for a read token');
    if (this.parts.sessions.exhausted) {
      return reject(RejectReason.FULL, `the region's ${KvLayout.MAX_SESSIONS} sessions are used up: versions would repeat; copy the data into a new region`);
    }
    const ring = clients.takeRing();
    if (ring === undefined) return reject(RejectReason.FULL, `all ${store.layout.maxClients} client rings in use`);
    const id = clients.newId();
    // Persisted before the hello hands it out: a restart never hands it out again.
    const session = this.parts.sessions.take();
    // The ring starts empty: its consumed counter is where the client's sequence starts.
    const ringStart = store.ringAt(ring);
    store.bytes.fill(0, ringStart, ringStart + store.layout.ringBytes);
    const recvBase = ring * RECVS_PER_CLIENT;
    const recvs = Array.from({ length: Math.min(RECVS_PER_CLIENT, 256) }, (_, i) => recvRequest(fabric, recvBase + i));
    let connection: Connection;
    try {
      connection = request.accept({ cq: fabric.cq, initialRecvs: recvs, recvDepth: RECVS_PER_CLIENT + 16, sendDepth: 256 });
    } catch (error) {
      clients.returnRing(ring);
      log?.error({ err: error }, 'accept failed');
      return;
    }
    let window: Client['window'];
    try {
      // Bound before the hello that carries its rkey is posted on the same send queue.
      window = bindClientWindow(fabric, connection, role);
    } catch (error) {
      // Never fall back to the region's rkey for one client: it would work on any connection.
      connection.disconnect();
      clients.returnRing(ring);
      stats.count.rejectedConnections++;
      log?.error({ peer: request.peerAddress, err: (error as Error).message }, 'cannot bind the client\'s memory window: connection dropped');
      return;
    }
    const client: Client = { id, role, window, digest: digest && Buffer.from(digest), session, ring, fabric, connection, recvBase, sendBuffers: sendBuffersFor(fabric, ring, connection), lastSeen: performance.now(), rejectedOnce: new Set(), held: new UnitTable() };
    clients.add(client);
    connection.once('established', () => {
      const rest = Array.from({ length: RECVS_PER_CLIENT - recvs.length }, (_, i) => recvRequest(fabric, recvBase + recvs.length + i));
      if (rest.length > 0) connection.postRecv(rest);
      send(client, helloFor(client, store, this.parts.settings));
      log?.info({ clientId: id, peer: connection.peerAddress, role, window: window !== undefined }, 'client connected');
      this.parts.events.emit('clientConnected', id);
    });
    connection.once('disconnected', (reason) => this.parts.onDisconnected(client, reason));
  }

  /**
   * A client that connects while a region file is being recovered waits: recovery releases
   * every lock it finds held and rebuilds the heap, so serving it now could release its locks
   * or grant it live blocks. Its request is answered, in arrival order, once recovery ends
   * (open); a client that gives up first sees its own connect timeout.
   */
  private hold(fabric: Fabric, request: ConnectionRequest): void {
    this.held.push({ fabric, request });
    if (this.held.length === 1) this.parts.log?.info({ peer: request.peerAddress }, 'connection requests held until recovery finishes');
  }
}
