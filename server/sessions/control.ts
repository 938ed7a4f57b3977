// Control messages from clients (protocol/control.ts): decoded, counted, and
// answered — pings here, grant requests and returned blocks by grants.ts.
// A message that does not decode is logged once per client and kind.
import type { Logger } from 'pino';

import { type ControlMessage, decode } from '../../protocol/control.js';
import type { Grants } from '../grants.js';
import type { ServerStats } from '../stats.js';
import { complain, send } from './channel.js';
import type { Client } from './clients.js';
import type { ReadLeases } from './read-leases.js';

export class ControlMessages {
  constructor(
    private readonly grants: Grants,
    private readonly stats: ServerStats,
    private readonly log: Logger | undefined,
    private readonly leases: ReadLeases,
  ) {}

  onMessage(client: Client, bytes: Buffer): void {
    this.stats.count.controlMessages++;
    let message: ControlMessage;
    try {
      message = decode(bytes);
    } catch (error) {
      return complain(this.log, client, 'malformed', `${(error as Error).message}`);
    }
    switch (message.t) {
      case 'ping':
        return send(client, { t: 'pong', ...this.leases.forPong() });
      case 'grant':
        // A read client has no use for blocks: its rkey cannot write them.
        if (client.role !== 'write') return complain(this.log, client, 'grant', 'a read client asked for blocks');
        return this.grants.onRequest(client, message);
      case 'return':
        return this.grants.onReturn(client, message);
      default:
        return complain(this.log, client, 'unexpected', `unexpected message '${String((message as { t: unknown }).t)}'`);
    }
  }
}
