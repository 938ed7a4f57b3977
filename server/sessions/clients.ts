// The connected clients: each one's record (its session, client ring, queue
// pair and the blocks granted to it), found by connection or by queue pair
// number, and the free client rings. Accept (accept.ts) adds a client;
// its departure (recovery/departures.ts) removes it, and returns its client
// ring only once its locks are released.
import type { Connection, MemoryWindow } from '../../native/index.js';
import type { SendBuffers } from '../../protocol/send-buffers.js';
import type { Role } from '../../protocol/tokens.js';
import type { Fabric } from '../fabric.js';
import type { UnitTable } from '../store/unit-table.js';

export interface Client {
  id: number;
  /** what its token allows: a read client has a READ-only rkey, no grants and no notices */
  role: Role;
  /**
   * Its memory window (where the fabric has windows): the rkey its hello names, usable on its
   * connection alone, READ-only for a read client; its connection's end (fence) invalidates it.
   */
  window: MemoryWindow | undefined;
  /** sha256 of the token it presented (undefined: none), checked again when the tokens are replaced */
  digest: Buffer | undefined;
  /** the high bits of every version it writes (see session-numbers.ts) */
  session: bigint;
  /** its client ring: where its notices' records land, and its slice of receive buffers and send buffers */
  ring: number;
  /** the provider it connected through */
  fabric: Fabric;
  connection: Connection;
  /** first receive buffer (wr_id base) */
  recvBase: number;
  /** its control messages' send buffers (a slice of the fabric's, see channel.ts) */
  sendBuffers: SendBuffers;
  lastSeen: number;
  /** kinds of bad messages already logged for it (see channel.ts, complain) */
  rejectedOnce: Set<string>;
  /** block -> size class: granted to this client and not yet published (by a notice) or returned */
  held: UnitTable;
}

export class ClientTable {
  private readonly byConnection = new Map<Connection, Client>();
  private readonly byQp = new Map<string, Client>();
  private readonly freeRings: number[] = [];
  private nextId = 1;
  private readonly serverIds = new Set<number>();

  constructor(
    maxClients: number,
    /** Told of every client added and removed (the notice drain, notices.ts). */
    private readonly watcher?: { attach(client: Client): void; detach(client: Client): void },
  ) {
    for (let i = maxClients - 1; i >= 0; i--) this.freeRings.push(i);
  }

  get size(): number {
    return this.byConnection.size;
  }

  values(): IterableIterator<Client> {
    return this.byConnection.values();
  }

  /**
   * Ids that may still own a lock or land a write: every client in the table (an id is entered
   * when it is assigned), the `departing` ones, whose departure releases their locks, and the
   * server's own (serverId: it may hold a bucket lock across loopback tasks, as repair's copier does).
   */
  liveIds(departing: ReadonlySet<number>): Set<number> {
    const live = new Set<number>(departing);
    for (const id of this.serverIds) live.add(id);
    for (const client of this.byConnection.values()) live.add(client.id);
    return live;
  }

  connections(): IterableIterator<Connection> {
    return this.byConnection.keys();
  }

  /** Still connected (not departed)? */
  has(client: Client): boolean {
    return this.byConnection.has(client.connection);
  }

  /** The client on queue pair `qpNum` of `fabric`. */
  onQp(fabric: Fabric, qpNum: number): Client | undefined {
    return this.byQp.get(`${fabric.provider.scheme}:${qpNum}`);
  }

  /**
   * A free client ring for a client on `fabric`, or undefined when --max-clients are connected (or
   * still departing), or as many as `fabric`'s CQ can serve (Fabric.admits) are there.
   */
  takeRing(fabric: Fabric): number | undefined {
    if (fabric.holding >= fabric.admits) return undefined;
    const ring = this.freeRings.pop();
    if (ring !== undefined) fabric.holding++;
    return ring;
  }

  returnRing(ring: number, fabric: Fabric): void {
    this.freeRings.push(ring);
    fabric.holding--;
  }

  /** Ids are never reused: a lock owner seen in a word is that client or a departed one. */
  newId(): number {
    return this.nextId++;
  }

  /** An id the server itself takes locks as (removals, repair): live for as long as the server runs. */
  serverId(): number {
    const id = this.newId();
    this.serverIds.add(id);
    return id;
  }

  add(client: Client): void {
    this.byConnection.set(client.connection, client);
    this.byQp.set(`${client.fabric.provider.scheme}:${client.connection.qpNum}`, client);
    this.watcher?.attach(client);
  }

  /** False if it was already removed. */
  remove(client: Client): boolean {
    if (!this.byConnection.delete(client.connection)) return false;
    this.watcher?.detach(client);
    this.byQp.delete(`${client.fabric.provider.scheme}:${client.connection.qpNum}`);
    return true;
  }
}
