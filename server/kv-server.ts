// kv-server's core: registers the region, accepts and authenticates clients,
// sends each the hello, grants heap blocks, and drains the notifications
// clients leave after every PUT and DELETE (freeing superseded blocks after
// the grace period). GETs never reach this code: clients read the region with
// RDMA READ.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { mkdirSync, realpathSync, statSync } from 'node:fs';
import { dirname, parse, sep } from 'node:path';

import type { Logger } from 'pino';

import {
  Access,
  type CompletionQueue,
  type Connection,
  type ConnectionRequest,
  type Listener,
  type MemoryRegion,
  Memory,
  Opcode,
  Provider,
  SendFlag,
  TransportError,
  access,
  hashKey,
  readCompletion,
} from '../native/index.js';
import { ItemHeader, ItemType, KvLayout, Record as RecordField, RecordKind } from '../protocol/constants.js';
import { type ControlMessage, GRANT_BATCH, decode, encode, grantBatch } from '../protocol/control.js';
import { RejectReason, loopbackData, parseConnectData, tokenDigest } from '../protocol/connect.js';
import { itemUnits } from '../protocol/size-classes.js';
import { Heap } from './store/heap.js';
import {
  type RegionLayout,
  LayoutError,
  compareLayout,
  planLayout,
  readNextSession,
  readSuperblock,
  writeNextSession,
  writeSuperblock,
} from './store/layout.js';

/** Buckets the orphan-lock scan reads per keepalive interval (a 1 GiB region's index in 16). */
const ORPHAN_SCAN_BUCKETS = 65536;
/** Locks one orphan scan releases at most (the rest wait for the next scan). */
const ORPHAN_RELEASE_BURST = 256;

export interface KvServerOptions {
  /** URLs to listen on: shm:///path/to.sock, rdma://host:port. */
  listen: string[];
  /** Region size in bytes (index + heap + rings). */
  memoryBytes: number;
  /** Clients must present this token; none: no authentication. */
  token?: string;
  /** Bucket count (a power of two). @default about memoryBytes / 1024 */
  buckets?: number;
  /** @default 1 MiB */
  maxValueBytes?: number;
  /** How long a freed block stays unused. @default 1000 */
  graceMs?: number;
  /** @default 256 */
  maxClients?: number;
  /** Clients ping this often; one silent for 3 intervals is fenced and its locks released. @default 1000 */
  keepaliveMs?: number;
  /**
   * Keep the region in this file (a shared mapping): a server restarted on it
   * after a crash or SIGKILL releases every lock, rebuilds its heap from
   * the live slots and serves the same data.
   */
  regionFile?: string;
  logger?: Logger;
  /** Tests only: recovery of a region file first waits for this (a deterministic slow recovery). */
  beforeRecovery?: () => Promise<void>;
}

export interface KvServerStats {
  regionBytes: number;
  indexBytes: number;
  heapBytes: number;
  heapUsedBytes: number;
  heapUsedBytesByClass: Record<string, number>;
  items: number;
  slots: number;
  clients: number;
  grants: number;
  blocksGranted: number;
  notifications: number;
  blocksFreed: number;
  /** blocks departed clients were granted and never published, taken back */
  blocksReclaimed: number;
  rejectedConnections: number;
  keepaliveFailures: number;
  fencedClients: number;
  lockRecoveries: number;
  /** slots a restart on a region file could not trust: skipped and cleared (see recover()) */
  recoveredSlotsSkipped: number;
  /** locks whose owner was no live client, released by the orphan-lock scan (see releaseOrphanLocks()) */
  orphanLocksReleased: number;
  controlMessages: number;
  rdmaErrors: Record<string, number>;
}

/** Bad configuration: one clear line for the operator. */
export class KvConfigError extends Error {
  override name = 'KvConfigError';
}

const RECVS_PER_CLIENT = KvLayout.RING_RECORDS + 32; // every notification and a few control messages
const SEND_SLOTS = 16;

interface Client {
  id: number;
  /** the high bits of every version it writes (see KvLayout.SESSION_VERSION_BITS) */
  session: bigint;
  ring: number;
  connection: Connection;
  recvBase: number; // first receive buffer (wr_id base)
  sends: number; // next send slot
  lastSeen: number;
  rejectedOnce: Set<string>;
  /** block -> class: granted to this client and not yet published (by a notice) or returned */
  held: Map<number, number>;
}

/** Everything the server keeps per provider (scheme). */
interface Fabric {
  provider: Provider;
  cq: CompletionQueue;
  region: MemoryRegion; // the region, registered with this provider (its own rkey)
  recv: MemoryRegion;
  send: MemoryRegion;
  /** The server's connection to itself: lock recovery goes through it, as RDMA atomics. */
  loopback?: { connection: Connection; cq: CompletionQueue; scratch: MemoryRegion };
}

/**
 * Makes the directory of an shm:// socket path, one level at a time. Node's recursive mkdir
 * loops forever where mkdir answers ENOENT under an existing parent (/proc), so it is not used;
 * kernel pseudo file systems are refused by name. Every failure is a KvConfigError of one line.
 */
