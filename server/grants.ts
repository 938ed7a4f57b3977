// Block grants: clients ask for heap blocks of a size class in batches and
// write their items into them; a grant the heap cannot serve waits while the
// clients holding unused blocks are asked to give them back (reclaim under
// memory pressure). Returned blocks, and blocks past their grace period
// (tick), may answer the waiting grants. Who holds which block is in each
// Client's `held` (sessions/clients.ts).
import type { Logger } from 'pino';

import { KvLayout } from '../protocol/constants.js';
import { GRANT_BATCH, type GrantRequest, type ReturnBlocks, grantBatch } from '../protocol/control.js';
import { complain, send } from './sessions/channel.js';
import type { Client, ClientTable } from './sessions/clients.js';
import type { Evictor } from './eviction/evictor.js';
import type { ItemUse } from './eviction/item-use.js';
import type { ServerStats } from './stats.js';
import type { RegionStore } from './store/region.js';

/**
 * What must happen before this server answers its first block grant (a write may follow any grant at
 * once). kv-server --etcd sets it (replication/first-grant.ts); without one, grants go at once. A check
 * that fails is tried again (every GATE_RETRY_MS, logged every GATE_FAIL_LOG_MS): the grants wait meanwhile.
 * One per server, shared by its namespaces.
 */
export class GrantGate {
  private check: (() => Promise<void>) | undefined;
  private passing: Promise<void> | undefined;
  private closed = false;
  /** No grant waits any more (no check was set, or it passed once). */
  passed = true;

  constructor(private readonly log: Logger | undefined) {}

  set(check: () => Promise<void>): void {
    this.check = check;
    this.passed = false;
  }

  /** Resolves once the check passed (once: later calls share it); never rejects, never resolves after close. */
  wait(): Promise<void> {
    return (this.passing ??= this.run());
  }

  close(): void {
    this.closed = true;
  }

  private async run(): Promise<void> {
    const since = performance.now();
    let logged = 0;
    for (;;) {
      try {
        await this.check!();
        this.passed = true;
        return;
      } catch (error) {
        if (this.closed) return new Promise<void>(() => {});
        const now = performance.now();
        if (now - since >= GATE_FAIL_LOG_MS && now - logged >= GATE_FAIL_LOG_MS) {
          logged = now;
          this.log?.warn({ err: (error as Error).message, waitedMs: Math.round(now - since) }, 'grants: the first block grant waits: the check before it fails; trying again');
        }
        await new Promise((resolve) => setTimeout(resolve, GATE_RETRY_MS));
      }
    }
  }
}

/** A failed GrantGate check is tried again this much later, and logged at most this often. */
const GATE_RETRY_MS = 200;
const GATE_FAIL_LOG_MS = 5000;

interface WaitingGrant {
  client: Client;
  c: number;
  n: number;
  /** performance.now() after which it is answered with what the heap has */
  until: number;
}

export class Grants {
  /** Grants the heap could not serve: waiting for clients to give back unused blocks (see request). */
  private readonly waiting: WaitingGrant[] = [];
  /** Clients sent a reclaim whose answer (a return marked end) has not come, and when. */
  private readonly reclaimAsked = new Map<Client, number>();

  constructor(
    private readonly store: RegionStore,
    private readonly clients: ClientTable,
    private readonly stats: ServerStats,
    private readonly keepaliveMs: number,
    private readonly log: Logger | undefined,
    /** a granted block is no candidate for eviction or expiry until its notice publishes it */
    private readonly use: ItemUse | undefined,
    /** --eviction lru|lfu: a grant short of memory evicts and waits, never KV_OUT_OF_MEMORY while eviction frees memory */
    private readonly evictor?: Evictor,
    private readonly graceMs = 0,
    private readonly gate?: GrantGate,
  ) {}

  /** A grant message: checked, then sized by bytes (an older client asks for GRANT_BATCH of any size class). */
  onRequest(client: Client, { c, n }: GrantRequest): void {
    const { classes, heapBytes } = this.store.layout;
    if (!Number.isInteger(c) || c < 0 || c >= classes.length || !Number.isInteger(n) || n < 1 || n > GRANT_BATCH) {
      complain(this.log, client, 'grant', `bad grant request ${JSON.stringify({ c, n })}`);
      return send(client, { t: 'granted', c: Number.isInteger(c) ? c : -1, blocks: [], error: 'KV_OUT_OF_MEMORY' });
    }
    const count = Math.min(n, grantBatch(classes[c]! * KvLayout.UNIT_BYTES, heapBytes));
    if (this.gate === undefined || this.gate.passed) return this.request(client, c, count);
    void this.gate.wait().then(() => {
      if (!this.clients.has(client)) return; // departed meanwhile
      try {
        this.request(client, c, count);
      } catch (error) {
        this.log?.warn({ clientId: client.id, err: (error as Error).message }, 'cannot answer a grant');
      }
    });
  }

