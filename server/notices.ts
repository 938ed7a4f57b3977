// Notices: after every PUT and DELETE a client writes a record into its client
// ring and announces it with WRITE_WITH_IMM (the immediate: its sequence). The
// server reads the record — the slot written and the slot replaced — retires
// the replaced block to the heap (free after the grace period), counts items,
// learns lock items, and advances the ring's consumed counter, which the
// client reads when its ring looks full. Nothing in a record is trusted.
//
// The per-record work is native (native/server/notice_drain.cc): one poll per
// batch of up to NoticeOut.CAPACITY completions reads and checks the records,
// clears the retired blocks' granted bits, writes the consumed counters and
// reposts the receive buffers. What stays here is JS state, updated from flat
// lists with no object per PUT: the grace queue, each client's held blocks,
// the lock items, the counters and the logs.
import type { Logger } from 'pino';

import { NoticeDrain, NoticeOut, NoticeProblem } from '../native/index.js';
import { KvLayout } from '../protocol/constants.js';
import type { Fabric } from './fabric.js';
import { complain } from './sessions/channel.js';
import type { Client } from './sessions/clients.js';
import type { ItemUse } from './eviction/item-use.js';
import type { ServerStats } from './stats.js';
import type { RegionStore } from './store/region.js';

export class Notices {
  private readonly drains = new Map<Fabric, NoticeDrain>();
  /** Attached clients by client ring (the drain names clients by ring). */
  private readonly byRing: Array<Client | undefined> = [];
  private readonly chunkStart: Uint32Array;
  private readonly granted: Uint32Array;
  private repostFailureLogged = false;

  constructor(
    private readonly store: RegionStore,
    private readonly stats: ServerStats,
    private readonly log: Logger | undefined,
    /** with eviction on: stamps published blocks (candidates from now on) and forgets retired ones */
    private readonly use: ItemUse | undefined,
  ) {
    ({ chunkStart: this.chunkStart, granted: this.granted } = store.heap.bitmaps());
  }

  /** A client's notices are drained natively from now on (sessions/clients.ts, when it is added). */
  attach(client: Client): void {
    this.drainOf(client.fabric).attach(client.connection, client.ring);
    this.byRing[client.ring] = client;
  }

  /** Its completions reach JS untouched from now on (when it is removed). */
  detach(client: Client): void {
    this.drains.get(client.fabric)?.detach(client.connection.qpNum);
    if (this.byRing[client.ring] === client) this.byRing[client.ring] = undefined;
  }

  /**
   * One crossing: takes up to NoticeOut.CAPACITY completions from the fabric's CQ, accounts
   * for the notices among them, and returns the drain whose `others` hold the rest
   * (out[NoticeOut.OTHERS] of them; out[NoticeOut.POLLED] taken in all).
   */
  poll(fabric: Fabric): NoticeDrain {
    const drain = this.drainOf(fabric);
    drain.poll(this.chunkStart, this.granted);
    const out = drain.out;
    const notices = out[NoticeOut.NOTICES]!;
    if (notices === 0) return drain;
    const { stats, store, byRing } = this;
    stats.count.notifications += notices;
    stats.count.items += out[NoticeOut.ITEMS_DELTA]! | 0;
    const now = performance.now();
    for (let i = 0, n = out[NoticeOut.SEEN]!; i < n; i++) {
      const client = byRing[out[NoticeOut.SEEN_AT + i]!];
      if (client) client.lastSeen = now;
    }
    // Published: the index owns the block now, not the client.
    const { use } = this;
    const tick = use?.now() ?? 0;
    for (let i = 0, n = out[NoticeOut.PUBLISHED]!, at = NoticeOut.PUBLISHED_AT; i < n; i++, at += 2) {
      byRing[out[at]!]?.held.delete(out[at + 1]!);
      use?.published(out[at + 1]!, tick);
    }
    // Lock items learned before those retired are forgotten: a batch may publish a block and
    // retire it again, never the reverse (a retired block is not reused within the grace period).
    for (let i = 0, n = out[NoticeOut.LOCKS]!; i < n; i++) store.lockItems.add(out[NoticeOut.LOCKS_AT + i]!);
    const retired = out[NoticeOut.RETIRED]!;
    if (retired > 0) {
      const at = store.heap.graceEnd();
      const locks = store.lockItems.size > 0;
      for (let i = 0, w = NoticeOut.RETIRED_AT; i < retired; i++, w += 2) {
        store.heap.enqueueRetired(out[w]!, out[w + 1]!, at);
        use?.gone(out[w + 1]!);
        if (locks) store.lockItems.delete(out[w + 1]!);
      }
    }
    for (let i = 0, n = out[NoticeOut.PROBLEMS]!, at = NoticeOut.PROBLEMS_AT; i < n; i++, at += 3) {
      const client = byRing[out[at]!];
      if (!client) continue;
      const seq = out[at + 1]!;
      if (out[at + 2] === NoticeProblem.MALFORMED) complain(this.log, client, 'notification', `malformed notification record ${seq}`);
      else complain(this.log, client, 'retire', `notification ${seq} retires a block that is not in use`);
    }
    if (out[NoticeOut.REPOST_FAILED]! > 0 && !this.repostFailureLogged) {
      this.repostFailureLogged = true;
      this.log?.warn({ buffers: out[NoticeOut.REPOST_FAILED] }, 'could not repost receive buffers after notices (a broken connection?)');
    }
    return drain;
  }

  private drainOf(fabric: Fabric): NoticeDrain {
    let drain = this.drains.get(fabric);
    if (!drain) {
      const { layout } = this.store;
      drain = new NoticeDrain(fabric.provider, fabric.cq, this.store.bytes, layout, layout.classes, fabric.recv, KvLayout.SERVER_RECV_BYTES);
      this.drains.set(fabric, drain);
    }
    return drain;
  }
}