function makeSocketDirectory(url: string): void {
  const dir = dirname(url.slice('shm://'.length));
  const fail = (why: string) => new KvConfigError(`cannot listen on ${url}: ${why}`);
  let at = parse(dir).root;
  for (const part of dir.slice(at.length).split(sep).filter((p) => p !== '')) {
    at = at.endsWith(sep) ? at + part : at + sep + part;
    let stats;
    try {
      stats = statSync(at, { throwIfNoEntry: false });
    } catch (error) {
      throw fail(`${at}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    if (stats) {
      if (!stats.isDirectory()) throw fail(`${at} is not a directory`);
      const real = realpathSync(at);
      if (/^\/(proc|sys)(\/|$)/.test(real)) throw fail(`${real} is a kernel file system (/proc, /sys): choose a socket path elsewhere, e.g. /run/rdma-kv/kv.sock`);
      continue;
    }
    try {
      mkdirSync(at);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw fail(`cannot create the directory ${at} (${code === 'EACCES' || code === 'EPERM' ? 'permission denied' : (code ?? (error as Error).message)})`);
    }
  }
}

export class KvServer extends EventEmitter {
  readonly urls: string[] = [];
  readonly layout: RegionLayout;
  private readonly providers = new Map<string, Fabric>();
  private readonly listening: Listener[] = [];
  private readonly memory: Memory;
  private readonly heap: Heap;
  private readonly clients = new Map<Connection, Client>();
  private readonly byQp = new Map<string, Client>();
  private readonly freeRings: number[] = [];
  private readonly tokenHash: Buffer | undefined;
  private readonly log: Logger | undefined;
  private readonly graceMs: number;
  private nextClientId = 1;
  /** Sessions are numbered for the region's life (persisted in the superblock), so versions never repeat. */
  private nextSession = 1n;
  private reclaimTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly counters = {
    items: 0, grants: 0, blocksGranted: 0, notifications: 0, blocksFreed: 0, blocksReclaimed: 0, rejectedConnections: 0,
    keepaliveFailures: 0, fencedClients: 0, lockRecoveries: 0, recoveredSlotsSkipped: 0, orphanLocksReleased: 0, controlMessages: 0,
  };
  private readonly rdmaErrors = new Map<string, number>();
  private readonly seed: bigint;
  private readonly keepaliveMs: number;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private readonly loopbackSecret = randomBytes(32);
  private readonly loopbacks = new Set<Connection>();
  private recovery: Promise<void> = Promise.resolve();
  /** departed clients' blocks being taken back, one client at a time (after its locks are released) */
  private reclaiming: Promise<void> = Promise.resolve();
  /** Heap offsets (units) of lock items, learned from creations, for releasing a dead holder's locks. */
  private readonly lockItems = new Set<number>();
  /** true from construction on an existing region file until recover() has finished */
  private recovering = false;
  /** departed clients whose fence is not complete yet (see forget) */
  private readonly fencing = new Set<Promise<void>>();
  /** ids of departed clients whose locks forget() has not released yet (fence pending included): not orphans */
  private readonly departing = new Set<number>();
  /** the next bucket the orphan-lock scan looks at (it covers the index in bounded windows) */
  private orphanScanCursor = 0;
  private orphanScanQueued = false;
  /** connection requests that arrived while recovering, answered when it ends */
  private readonly heldRequests: Array<{ entry: Fabric; privateData: Buffer; request: ConnectionRequest }> = [];
  /** Grants the heap could not serve: waiting for clients to give back unused blocks (see grantBlocks). */
  private readonly waitingGrants: Array<{ entry: Fabric; client: Client; c: number; n: number; until: number }> = [];
  /** Clients sent a reclaim whose answer (a return marked end) has not come, and when. */
  private readonly reclaimAsked = new Map<Client, number>();

  private constructor(private readonly options: KvServerOptions) {
    super();
    this.log = options.logger;
    this.graceMs = options.graceMs ?? 1000;
    this.keepaliveMs = options.keepaliveMs ?? 1000;
    const maxClients = options.maxClients ?? 256;
    const maxValueBytes = options.maxValueBytes ?? KvLayout.DEFAULT_MAX_VALUE_BYTES;
    if (options.listen.length === 0) throw new KvConfigError('nothing to listen on: give at least one --listen URL');
    if (!(this.graceMs >= 0)) throw new KvConfigError('--grace-ms must be >= 0');
    if (!(this.keepaliveMs >= 10)) throw new KvConfigError('--keepalive-ms must be >= 10');
    if (!Number.isInteger(maxClients) || maxClients < 1 || maxClients > 65536) throw new KvConfigError('--max-clients must be between 1 and 65536');
    try {
      this.layout = planLayout({ regionBytes: options.memoryBytes, buckets: options.buckets, maxClients, maxValueBytes });
    } catch (error) {
      if (error instanceof LayoutError) throw new KvConfigError(error.message);
      throw error;
    }
    try {
      this.memory = options.regionFile === undefined ? new Memory(this.layout.regionBytes) : new Memory(this.layout.regionBytes, options.regionFile);
    } catch (error) {
      throw new KvConfigError(`region: ${(error as Error).message}`);
    }
    this.heap = new Heap(this.layout.heapBytes / KvLayout.UNIT_BYTES, this.layout.classes, this.graceMs);
    if (this.memory.existed) {
      const found = readSuperblock(this.memory.bytes);
      const mismatch = compareLayout(found, this.layout);
      if (mismatch) throw new KvConfigError(`${options.regionFile} was created with ${mismatch}: start with the options it was created with`);
      this.seed = found.seed;
      this.recovering = true;
      this.nextSession = readNextSession(this.memory.bytes) || 1n; // 0: a v1 region file, see recover()
    } else {
      this.seed = randomBytes(8).readBigUInt64LE();
    }
    writeSuperblock(this.memory.bytes, this.layout, this.seed, BigInt(Date.now()));
    for (let i = maxClients - 1; i >= 0; i--) this.freeRings.push(i);
    if (options.token !== undefined) this.tokenHash = tokenDigest(options.token);
  }

  /** Starts serving; resolves when every URL listens. Throws KvConfigError for bad options. */
  static async start(options: KvServerOptions): Promise<KvServer> {
    const server = new KvServer(options);
    try {
      for (const url of options.listen) server.listenOn(url);
      await server.openLoopbacks();
      if (server.recovering) await server.recover();
      server.serveHeldRequests();
    } catch (error) {
      server.shutdownNow();
      throw error;
    }
    server.reclaimTimer = setInterval(() => server.reclaim(), Math.max(10, Math.min(100, server.graceMs / 4)));
    server.reclaimTimer.unref();
    server.keepaliveTimer = setInterval(() => server.sweep(), server.keepaliveMs);
    server.keepaliveTimer.unref();
    return server;
  }

  private listenOn(url: string): void {
    const scheme = url.slice(0, url.indexOf('://'));
    if (scheme !== 'shm' && scheme !== 'rdma') throw new KvConfigError(`no provider for '${url}': use shm:///path/to.sock or rdma://host:port`);
    let entry = this.providers.get(scheme);
    if (!entry) {
      let provider: Provider;
      try {
        provider = new Provider(scheme);
      } catch (error) {
        throw new KvConfigError(`cannot serve ${url}: ${(error as Error).message}`);
      }
      const region = provider.register(this.memory, 0, this.memory.length, access.REMOTE_ALL);
      const cq = provider.createCq(8192);
      const recv = provider.allocate(this.layout.maxClients * RECVS_PER_CLIENT * KvLayout.SERVER_RECV_BYTES, Access.LOCAL_WRITE);
      const send = provider.allocate(this.layout.maxClients * SEND_SLOTS * KvLayout.CONTROL_RECV_BYTES, Access.LOCAL_WRITE);
      entry = { provider, cq, region, recv, send };
      this.providers.set(scheme, entry);
      provider.on('connectRequest', (request) => this.onConnectRequest(entry!, request.privateData, request));
      cq.watch(() => this.drain(entry!));
      cq.arm();
    }
    if (scheme === 'shm') makeSocketDirectory(url);
    let listener: Listener;
    try {
      listener = entry.provider.listen(url);
    } catch (error) {
      throw new KvConfigError(`cannot listen on ${url}: ${(error as TransportError).message}`);
    }
    this.listening.push(listener);
    this.urls.push(listener.url);
    this.log?.info({ url: listener.url, regionBytes: this.layout.regionBytes, buckets: this.layout.bucketCount }, 'listening');
  }

  /** Each provider's connection to this server itself (to its first listener of that scheme). */
  private async openLoopbacks(): Promise<void> {
    for (const [scheme, fabric] of this.providers) {
      const url = this.urls.find((u) => u.startsWith(`${scheme}://`))!;
      const cq = fabric.provider.createCq(512);
      const scratch = fabric.provider.allocate(256 * 8, Access.LOCAL_WRITE);
      try {
        const connection = await fabric.provider.connect(url.replace('://0.0.0.0:', '://127.0.0.1:'), {
          cq,
          privateData: loopbackData(this.loopbackSecret),
          timeoutMs: 5000,
        });
        fabric.loopback = { connection, cq, scratch };
      } catch (error) {
        // Without it, a dead client's bucket locks stay taken: say so loudly.
        this.log?.error({ url, err: (error as Error).message }, 'no loopback connection: locks of dead clients cannot be released');
      }
    }
  }

  private onConnectRequest(entry: Fabric, privateData: Buffer, request: ConnectionRequest): void {
    const { version, digest, loopback } = parseConnectData(privateData);
    if (loopback && timingSafeEqual(loopback, this.loopbackSecret)) {
      this.loopbacks.add(request.accept({ cq: entry.cq }));
      return;
    }
    if (this.recovering && !this.closed) return this.holdUntilRecovered(entry, privateData, request);
    const reject = (reason: number, why: string) => {
      this.counters.rejectedConnections++;
      this.log?.warn({ peer: request.peerAddress, why }, 'connection rejected');
      request.reject(Buffer.from([reason]));
    };
    if (this.closed) return reject(RejectReason.FULL, 'shutting down');
    if (version !== KvLayout.PROTOCOL_VERSION) {
      // The second byte names ours, so the client can say which side to upgrade.
      this.counters.rejectedConnections++;
      this.log?.warn({ peer: request.peerAddress, why: `protocol version ${version}, this server ${KvLayout.PROTOCOL_VERSION}` }, 'connection rejected');
      return request.reject(Buffer.from([RejectReason.VERSION, KvLayout.PROTOCOL_VERSION]));
    }
    if (this.tokenHash && (!digest || !timingSafeEqual(digest, this.tokenHash))) return reject(RejectReason.AUTH, 'wrong token');
    if (this.nextSession >= BigInt(KvLayout.MAX_SESSIONS)) {
      return reject(RejectReason.FULL, `the region's ${KvLayout.MAX_SESSIONS} sessions are used up: versions would repeat; copy the data into a new region`);
    }
    const ring = this.freeRings.pop();
    if (ring === undefined) return reject(RejectReason.FULL, `all ${this.layout.maxClients} client slots in use`);
    const id = this.nextClientId++;
    // Persisted before the hello hands it out: a restart never hands it out again.
    const session = this.nextSession++;
    writeNextSession(this.memory.bytes, this.nextSession);
    // The ring starts empty: its consumed counter is where the client's sequence starts.
    const ringStart = this.layout.ringOffset + ring * this.layout.ringBytes;
    this.memory.bytes.fill(0, ringStart, ringStart + this.layout.ringBytes);
    const recvBase = ring * RECVS_PER_CLIENT;
    const recvs = Array.from({ length: Math.min(RECVS_PER_CLIENT, 256) }, (_, i) => this.recvRequest(entry, recvBase + i));
    let connection: Connection;
    try {
      connection = request.accept({ cq: entry.cq, initialRecvs: recvs, recvDepth: RECVS_PER_CLIENT + 16, sendDepth: 256 });
    } catch (error) {
      this.freeRings.push(ring);
      this.log?.error({ err: error }, 'accept failed');
      return;
    }
    const client: Client = { id, session, ring, connection, recvBase, sends: 0, lastSeen: performance.now(), rejectedOnce: new Set(), held: new Map() };
    this.clients.set(connection, client);
    this.byQp.set(`${entry.provider.scheme}:${connection.qpNum}`, client);
    connection.once('established', () => {
      const rest = Array.from({ length: RECVS_PER_CLIENT - recvs.length }, (_, i) => this.recvRequest(entry, recvBase + recvs.length + i));
      if (rest.length > 0) connection.postRecv(rest);
      this.send(entry, client, {
        t: 'hello',
        v: KvLayout.PROTOCOL_VERSION,
        clientId: id,
        versionBase: session << BigInt(KvLayout.SESSION_VERSION_BITS),
        region: { addr: entry.region.addr, rkey: entry.region.rkey, length: BigInt(this.layout.regionBytes) },
        layout: {
          bucketCount: this.layout.bucketCount,
          indexOffset: BigInt(this.layout.indexOffset),
          heapOffset: BigInt(this.layout.heapOffset),
          heapBytes: BigInt(this.layout.heapBytes),
          seed: this.seed,
          ringOffset: BigInt(ringStart),
          classes: this.layout.classes,
          maxKeyBytes: KvLayout.MAX_KEY_BYTES,
          maxValueBytes: this.layout.maxValueBytes,
        },
        graceMs: this.graceMs,
        keepaliveMs: this.keepaliveMs,
      });
      this.log?.info({ clientId: id, peer: connection.peerAddress }, 'client connected');
      this.emit('clientConnected', id);
    });
    connection.once('disconnected', (reason) => this.forget(entry, client, reason));
  }

  /**
   * A client that connects while a region file is being recovered waits: recovery releases
   * every lock it finds held and rebuilds the heap, so serving it now could release its locks
   * or grant it live blocks. Its request is answered, in arrival order, once recovery ends
   * (serveHeldRequests); a client that gives up first sees its own connect timeout.
   */
  private holdUntilRecovered(entry: Fabric, privateData: Buffer, request: ConnectionRequest): void {
    this.heldRequests.push({ entry, privateData, request });
    if (this.heldRequests.length === 1) this.log?.info({ peer: request.peerAddress }, 'connection requests held until recovery finishes');
  }

  /** Answers the requests held during recovery (or rejects them if the server is closing). */
  private serveHeldRequests(): void {
    for (const { entry, privateData, request } of this.heldRequests.splice(0)) this.onConnectRequest(entry, privateData, request);
  }

  private recvRequest(entry: Fabric, index: number) {
    return { wrId: index, local: entry.recv, localOffset: index * KvLayout.SERVER_RECV_BYTES, length: KvLayout.SERVER_RECV_BYTES };
  }

  private send(entry: Fabric, client: Client, message: ControlMessage): void {
    const bytes = encode(message);
    if (bytes.length > KvLayout.CONTROL_RECV_BYTES) throw new Error(`control message of ${bytes.length} bytes is too large`);
    const slot = client.ring * SEND_SLOTS + (client.sends++ % SEND_SLOTS);
    const offset = slot * KvLayout.CONTROL_RECV_BYTES;
    bytes.copy(entry.send.bytes, offset);
    // Signaled so that the send queue drains; the completion is ignored.
    client.connection.postSend([{ wrId: 0, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: entry.send, localOffset: offset, length: bytes.length }]);
  }

  /** One pass over the CQ (event mode): everything that arrived, in batches. */
  private drain(entry: Fabric): void {
    for (let round = 0; round < 2; round++) {
      for (;;) {
        const n = entry.cq.pollRaw();
        if (n === 0) break;
        for (let i = 0; i < n; i++) this.onCompletion(entry, readCompletion(entry.cq.completions, i));
      }
      if (round === 0) entry.cq.arm(); // then drain once more: completions that raced with arm() bring no event
    }
  }

  private onCompletion(entry: Fabric, wc: ReturnType<typeof readCompletion>): void {
    const client = this.byQp.get(`${entry.provider.scheme}:${wc.qpNum}`);
    if (client) client.lastSeen = performance.now();
    if (wc.statusName !== 'SUCCESS') {
      if (wc.statusName !== 'WR_FLUSH_ERR') {
        this.rdmaErrors.set(wc.statusName, (this.rdmaErrors.get(wc.statusName) ?? 0) + 1);
        this.log?.warn({ clientId: client?.id, status: wc.statusName }, 'error completion');
      }
      return;
    }
    if (!client) return;
    if (wc.opcode === Opcode.RECV_RDMA_WITH_IMM) {
      this.onNotification(client, wc.imm);
    } else if (wc.opcode === Opcode.RECV) {
      const offset = (wc.wrId) * KvLayout.SERVER_RECV_BYTES;
      this.onControl(entry, client, entry.recv.bytes.subarray(offset, offset + wc.byteLen));
    } else {
      return; // our SENDs
    }
    client.connection.postRecv([this.recvRequest(entry, wc.wrId)]);
  }

  /** A client finished a PUT or DELETE: account for it and retire what it replaced. */
  private onNotification(client: Client, seq: number): void {
    this.counters.notifications++;
    const ringStart = this.layout.ringOffset + client.ring * this.layout.ringBytes;
    const at = ringStart + KvLayout.RING_HEADER_BYTES + (seq % KvLayout.RING_RECORDS) * KvLayout.RECORD_BYTES;
    const region = this.memory.bytes;
    const kind = Number(region.readBigUInt64LE(at + RecordField.KIND));
    const newSlot = region.readBigUInt64LE(at + RecordField.NEW_SLOT);
    const oldSlot = region.readBigUInt64LE(at + RecordField.OLD_SLOT);
    // The client wrote this record: nothing in it is trusted.
    if ((kind !== RecordKind.PUT && kind !== RecordKind.DELETE) || !this.slotInHeap(newSlot) || !this.slotInHeap(oldSlot)) {
      this.rejectMessage(client, 'notification', `malformed notification record ${seq}`);
      region.writeBigUInt64LE(BigInt(seq) + 1n, ringStart);
      return;
    }
    if (oldSlot !== 0n) {
      if (!this.retireSlot(oldSlot)) this.rejectMessage(client, 'retire', `notification ${seq} retires a block that is not in use`);
      this.lockItems.delete(Number(oldSlot & 0xffffffffn));
    } else if (kind === RecordKind.PUT && newSlot !== 0n) {
      this.counters.items++;
    }
    if (newSlot !== 0n) {
      const block = Number(newSlot & 0xffffffffn);
      client.held.delete(block); // published: the index owns it now
      const at = this.itemAt(block);
      if (at + KvLayout.ITEM_HEADER_BYTES <= this.layout.regionBytes && region.readUInt16LE(at + ItemHeader.TYPE) === ItemType.LOCK) {
        this.lockItems.add(block);
      }
    }
    if (kind === RecordKind.DELETE) this.counters.items--;
    // The client reads this counter (RDMA READ) when its ring looks full.
    region.writeBigUInt64LE(BigInt(seq) + 1n, ringStart);
  }

  private retireSlot(slot: bigint): boolean {
    const units = Number((slot >> 32n) & 0xffffn);
    const block = Number(slot & 0xffffffffn);
    return this.heap.retire(this.heap.classOfUnits(units), block);
  }

  /** Region offset of the item in heap block `block` (in units). */
  private itemAt(block: number): number {
    return this.layout.heapOffset + block * KvLayout.UNIT_BYTES;
  }

  /** 0, or a slot whose item lies inside the heap. */
  private slotInHeap(slot: bigint): boolean {
    if (slot === 0n) return true;
    const units = Number((slot >> 32n) & 0xffffn);
    const block = Number(slot & 0xffffffffn);
    return units > 0 && (block + units) * KvLayout.UNIT_BYTES <= this.layout.heapBytes;
  }

  private onControl(entry: Fabric, client: Client, bytes: Buffer): void {
    this.counters.controlMessages++;
    let message: ControlMessage;
    try {
      message = decode(bytes);
    } catch (error) {
      return this.rejectMessage(client, 'malformed', `${(error as Error).message}`);
    }
    switch (message.t) {
      case 'ping':
        return this.send(entry, client, { t: 'pong' });
      case 'grant': {
        const { c, n } = message;
        if (!Number.isInteger(c) || c < 0 || c >= this.layout.classes.length || !Number.isInteger(n) || n < 1 || n > GRANT_BATCH) {
          this.rejectMessage(client, 'grant', `bad grant request ${JSON.stringify({ c, n })}`);
          return this.send(entry, client, { t: 'granted', c: Number.isInteger(c) ? c : -1, blocks: [], error: 'KV_OUT_OF_MEMORY' });
        }
        // Sized by bytes (an older client asks for GRANT_BATCH of any class).
        return this.grantBlocks(entry, client, c, Math.min(n, grantBatch(this.layout.classes[c]! * KvLayout.UNIT_BYTES, this.layout.heapBytes)));
      }
      case 'return': {
        const { c, blocks, end } = message;
        if (!Number.isInteger(c) || c < 0 || c >= this.layout.classes.length || !Array.isArray(blocks)) {
          return this.rejectMessage(client, 'return', 'bad return message');
        }
        for (const block of blocks) {
          if (client.held.get(block) !== c || !this.heap.giveBack(c, block)) {
            this.rejectMessage(client, 'return', 'returned a block that was not granted to it');
            continue;
          }
          client.held.delete(block);
        }
        if (end === true) this.reclaimAsked.delete(client);
        return this.serveWaitingGrants();
      }
      default:
        return this.rejectMessage(client, 'unexpected', `unexpected message '${String((message as { t: unknown }).t)}'`);
    }
  }

  /**
   * Answers a grant with what the heap has. With nothing that fits, the clients holding
   * granted blocks are asked to give back those they do not use (the one asking too: it may
   * hold other classes' blocks), and the grant waits for their answers — at most two
   * keepalive intervals, within which every live client polls — before KV_OUT_OF_MEMORY.
   */
  private grantBlocks(entry: Fabric, client: Client, c: number, n: number): void {
    const blocks = this.heap.grant(c, n);
    if (blocks.length === 0 && this.askForUnusedBlocks()) {
      this.waitingGrants.push({ entry, client, c, n, until: performance.now() + 2 * this.keepaliveMs });
      return;
    }
    this.answerGrant(entry, client, c, blocks);
  }

  private answerGrant(entry: Fabric, client: Client, c: number, blocks: number[]): void {
    for (const block of blocks) client.held.set(block, c);
    this.counters.grants++;
    this.counters.blocksGranted += blocks.length;
    this.send(entry, client, blocks.length > 0 ? { t: 'granted', c, blocks } : { t: 'granted', c, blocks, error: 'KV_OUT_OF_MEMORY' });
  }

  /**
   * Sends a reclaim to every client that holds granted blocks and has no ask outstanding;
   * true while some answer is outstanding. An ask unanswered for two keepalive intervals
   * (a client that ignores reclaims) no longer counts.
   */
  private askForUnusedBlocks(): boolean {
    const now = performance.now();
    this.dropStaleAsks(now);
    for (const client of this.clients.values()) {
      if (client.held.size === 0 || this.reclaimAsked.has(client)) continue;
      const fabric = this.fabricOf(client);
      if (!fabric) continue;
      try {
        this.send(fabric, client, { t: 'reclaim' });
        this.reclaimAsked.set(client, now);
      } catch (error) {
        this.log?.warn({ clientId: client.id, err: (error as Error).message }, 'cannot send a reclaim');
      }
    }
    return this.reclaimAsked.size > 0;
  }

  /** Waiting grants, first come first served: answered once the heap has blocks, every asked client answered, or their time is up. */
  private serveWaitingGrants(): void {
    if (this.waitingGrants.length === 0) return;
    const now = performance.now();
    this.dropStaleAsks(now);
    const outstanding = this.reclaimAsked.size > 0;
    const waiting = this.waitingGrants.splice(0);
    for (const wait of waiting) {
      if (!this.clients.has(wait.client.connection)) continue; // departed
      const blocks = this.heap.grant(wait.c, wait.n);
      if (blocks.length === 0 && outstanding && now < wait.until) {
        this.waitingGrants.push(wait);
        continue;
      }
      try {
        this.answerGrant(wait.entry, wait.client, wait.c, blocks);
      } catch (error) {
        // Its connection broke while it waited (its departure takes the blocks back).
        this.log?.warn({ clientId: wait.client.id, err: (error as Error).message }, 'cannot answer a grant');
      }
    }
  }

  /** Forgets the asks of departed clients and those unanswered for two keepalive intervals. */
  private dropStaleAsks(now: number): void {
    for (const [asked, at] of this.reclaimAsked) {
      if (!this.clients.has(asked.connection) || now - at > 2 * this.keepaliveMs) this.reclaimAsked.delete(asked);
    }
  }

  /** The fabric a client is connected through. */
  private fabricOf(client: Client): Fabric | undefined {
    for (const [scheme, fabric] of this.providers) {
      if (this.byQp.get(`${scheme}:${client.connection.qpNum}`) === client) return fabric;
    }
    return undefined;
  }

  /** Logs a bad control message once per connection and kind; the connection keeps serving. */
  private rejectMessage(client: Client, kind: string, why: string): void {
    if (client.rejectedOnce.has(kind)) return;
    client.rejectedOnce.add(kind);
    this.log?.warn({ clientId: client.id, why }, 'control message rejected');
  }

  /**
   * A client is gone (it closed, died, or broke). Fence it first — its queue
   * pair moves to the error state, and once `fenced()` resolves nothing it
   * still sends can land (on shm that waits for a client paused inside a post)
   * — then release every bucket lock it holds, through our own loopback queue
   * pair: lock words are changed only by RDMA atomics, never by this CPU.
   */
  private forget(entry: Fabric, client: Client, reason: string): void {
    if (!this.clients.has(client.connection)) return;
    // Its last notices may still wait in the CQ: account for them while we still know it.
    this.drain(entry);
    if (!this.clients.delete(client.connection)) return;
    client.connection.disconnect();
    this.counters.fencedClients++;
    this.byQp.delete(`${entry.provider.scheme}:${client.connection.qpNum}`);
    this.log?.info({ clientId: client.id, reason }, 'client disconnected');
    this.departing.add(client.id);
    // Its locks and blocks are touched only once the fence is complete; a client paused
    // inside a post keeps them (and only them) until that post ends or the process exits.
    const fenced = client.connection
      .fenced({
        onWait: () => this.log?.warn({ clientId: client.id }, 'fenced client is paused inside a post: its locks and blocks wait until it resumes or exits'),
        stopWaiting: () => this.closed,
      })
      .then((complete) => (complete ? this.recoverDeparted(entry, client) : undefined));
    this.fencing.add(fenced);
    void fenced.finally(() => this.fencing.delete(fenced));
  }

  /** After the fence: its locks, then its blocks; the ring is reused only once the locks are released. */
  private recoverDeparted(entry: Fabric, client: Client): void {
    // Chained: one recovery at a time (the loopback queue pair serves one at a time).
    this.recovery = this.recovery
      .then(async () => {
        await this.releaseLocks(entry, client.id);
        // Its blocks next, on their own chain: a check that waits for busy buckets must not
        // delay the next departed client's locks.
        this.reclaiming = this.reclaiming
          .then(() => this.reclaimHeld(client))
          .catch((error: Error) => this.log?.error({ clientId: client.id, err: error.message }, 'taking back blocks failed'));
      })
      .catch((error: Error) => this.log?.error({ clientId: client.id, err: error.message }, 'lock recovery failed'))
      .finally(() => {
        this.departing.delete(client.id);
        this.freeRings.push(client.ring);
        this.emit('clientDisconnected', client.id);
      });
  }

  /**
   * A departed client's granted blocks go back to the heap (through the grace period), except
   * one it published and died before announcing: it wrote its slot but not its notice. Such an
   * item was written before its slot and is read-only since, so it names its key, and a
   * published item sits in one of its key's two buckets (displacement moves entries only
   * between those). A block is kept if either bucket points to it in a consistent read. Runs
   * after the client's locks are released, so only live clients' short critical sections are
   * waited for.
   */
  private async reclaimHeld(client: Client): Promise<void> {
    let reclaimed = 0;
    const published: number[] = [];
    const region = this.memory.bytes;
    for (const [block, cls] of client.held) {
      if (this.closed) return;
      // Only an item this client wrote can have been published by it: its version carries the
      // writer's session. Blocks it never wrote to need no look at the index.
      const version = region.readBigUInt64LE(this.itemAt(block) + ItemHeader.VERSION);
      const wroteIt = version >> BigInt(KvLayout.SESSION_VERSION_BITS) === client.session;
      if (wroteIt && (await this.isPublished(block))) published.push(block);
      else if (this.heap.retire(cls, block)) reclaimed++;
    }
    client.held.clear();
    this.counters.blocksReclaimed += reclaimed;
    if (reclaimed > 0) this.log?.info({ clientId: client.id, blocks: reclaimed }, 'took back the unpublished blocks of a departed client');
    if (published.length > 0) {
      // its notice is lost: the item it replaced, if any, stays allocated until a restart
      this.log?.warn({ clientId: client.id, blocks: published }, 'a departed client published items without notices');
    }
  }

  /**
   * A region file written before sessions were persisted (no next-session word) continues
   * above the highest session among its trusted items' versions, so no version repeats.
   */
  private continueSessions(live: Map<number, number>): void {
    if (readNextSession(this.memory.bytes) !== 0n) return;
    const region = this.memory.bytes;
    for (const block of live.keys()) {
      const session = region.readBigUInt64LE(this.itemAt(block) + ItemHeader.VERSION) >> BigInt(KvLayout.SESSION_VERSION_BITS);
      if (session >= this.nextSession) this.nextSession = session + 1n;
    }
    writeNextSession(region, this.nextSession);
  }

  /** Does a slot in the buckets of the key stored at `block` point to it? (See reclaimHeld.) */
  private async isPublished(block: number): Promise<boolean> {
    const region = this.memory.bytes;
    const at = this.itemAt(block);
    const keyAt = at + KvLayout.ITEM_HEADER_BYTES;
    const keyLength = region.readUInt16LE(at + ItemHeader.KEY_LEN);
    if (keyLength > KvLayout.MAX_KEY_BYTES || keyAt + keyLength > this.layout.heapOffset + this.layout.heapBytes) return false; // no item
    const { b1, b2 } = hashKey(region.subarray(keyAt, keyAt + keyLength), this.seed, this.layout.bucketCount);
    // the index as 64-bit words: Atomics.load reads each whole, and the compiler may not reuse a read
    const words = new BigUint64Array(region.buffer, region.byteOffset + this.layout.indexOffset, this.layout.bucketCount * 8);
    const lockAt = (bucket: number) => bucket * 8; // word 0 of a bucket: version << 32 | owner
    const pointsHere = (bucket: number): boolean => {
      for (let i = 1; i <= KvLayout.SLOTS_PER_BUCKET; i++) {
        const slot = Atomics.load(words, bucket * 8 + i);
        if (slot !== 0n && Number(slot & 0xffffffffn) === block) return true;
      }
      return false;
    };
    const deadline = performance.now() + 10_000;
    for (;;) {
      if (this.closed) return true; // the region may be gone; nothing is freed any more anyway
      // Bursts of attempts: a hot bucket is free for microseconds at a time, shorter than a timer.
      for (let attempt = 0; attempt < 1000; attempt++) {
        const lock1 = Atomics.load(words, lockAt(b1));
        const lock2 = Atomics.load(words, lockAt(b2));
        if ((lock1 & 0xffffffffn) !== 0n || (lock2 & 0xffffffffn) !== 0n) continue;
        const found = pointsHere(b1) || pointsHere(b2);
        // unlocked and unchanged around the read: no PUT, DELETE or displacement in between
        if (Atomics.load(words, lockAt(b1)) === lock1 && Atomics.load(words, lockAt(b2)) === lock2) return found;
      }
      if (performance.now() > deadline) return true; // keeping a block is safe; freeing a live one is not
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /**
   * Restart on an existing region file: the heap's free extents are rebuilt from the slots it can
   * trust (see liveSlots), then every lock word and lock item still owned (by clients of the
   * previous run) is released through the loopback queue pair.
   */
  private async recover(): Promise<void> {
    await this.options.beforeRecovery?.();
    const region = this.memory.bytes;
    const live = this.liveSlots();
    this.continueSessions(live);
    for (const block of live.keys()) {
      if (region.readUInt16LE(this.itemAt(block) + ItemHeader.TYPE) === ItemType.LOCK) this.lockItems.add(block);
    }
    this.heap.rebuild([...live].map(([block, units]) => ({ block, units })));
    this.counters.items = live.size;
    const fabric = [...this.providers.values()][0]!;
    const released = await this.releaseLocks(fabric, 'any');
    this.log?.info({ items: live.size, locksReleased: released, slotsSkipped: this.counters.recoveredSlotsSkipped }, 'recovered the region file');
    this.recovering = false;
  }

  /**
   * The live blocks (block -> units) of a region file's index. A slot is trusted only when its
   * block lies inside the heap, its units are those of a possible item, its item's header fits
   * the slot exactly (units = the item's length, as clients write them), and the item's key
   * hashes to the slot's fingerprint and bucket. (The checksum's hash is not exported to
   * TypeScript: a damaged value is left for clients' checksum, KV_CORRUPT.) Of two trusted slots
   * whose blocks overlap, the lower block wins. Every other slot is skipped, counted, and
   * cleared: slots are written by RDMA WRITE, never touched by atomics, and no client is
   * served during recovery, so this CPU store races with nobody — and a slot left pointing
   * past the heap would fail every client READ of its bucket's key with a remote access error.
   */
  private liveSlots(): Map<number, number> {
    const region = this.memory.bytes;
    const candidates: Array<{ slotAt: number; block: number; units: number }> = [];
    const untrusted: number[] = []; // region offsets of slots
    const reasons: Record<string, number> = {};
    const skip = (slotAt: number, why: string) => {
      untrusted.push(slotAt);
      reasons[why] = (reasons[why] ?? 0) + 1;
    };
    for (let b = 0; b < this.layout.bucketCount; b++) {
      const bucket = this.layout.indexOffset + b * KvLayout.BUCKET_BYTES;
      for (let i = 1; i <= KvLayout.SLOTS_PER_BUCKET; i++) {
        const slotAt = bucket + 8 * i;
        const slot = region.readBigUInt64LE(slotAt);
        if (slot === 0n) continue;
        const why = this.untrustedSlot(slot, b);
        if (why) skip(slotAt, why);
        else candidates.push({ slotAt, block: Number(slot & 0xffffffffn), units: Number((slot >> 32n) & 0xffffn) });
      }
    }
    const live = new Map<number, number>();
    candidates.sort((x, y) => x.block - y.block);
    let end = 0; // first unit after the last accepted block
    let last = -1;
    for (const { slotAt, block, units } of candidates) {
      if (block === last) continue; // a moved entry may stand twice (same slot word: units follow from the item)
      if (block < end) {
        skip(slotAt, 'block overlaps another item');
        continue;
      }
      live.set(block, units);
      last = block;
      end = block + this.layout.classes[this.heap.classOfUnits(units)]!;
    }
    for (const slotAt of untrusted) region.writeBigUInt64LE(0n, slotAt);
    this.counters.recoveredSlotsSkipped += untrusted.length;
    if (untrusted.length > 0) this.log?.warn({ slots: untrusted.length, reasons }, 'recovery skipped slots it cannot trust');
    return live;
  }

  /** Why the slot `slot` of bucket `bucket` cannot be trusted; undefined if it can (see liveSlots). */
  private untrustedSlot(slot: bigint, bucket: number): string | undefined {
    const region = this.memory.bytes;
    const units = Number((slot >> 32n) & 0xffffn);
    const block = Number(slot & 0xffffffffn);
    const largest = this.layout.classes[this.layout.classes.length - 1]!;
    if (units === 0) return 'zero units';
    if (units > largest) return 'more units than the largest item';
    const blockUnits = this.layout.classes[this.heap.classOfUnits(units)]!;
    if ((block + blockUnits) * KvLayout.UNIT_BYTES > this.layout.heapBytes) return 'block past the heap';
    const at = this.itemAt(block);
    const type = region.readUInt16LE(at + ItemHeader.TYPE);
    const keyLength = region.readUInt16LE(at + ItemHeader.KEY_LEN);
    const valueLength = region.readUInt32LE(at + ItemHeader.VALUE_LEN);
    if (type !== ItemType.BYTES && type !== ItemType.COUNTER && type !== ItemType.LOCK) return 'no item type';
    if (keyLength > KvLayout.MAX_KEY_BYTES || valueLength > this.layout.maxValueBytes) return 'item lengths out of range';
    if (itemUnits(keyLength, valueLength) !== units) return 'item length does not match the slot';
    const keyAt = at + KvLayout.ITEM_HEADER_BYTES;
    const { b1, b2, fingerprint } = hashKey(region.subarray(keyAt, keyAt + keyLength), this.seed, this.layout.bucketCount);
    if (fingerprint !== Number(slot >> 48n) || (bucket !== b1 && bucket !== b2)) return 'item key does not hash to the slot';
    return undefined;
  }

  /** Lock words whose owner is `owner` ('any': all held): read with the CPU (reads are safe), released with RDMA atomics. */
  /**
   * A DELETE of a counter or lock item seals the item's word, then unlinks it, under the key's
   * bucket locks. A holder that died between the two left a sealed item linked, on which every
   * atomic would start over until its timeout. While the dead holder's locks are still held
   * (nobody else writes these buckets), finish its DELETE: clear the slot — a CPU store, safe
   * because no RDMA atomic ever changes a slot — and retire the block as its notice would have.
   */
  private finishSealedDeletes(buckets: number[]): void {
    const region = this.memory.bytes;
    const words = new BigUint64Array(region.buffer, region.byteOffset + this.layout.indexOffset, this.layout.bucketCount * 8);
    let finished = 0;
    for (const bucket of buckets) {
      for (let i = 1; i <= KvLayout.SLOTS_PER_BUCKET; i++) {
        const slot = Atomics.load(words, bucket * 8 + i);
        if (slot === 0n || !this.slotInHeap(slot)) continue;
        const block = Number(slot & 0xffffffffn);
        const type = region.readUInt16LE(this.itemAt(block) + ItemHeader.TYPE);
        const word = region.readBigUInt64LE(this.itemAt(block) + ItemHeader.ATOMIC_WORD);
        const seal = type === ItemType.COUNTER ? BigInt(KvLayout.COUNTER_SEAL) : type === ItemType.LOCK ? BigInt(KvLayout.LOCK_SEAL) : 0n;
        if (seal === 0n || (word & seal) === 0n) continue;
        Atomics.store(words, bucket * 8 + i, 0n);
        this.retireSlot(slot);
        this.lockItems.delete(block);
        this.counters.items--;
        finished++;
      }
    }
    if (finished > 0) this.log?.warn({ items: finished }, 'finished the deletes of a departed client');
  }

  private async releaseLocks(entry: Fabric, owner: number | 'any'): Promise<number> {
    const id = owner;
    const loop = entry.loopback;
    if (this.closed) return 0;
    if (!loop) {
      this.log?.error({ clientId: id }, 'cannot release the locks of a departed client: no loopback connection');
      return 0;
    }
    const words = new Uint32Array(this.memory.bytes.buffer, this.memory.bytes.byteOffset + this.layout.indexOffset, this.layout.bucketCount * 16);
    const held: number[] = [];
    for (let b = 0; b < this.layout.bucketCount; b++) {
      const holder = words[b * 16]!; // the low half of word 0: the owner
      if (holder !== 0 && (id === 'any' || holder === id)) held.push(b);
    }
    this.finishSealedDeletes(held);
    for (let i = 0; i < held.length; i += 256) {
      const batch = held.slice(i, i + 256);
      const holders = batch.map((bucket) => words[bucket * 16]!);
      loop.connection.postSend(
        batch.map((bucket, k) => ({
          wrId: k,
          opcode: Opcode.FETCH_AND_ADD,
          flags: k === batch.length - 1 ? SendFlag.SIGNALED : 0,
          local: loop.scratch,
          localOffset: k * 8,
          length: 8,
          remoteAddr: entry.region.addr + BigInt(this.layout.indexOffset + bucket * KvLayout.BUCKET_BYTES),
          rkey: entry.region.rkey,
          compareAdd: (1n << 32n) - BigInt(holders[k]!),
        })),
      );
      const [wc] = await loop.cq.take(1, { timeoutMs: 10_000 });
      if (wc?.statusName !== 'SUCCESS') throw new Error(`releasing locks: ${wc?.statusName}`);
    }
    // Lock items (kv.lock()) it holds: CAS (token, id) -> (token, 0), the token kept.
    let items = 0;
    for (const block of this.lockItems) {
      const at = this.itemAt(block) + ItemHeader.ATOMIC_WORD;
      const word = this.memory.bytes.readBigUInt64LE(at);
      const holder = Number(word & 0xffffffffn);
      if (holder === 0 || (id !== 'any' && holder !== id) || (word & BigInt(KvLayout.LOCK_SEAL)) !== 0n) continue; // sealed: deleted
      loop.connection.postSend([
        {
          wrId: 0, opcode: Opcode.CMP_AND_SWP, flags: SendFlag.SIGNALED, local: loop.scratch, length: 8,
          remoteAddr: entry.region.addr + BigInt(at), rkey: entry.region.rkey, compareAdd: word, swap: word & ~0xffffffffn,
        },
      ]);
      const [wc] = await loop.cq.take(1, { timeoutMs: 10_000 });
      if (wc?.statusName !== 'SUCCESS') throw new Error(`releasing a lock item: ${wc?.statusName}`);
      if (loop.scratch.bytes.readBigUInt64LE(0) === word) items++;
    }
    if (held.length + items > 0) {
      this.counters.lockRecoveries += held.length + items;
      this.log?.warn({ clientId: id, bucketLocks: held.length, lockItems: items }, 'released the locks of a departed client');
    }
    return held.length + items;
  }

  /**
   * Queues one orphan-lock scan on the recovery chain: it shares the loopback queue pair (and
   * its scratch buffer) with departed clients' lock release, so the two never interleave.
   */
  private queueOrphanScan(): void {
    if (this.orphanScanQueued || this.closed) return;
    const fabric = [...this.providers.values()].find((f) => f.loopback);
    if (!fabric) return;
    this.orphanScanQueued = true;
    this.recovery = this.recovery
      .then(async () => void (await this.releaseOrphanLocks(fabric)))
      .catch((error: Error) => {
        if (!this.closed) this.log?.error({ err: error.message }, 'orphan lock release failed'); // closing: the loopback is gone
      })
      .finally(() => (this.orphanScanQueued = false));
  }

  /**
   * Lock words and lock items owned by an id that is no live client — not connected or
   * connecting (this.clients, where an id is entered when it is assigned) and not departing
   * (forget()'s chain releases those) — are released: a leaked lock, or a word corrupted to a
   * random owner, would otherwise fail its keys with KV_LOCK_CONTENDED forever. The words are
   * read before the live ids are taken: an owner seen in a word held its id when the word was
   * read, and ids are never reused, so a live holder is never mistaken for an orphan. Each is
   * released with CMP_AND_SWP from the exact word read (bucket: version + 1, owner 0; lock item:
   * token kept, owner 0), never FETCH_AND_ADD: a word that changed since (released, taken
   * again) is left alone. One window of the index per scan, and at most 256 releases.
   */
  private async releaseOrphanLocks(entry: Fabric): Promise<number> {
    const loop = entry.loopback;
    if (this.closed || !loop) return 0;
    const region = this.memory.bytes;
    const indexWords = new BigUint64Array(region.buffer, region.byteOffset + this.layout.indexOffset, this.layout.bucketCount * 8);
    const window = Math.min(this.layout.bucketCount, ORPHAN_SCAN_BUCKETS);
    const held: Array<{ at: number; word: bigint; swap: bigint; bucket?: number }> = [];
    const owners32 = new Uint32Array(indexWords.buffer, indexWords.byteOffset, indexWords.length * 2); // owner: the low half of word 0
    for (let i = 0; i < window; i++) {
      const bucket = (this.orphanScanCursor + i) % this.layout.bucketCount;
      if (owners32[bucket * 16] === 0) continue; // the common case, without a BigInt
      const word = Atomics.load(indexWords, bucket * 8);
      if ((word & 0xffffffffn) === 0n) continue;
      const version = (word >> 32n) & 0xffffffffn;
      held.push({ at: this.layout.indexOffset + bucket * KvLayout.BUCKET_BYTES, word, swap: ((version + 1n) & 0xffffffffn) << 32n, bucket });
    }
    for (const block of this.lockItems) {
      if (region.readUInt16LE(this.itemAt(block) + ItemHeader.TYPE) !== ItemType.LOCK) continue; // a counter's word is its value
      const at = this.itemAt(block) + ItemHeader.ATOMIC_WORD;
      const word = region.readBigUInt64LE(at);
      // A sealed word (owner bit 31) is a deleted lock's: unsealing it would let a cached LOCK take a dead lock.
      if ((word & 0xffffffffn) !== 0n && (word & BigInt(KvLayout.LOCK_SEAL)) === 0n) held.push({ at, word, swap: word & ~0xffffffffn });
    }
    // Now the live ids: see above for why after the words.
    const live = new Set<number>(this.departing);
    for (const client of this.clients.values()) live.add(client.id);
    const orphans = held.filter(({ word }) => !live.has(Number(word & 0xffffffffn))).slice(0, ORPHAN_RELEASE_BURST);
    // The next scan starts after this window, or after the last bucket released if the burst was cut short.
    const lastBucket = orphans.length === ORPHAN_RELEASE_BURST ? [...orphans].reverse().find((o) => o.bucket !== undefined)?.bucket : undefined;
    this.orphanScanCursor = lastBucket !== undefined ? (lastBucket + 1) % this.layout.bucketCount : (this.orphanScanCursor + window) % this.layout.bucketCount;
    let buckets = 0;
    let items = 0;
    const owners = new Set<number>();
    for (let i = 0; i < orphans.length; i += 256) {
      const batch = orphans.slice(i, i + 256);
      loop.connection.postSend(
        batch.map(({ at, word, swap }, k) => ({
          wrId: k, opcode: Opcode.CMP_AND_SWP, flags: k === batch.length - 1 ? SendFlag.SIGNALED : 0, local: loop.scratch, localOffset: k * 8,
          length: 8, remoteAddr: entry.region.addr + BigInt(at), rkey: entry.region.rkey, compareAdd: word, swap,
        })),
      );
      const [wc] = await loop.cq.take(1, { timeoutMs: 10_000 });
      if (wc?.statusName !== 'SUCCESS') throw new Error(`releasing orphaned locks: ${wc?.statusName}`);
      batch.forEach(({ at, word }, k) => {
        if (loop.scratch.bytes.readBigUInt64LE(k * 8) !== word) return; // changed since the read: not ours to release
        owners.add(Number(word & 0xffffffffn));
        if (at < this.layout.heapOffset) buckets++;
        else items++;
      });
    }
    this.counters.orphanLocksReleased += buckets + items;
    if (buckets + items > 0) {
      this.log?.warn({ bucketLocks: buckets, lockItems: items, owners: [...owners] }, 'released locks held by no live client');
    }
    this.emit('orphanScan', { released: buckets + items });
    return buckets + items;
  }

  /** Keepalive: a client silent for three intervals is taken for dead; then a scan for orphaned locks. */
  private sweep(): void {
    const now = performance.now();
    for (const [fabricKey, fabric] of this.providers) {
      for (const client of this.clients.values()) {
        if (!this.byQp.has(`${fabricKey}:${client.connection.qpNum}`)) continue;
        if (now - client.lastSeen > 3 * this.keepaliveMs) {
          this.counters.keepaliveFailures++;
          this.log?.warn({ clientId: client.id, silentMs: Math.round(now - client.lastSeen) }, 'keepalive timeout');
          this.forget(fabric, client, 'keepalive timeout');
        }
      }
    }
    this.queueOrphanScan();
  }

  /** Resolves when every departed client's locks have been released and its blocks taken back. */
  async settled(): Promise<void> {
    while (this.fencing.size > 0) await Promise.all(this.fencing);
    await this.recovery;
    await this.reclaiming;
  }

  private reclaim(): void {
    this.counters.blocksFreed += this.heap.reclaim();
    this.serveWaitingGrants(); // memory past its grace period, or a waiting grant's time up
  }

  stats(): KvServerStats {
    const heap = this.heap.stats();
    return {
      regionBytes: this.layout.regionBytes,
      indexBytes: this.layout.bucketCount * KvLayout.BUCKET_BYTES,
      heapBytes: this.layout.heapBytes,
      heapUsedBytes: heap.usedBytes,
      heapUsedBytesByClass: Object.fromEntries([...heap.usedBytesByClass].map(([size, bytes]) => [String(size), bytes])),
      items: this.counters.items,
      slots: this.layout.bucketCount * KvLayout.SLOTS_PER_BUCKET,
      clients: this.clients.size,
      grants: this.counters.grants,
      blocksGranted: this.counters.blocksGranted,
      notifications: this.counters.notifications,
      blocksFreed: this.counters.blocksFreed,
      blocksReclaimed: this.counters.blocksReclaimed,
      rejectedConnections: this.counters.rejectedConnections,
      keepaliveFailures: this.counters.keepaliveFailures,
      fencedClients: this.counters.fencedClients,
      lockRecoveries: this.counters.lockRecoveries,
      recoveredSlotsSkipped: this.counters.recoveredSlotsSkipped,
      orphanLocksReleased: this.counters.orphanLocksReleased,
      controlMessages: this.counters.controlMessages,
      rdmaErrors: Object.fromEntries(this.rdmaErrors),
    };
  }

  /** The region's bytes (tests and kvctl's layout dump read them). */
  get region(): Buffer {
    return this.memory.bytes;
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
    for (const listener of this.listening) listener.close();
    this.serveHeldRequests(); // rejected: closed
    for (const client of this.clients.keys()) client.disconnect();
    for (const connection of this.loopbacks) connection.disconnect();
    for (const { loopback } of this.providers.values()) loopback?.connection.disconnect();
    for (const { provider, cq } of this.providers.values()) {
      cq.unwatch();
      provider.close();
    }
  }
}
