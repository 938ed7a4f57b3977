// A client is gone (it closed, died, broke, or went silent: keepalive.ts).
// Fence it first — its queue pair moves to the error state, and once
// `fenced()` resolves nothing it still sends can land (on shm that waits for a
// client paused inside a post) — then release every lock it holds
// (locks.ts), then take back its blocks (held-blocks.ts). Its client ring is
// reused only once its locks are released.
import type { EventEmitter } from 'node:events';

import type { Logger } from 'pino';

import type { Fabric } from '../fabric.js';
import type { Client, ClientTable } from '../sessions/clients.js';
import type { ServerStats } from '../stats.js';
import { Chain } from './chain.js';
import type { HeldBlocks } from './held-blocks.js';
import type { LockRelease } from './locks.js';

export interface DepartureParts {
  clients: ClientTable;
  /** the loopback queue pair's chain, shared with the orphan scan */
  loopbackChain: Chain;
  locks: LockRelease;
  heldBlocks: HeldBlocks;
  /** handles what waits in a fabric's completion queue (sessions/completions.ts) */
  drain: (fabric: Fabric) => void;
  stats: ServerStats;
  log: Logger | undefined;
  /** emits 'clientDisconnected' (id) once its locks are released */
  events: EventEmitter;
  isClosed: () => boolean;
}

export class Departures {
  /** departed clients whose fence is not complete yet */
  private readonly fencing = new Set<Promise<void>>();
  /** ids of departed clients whose locks are not released yet (fence pending included): not orphans (orphan-scan.ts) */
  readonly departing = new Set<number>();
  /** departed clients' blocks being taken back, one client at a time (after its locks are released) */
  private readonly reclaiming = new Chain();
  /** departed clients whose blocks are not taken back yet: what they hold still counts as theirs */
  private readonly unreclaimed = new Set<Client>();

  constructor(private readonly parts: DepartureParts) {}

  forget(client: Client, reason: string): void {
    const { clients, stats, log } = this.parts;
    if (!clients.has(client)) return;
    // Its last notices may still wait in the CQ: account for them while we still know it.
    this.parts.drain(client.fabric);
    if (!clients.remove(client)) return;
    this.unreclaimed.add(client);
    client.connection.disconnect();
    stats.count.fencedClients++;
    log?.info({ clientId: client.id, reason }, 'client disconnected');
    this.departing.add(client.id);
    // Its locks and blocks are touched only once the fence is complete; a client paused
    // inside a post keeps them (and only them) until that post ends or the process exits.
    const fenced = client.connection
      .fenced({
        onWait: () => log?.warn({ clientId: client.id }, 'fenced client is paused inside a post: its locks and blocks wait until it resumes or exits'),
        stopWaiting: () => this.parts.isClosed(),
      })
      .then((complete) => (complete ? this.recover(client) : undefined));
    this.fencing.add(fenced);
    void fenced.finally(() => this.fencing.delete(fenced));
  }

  /** Resolves when every departed client's locks have been released and its blocks taken back. */
  async settled(): Promise<void> {
    while (this.fencing.size > 0) await Promise.all(this.fencing);
    await this.parts.loopbackChain.settled();
    await this.reclaiming.settled();
  }

  /** Does a client other than `except`, connected or departed with its blocks not taken back yet, hold `block`? */
  private readonly heldByAnother = (block: number, except: Client): boolean => {
    for (const client of this.parts.clients.values()) if (client !== except && client.held.has(block)) return true;
    for (const client of this.unreclaimed) if (client !== except && client.held.has(block)) return true;
    return false;
  };

  /** After the fence: its locks, then its blocks. */
  private recover(client: Client): void {
    const { locks, heldBlocks, log } = this.parts;
    this.parts.loopbackChain.add(
      async () => {
        await locks.release(client.fabric, client.id);
        // Its blocks next, on their own chain: a check that waits for busy buckets must not
        // delay the next departed client's locks.
        this.reclaiming.add(
          () => heldBlocks.reclaim(client, this.heldByAnother).finally(() => this.unreclaimed.delete(client)),
          (error) => log?.error({ clientId: client.id, err: error.message }, 'taking back blocks failed'),
        );
      },
      (error) => {
        this.unreclaimed.delete(client); // its blocks will not be taken back: its record stops counting in other departures' checks
        log?.error({ clientId: client.id, err: error.message }, 'lock recovery failed');
      },
      () => {
        this.departing.delete(client.id);
        this.parts.clients.returnRing(client.ring, client.fabric);
        this.parts.events.emit('clientDisconnected', client.id);
      },
    );
  }
}
