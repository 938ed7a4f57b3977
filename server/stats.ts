// The server's counters. One ServerStats object per server: each part of it
// counts its own events here (the comment on a counter names who), and
// KvServer.stats() reads them together with the heap and the layout.
// metrics.ts exposes every field; kvctl reads them as JSON.
import { KvLayout } from '../protocol/constants.js';
import type { Heap } from './store/heap.js';
import type { RegionLayout } from './store/layout.js';
import type { EpochTable } from './store/epoch-table.js';

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
  /** slots a restart on a region file could not trust: skipped and cleared (see recovery/restart.ts) */
  recoveredSlotsSkipped: number;
  /** locks whose owner was no live client, released by the orphan-lock scan (see recovery/orphan-scan.ts) */
  orphanLocksReleased: number;
  controlMessages: number;
  /** expired items the expiry sweep removed (eviction/expiry-sweep.ts) */
  expirations: number;
  /** items evicted, by what started the eviction: the high watermark, or a grant short of memory */
  evictions: { watermark: number; grant: number };
  /** heap bytes (block sizes) given back by removals, by reason: expired, watermark, grant */
  removedBytes: { expired: number; watermark: number; grant: number };
  /** --eviction's watermarks in bytes (0 with --eviction none) */
  heapHighWatermarkBytes: number;
  heapLowWatermarkBytes: number;
  rdmaErrors: Record<string, number>;
  /** per provider scheme: 1 when each client gets a memory window of its own (fabric.ts), 0 when it gets the region's rkey */
  memoryWindows: Record<string, number>;
  /** hash slots by their epoch word's state (open, closed, fenced; replication/epoch-follower.ts); empty for a region without an epoch table */
  hashSlots: Record<string, number>;
  /** items and bytes (header, key, value) this member copied to members syncing into its hash slots (replication/copier.ts) */
  repairCopiedItems: number;
  repairCopiedBytes: number;
  /**
   * the cluster as this member last applied its config (--replicas > 1; zeros otherwise): hash slots
   * with fewer replicas than --replicas, those with members syncing into them, and the failovers
   * this member performed as the controller
   */
  /** copyKeysLeft: keys the copy under way on this member has still to copy; rebalanceHashSlotsLeft: on the controller, hash slots a rebalance has still to move */
  replication: { shortHashSlots: number; syncingHashSlots: number; failovers: number; copyKeysLeft: number; rebalanceHashSlotsLeft: number };
}

/** A replicated member's view of its cluster (KvServer.watchReplication); zeros elsewhere. */
export type ReplicationView = KvServerStats['replication'];
export const NO_REPLICATION: ReplicationView = { shortHashSlots: 0, syncingHashSlots: 0, failovers: 0, copyKeysLeft: 0, rebalanceHashSlotsLeft: 0 };

/** The counters, each counted by the part of the server named beside it. */
type Counters = Omit<KvServerStats, 'regionBytes' | 'indexBytes' | 'heapBytes' | 'heapUsedBytes' | 'heapUsedBytesByClass' | 'slots' | 'clients' | 'rdmaErrors' | 'memoryWindows' | 'heapHighWatermarkBytes' | 'heapLowWatermarkBytes' | 'hashSlots' | 'replication'>;

export class ServerStats {
  readonly count: Counters = {
    items: 0, // notices.ts (a PUT of a new key, a DELETE); recovery/restart.ts and recovery/locks.ts (finished deletes)
    grants: 0, blocksGranted: 0, // grants.ts
    notifications: 0, // notices.ts
    blocksFreed: 0, // grants.ts: past the grace period, back in the heap
    blocksReclaimed: 0, // recovery/held-blocks.ts
    rejectedConnections: 0, // sessions/accept.ts
    keepaliveFailures: 0, // keepalive.ts
    fencedClients: 0, // recovery/departures.ts
    lockRecoveries: 0, recoveredSlotsSkipped: 0, orphanLocksReleased: 0, // recovery/: locks.ts, restart.ts, orphan-scan.ts
    controlMessages: 0, // sessions/control.ts
    expirations: 0, // eviction/expiry-sweep.ts
    evictions: { watermark: 0, grant: 0 }, // eviction/evictor.ts
    removedBytes: { expired: 0, watermark: 0, grant: 0 }, // eviction/: expiry-sweep.ts, evictor.ts
    repairCopiedItems: 0, repairCopiedBytes: 0, // replication/copier.ts
  };
  /** kv-server.ts, from --eviction's watermarks (fractions of the heap; 0: no eviction) */
  watermarks = { high: 0, low: 0 };
  /** sessions/completions.ts: error completions by status (flushes not counted) */
  private readonly rdmaErrors = new Map<string, number>();
  /** kv-server.ts, as each fabric opens: does it bind a window per client (fabric.ts)? */
  readonly memoryWindows = new Map<string, number>();

  rdmaError(status: string): void {
    this.rdmaErrors.set(status, (this.rdmaErrors.get(status) ?? 0) + 1);
  }

  /** One snapshot: these counters, the heap's use, the layout's sizes, the epoch words' states. */
  report(layout: RegionLayout, heap: Heap, clients: number, epochs?: EpochTable, replication: ReplicationView = NO_REPLICATION): KvServerStats {
    const used = heap.stats();
    const { items, ...counts } = this.count; // items before slots: /stats keeps its order of fields
    return {
      regionBytes: layout.regionBytes,
      indexBytes: layout.bucketCount * KvLayout.BUCKET_BYTES,
      heapBytes: layout.heapBytes,
      heapUsedBytes: used.usedBytes,
      heapUsedBytesByClass: Object.fromEntries([...used.usedBytesByClass].map(([size, bytes]) => [String(size), bytes])),
      items,
      slots: layout.bucketCount * KvLayout.SLOTS_PER_BUCKET,
      clients,
      ...counts,
      evictions: { ...counts.evictions },
      removedBytes: { ...counts.removedBytes },
      heapHighWatermarkBytes: Math.floor(this.watermarks.high * layout.heapBytes),
      heapLowWatermarkBytes: Math.floor(this.watermarks.low * layout.heapBytes),
      rdmaErrors: Object.fromEntries(this.rdmaErrors),
      memoryWindows: Object.fromEntries(this.memoryWindows),
      hashSlots: epochs ? epochs.states() : {},
      replication: { ...replication },
    };
  }
}
