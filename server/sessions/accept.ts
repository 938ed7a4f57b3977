// Accepting a namespace's clients, once KvServer has checked the protocol
// version and the token and routed the request here (kv-server.ts): a session
// number and a free client ring checked, the ring emptied, the connection
// accepted with its receives posted, its memory window bound (where the
// fabric has windows: an rkey for this connection alone, READ-only for a read
// client), and the hello sent once it is established. While the namespace's
// region file is being recovered, requests wait (serving only when ready).
import type { EventEmitter } from 'node:events';

import type { Logger } from 'pino';

import type { Connection, ConnectionRequest } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { RejectReason } from '../../protocol/connect.js';
import type { Role } from '../../protocol/tokens.js';
import { type Fabric, RECVS_PER_CLIENT, bindClientWindow } from '../fabric.js';
import type { ServerSettings } from '../options.js';
import type { ServerStats } from '../stats.js';
import type { RegionStore } from '../store/region.js';
import { UnitTable } from '../store/unit-table.js';
import { recvRequest, send, sendBuffersFor } from './channel.js';
import type { Client, ClientTable } from './clients.js';
import { helloFor } from './hello.js';
import type { ReadLeases } from './read-leases.js';
import type { SessionNumbers } from './session-numbers.js';

export interface AcceptorParts {
  /** the namespace's name (its clients' hellos say it) */
  namespace: string;
  settings: ServerSettings;
  store: RegionStore;
  clients: ClientTable;
  sessions: SessionNumbers;
  stats: ServerStats;
  log: Logger | undefined;
  /** emits 'clientConnected' (id) */
  events: EventEmitter;
  isClosed: () => boolean;
  /** a client's connection is gone (recovery/departures.ts) */
  onDisconnected: (client: Client, reason: string) => void;
  /** the server's read leases (a replica's hello grants the first) */
  leases: ReadLeases;
}

/** What a request's token gave it (sessions/tokens.ts), and the digest it presented. */
export interface Presented {
  role: Role;
  digest: Buffer | undefined;
}

export class Acceptor {
  /** the accepted ends of the fabrics' loopback queue pairs */
  private readonly loopbacks = new Set<Connection>();
  /** true from construction on an existing region file until its recovery has finished (see open) */
  private holding: boolean;
  /** connection requests that arrived while holding, answered when it ends */
  private readonly held: Array<{ fabric: Fabric; request: ConnectionRequest; client: Presented }> = [];

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
    for (const { fabric, request, client } of this.held.splice(0)) this.onConnectRequest(fabric, request, client);
  }

  /** Disconnects the accepted ends of the loopback queue pairs (the server is closing). */
  closeLoopbacks(): void {
    for (const connection of this.loopbacks) connection.disconnect();
  }

  /** Accepts the accepted end of this namespace's loopback queue pair on `fabric` (KvServer recognised its secret). */
  acceptLoopback(fabric: Fabric, request: ConnectionRequest): void {
    const connection = request.accept({ cq: fabric.cq });
    this.loopbacks.add(connection);
    try {
      // Its atomics need the region's words: a window like a write client's (openLoopback reads it).
      fabric.loopbackWindow = bindClientWindow(fabric, connection, 'write');
    } catch (error) {
      this.parts.log?.error({ err: (error as Error).message }, 'cannot bind the loopback connection\'s memory window');
    }
  }

  /** Rejects a request with `reason` (and `detail`, a second byte), counted and logged as `why`. */
  reject(request: ConnectionRequest, reason: number, why: string, detail?: number): void {
    this.parts.stats.count.rejectedConnections++;
    this.parts.log?.warn({ peer: request.peerAddress, why }, 'connection rejected');
    request.reject(Buffer.from(detail === undefined ? [reason] : [reason, detail]));
  }

  /** A request whose token opens this namespace (as `presented.role`). */
  onConnectRequest(fabric: Fabric, request: ConnectionRequest, presented: Presented): void {
    const { stats, log, clients, store } = this.parts;
    const closed = this.parts.isClosed();
    if (this.holding && !closed) return this.hold(fabric, request, presented);
    const reject = (reason: number, why: string) => this.reject(request, reason, why);
    if (closed) return reject(RejectReason.FULL, 'shutting down');
    const { role, digest } = presented;
    // Registered before any read token was accepted (KvServer); a defect if missing: never hand out the writable rkey.
    if (role === 'read' && !fabric.readOnly && !fabric.windows) return reject(RejectReason.FULL, 'no READ-only registration for a read token');
    if (this.parts.sessions.exhausted) {
      return reject(RejectReason.FULL, `the region's ${KvLayout.MAX_SESSIONS} sessions are used up: versions would repeat; copy the data into a new region`);
    }
    const ring = clients.takeRing(fabric);
    if (ring === undefined) return reject(RejectReason.FULL, ringsFullWhy(fabric, store.layout.maxClients));
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
      clients.returnRing(ring, fabric);
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
      clients.returnRing(ring, fabric);
      stats.count.rejectedConnections++;
      log?.error({ peer: request.peerAddress, err: (error as Error).message }, 'cannot bind the client\'s memory window: connection dropped');
      return;
    }
    const client: Client = { id, role, window, digest: digest && Buffer.from(digest), session, ring, fabric, connection, recvBase, sendBuffers: sendBuffersFor(fabric, ring, connection), lastSeen: performance.now(), rejectedOnce: new Set(), held: new UnitTable() };
    clients.add(client);
    connection.once('established', () => {
      const rest = Array.from({ length: RECVS_PER_CLIENT - recvs.length }, (_, i) => recvRequest(fabric, recvBase + recvs.length + i));
      if (rest.length > 0) connection.postRecv(rest);
      send(client, helloFor(client, store, this.parts.settings, this.parts.namespace, this.parts.leases.forHello()));
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
  private hold(fabric: Fabric, request: ConnectionRequest, client: Presented): void {
    this.held.push({ fabric, request, client });
    if (this.held.length === 1) this.parts.log?.info({ peer: request.peerAddress }, 'connection requests held until recovery finishes');
    this.parts.log?.debug({ peer: request.peerAddress, held: this.held.length }, 'connection request held');
  }
}

/** Why takeRing found no ring for a client on `fabric`. */
function ringsFullWhy(fabric: Fabric, maxClients: number): string {
  if (fabric.holding < fabric.admits) return `all ${maxClients} client rings in use`;
  if (fabric.admits === maxClients) return `all ${maxClients} client rings in use`;
  return `${fabric.admits} clients connected on ${fabric.provider.scheme}://, as many as ${fabric.provider.deviceInfo.name}'s completion queue can serve (--max-clients ${maxClients})`;
}
