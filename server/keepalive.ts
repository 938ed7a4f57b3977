// Keepalive: clients ping every keepalive interval, and any completion from a
// client counts as a sign of life (sessions/completions.ts). A client silent
// for three intervals is taken for dead and forgotten (recovery/departures.ts),
// which fences it and releases its locks. Each sweep then queues an orphan-lock
// scan (recovery/orphan-scan.ts). A sweep that comes late because the server
// itself stalled does not count the stall as the clients' silence (StallClock).
import type { Logger } from 'pino';

import { StallClock } from '../protocol/stall-clock.js';
import type { Client, ClientTable } from './sessions/clients.js';
import type { ServerStats } from './stats.js';

/** Intervals of silence after which a client is taken for dead. */
const SILENT_INTERVALS = 3;

export interface KeepaliveParts {
  clients: ClientTable;
  keepaliveMs: number;
  stats: ServerStats;
  log: Logger | undefined;
  forget: (client: Client, reason: string) => void;
  afterSweep: () => void;
}

/** The server's sweeps, one every keepalive interval. */
export class KeepaliveSweeps {
  private readonly clock: StallClock;

  constructor(private readonly parts: KeepaliveParts) {
    this.clock = new StallClock(parts.keepaliveMs);
  }

  sweep(): void {
    const now = performance.now();
    const stalledMs = this.clock.stalledMs(now);
    if (stalledMs > 0) {
      // Their pings of that time are still in the CQ, drained after this timer: credit the stall.
      this.parts.log?.warn({ stalledMs: Math.round(stalledMs) }, 'the server stalled (event loop blocked or process paused): keepalive silence of that time is not counted');
      for (const client of this.parts.clients.values()) client.lastSeen = Math.min(now, client.lastSeen + stalledMs);
    }
    sweep(this.parts, now);
  }
}

function sweep({ clients, keepaliveMs, stats, log, forget, afterSweep }: KeepaliveParts, now: number): void {
  for (const client of clients.values()) {
    if (now - client.lastSeen > SILENT_INTERVALS * keepaliveMs) {
      stats.count.keepaliveFailures++;
      log?.warn({ clientId: client.id, silentMs: Math.round(now - client.lastSeen) }, 'keepalive timeout');
      forget(client, 'keepalive timeout');
    }
  }
  afterSweep();
}