  /** A return message: blocks granted to the client and unused go back to the heap at once (no reader saw them). */
  onReturn(client: Client, { c, blocks, end }: ReturnBlocks): void {
    if (!Number.isInteger(c) || c < 0 || c >= this.store.layout.classes.length || !Array.isArray(blocks)) {
      return complain(this.log, client, 'return', 'bad return message');
    }
    for (const block of blocks) {
      if (client.held.get(block) !== c || !this.store.heap.giveBack(c, block)) {
        complain(this.log, client, 'return', 'returned a block that was not granted to it');
        continue;
      }
      client.held.delete(block);
    }
    if (end === true) this.reclaimAsked.delete(client);
    this.serveWaiting();
  }

  /** The reclaim timer: blocks past their grace period are free; waiting grants may be served (or their time is up). */
  tick(): void {
    this.stats.count.blocksFreed += this.store.heap.reclaim();
    this.evictor?.check();
    this.serveWaiting();
  }

  /**
   * Answers a grant with what the heap has. With nothing that fits, the clients holding
   * granted blocks are asked to give back those they do not use (the one asking too: it may
   * hold other size classes' blocks), and the grant waits for their answers — at most two
   * keepalive intervals, within which every live client polls — and for blocks in their grace
   * period (superseded and deleted items: free within one grace period) before
   * KV_OUT_OF_MEMORY. Without that wait, a burst of overwrites that left the heap's free
   * memory in its grace period failed the next grant though that memory was free a moment later.
   */
  private request(client: Client, c: number, n: number): void {
    const blocks = this.store.heap.grant(c, n);
    if (blocks.length === 0) {
      // With eviction on, items are evicted and the grant waits out their grace period too.
      this.evictor?.shortOfMemory();
      const asked = this.askForUnusedBlocks();
      if (asked || this.evicting() || this.freeingSoon()) {
        this.waiting.push({ client, c, n, until: performance.now() + 2 * this.keepaliveMs + 2 * this.graceMs });
        return;
      }
    }
    this.answer(client, c, blocks);
  }

  /** Blocks are waiting out their grace period: free memory within one grace period. */
  private freeingSoon(): boolean {
    return this.store.heap.graceBytes > 0;
  }

  private answer(client: Client, c: number, blocks: number[]): void {
    for (const block of blocks) {
      client.held.set(block, c);
      this.use?.gone(block);
    }
    this.stats.count.grants++;
    this.stats.count.blocksGranted += blocks.length;
    send(client, blocks.length > 0 ? { t: 'granted', c, blocks } : { t: 'granted', c, blocks, error: 'KV_OUT_OF_MEMORY' });
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
      try {
        send(client, { t: 'reclaim' });
        this.reclaimAsked.set(client, now);
      } catch (error) {
        this.log?.warn({ clientId: client.id, err: (error as Error).message }, 'cannot send a reclaim');
      }
    }
    return this.reclaimAsked.size > 0;
  }

  /** Waiting grants, first come first served: answered once the heap has blocks, every asked client answered, or their time is up. */
  private serveWaiting(): void {
    if (this.waiting.length === 0) return;
    const now = performance.now();
    this.dropStaleAsks(now);
    const outstanding = this.reclaimAsked.size > 0;
    const evicting = this.evicting();
    for (const wait of this.waiting.splice(0)) {
      if (!this.clients.has(wait.client)) continue; // departed
      const blocks = this.store.heap.grant(wait.c, wait.n);
      if (blocks.length === 0 && evicting) {
        // Still evicting, or evicted blocks still in their grace period: keep waiting, evict more.
        this.evictor!.shortOfMemory();
        wait.until = Math.max(wait.until, now + 2 * this.graceMs);
        this.waiting.push(wait);
        continue;
      }
      if (blocks.length === 0 && (outstanding || this.freeingSoon()) && now < wait.until) {
        this.waiting.push(wait);
        continue;
      }
      try {
        this.answer(wait.client, wait.c, blocks);
      } catch (error) {
        // Its connection broke while it waited (its departure takes the blocks back).
        this.log?.warn({ clientId: wait.client.id, err: (error as Error).message }, 'cannot answer a grant');
      }
    }
  }

  /**
   * Can eviction still give memory back: a run going on or that may remove more, or blocks in
   * their grace period? Not timing: a tick that comes after a run ended and its blocks' grace
   * passed (a stalled server) must not fail a grant a next run could serve.
   */
  private evicting(): boolean {
    if (!this.evictor) return false;
    return this.evictor.mayFreeMore || this.freeingSoon();
  }

  /** Forgets the asks of departed clients and those unanswered for two keepalive intervals. */
  private dropStaleAsks(now: number): void {
    for (const [asked, at] of this.reclaimAsked) {
      if (!this.clients.has(asked) || now - at > 2 * this.keepaliveMs) this.reclaimAsked.delete(asked);
    }
  }
}
