// Keepalive: clients ping every keepalive interval, and any completion from a
// client counts as a sign of life (sessions/completions.ts). A client silent
// for three intervals is taken for dead and forgotten (recovery/departures.ts),
// which fences it and releases its locks. Each sweep then queues an orphan-lock
// scan (recovery/orphan-scan.ts).
import type { Logger } from 'pino';

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

/** One sweep (the server runs it every keepalive interval). */
export function sweep({ clients, keepaliveMs, stats, log, forget, afterSweep }: KeepaliveParts): void {
  const now = performance.now();
  for (const client of clients.values()) {
    if (now - client.lastSeen > SILENT_INTERVALS * keepaliveMs) {
      stats.count.keepaliveFailures++;
      log?.warn({ clientId: client.id, silentMs: Math.round(now - client.lastSeen) }, 'keepalive timeout');
      forget(client, 'keepalive timeout');
    }
  }
  afterSweep();
}
