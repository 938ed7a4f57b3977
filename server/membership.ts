// kv-server's registration in etcd (--etcd). Two keys, read by clients'
// cluster/membership.ts:
//   <prefix>/members/<name>  written once, never leased: the member owns its
//                            slots until an operator runs `kvctl forget`
//   <prefix>/alive/<name>    its URL, under a lease this process keeps alive;
//                            revoked on a clean stop, expired after a crash
// The member key also records --replicas and --zone (server/replication/ places
// hash slots by them); the controller key is created under this lease.
// Two live servers must never share a name (they would share slots): an alive
// key held by someone else is waited out for one TTL, then refused.
import { hostname } from 'node:os';

import type { Etcd3, Lease } from 'etcd3';
import type { Logger } from 'pino';

import { type AliveRecord, type MemberRecord, etcdKeys, openEtcd } from '../protocol/registry.js';
import { StartupError } from '../protocol/operator-input.js';

export interface RegistrationOptions {
  hosts: string[];
  prefix: string;
  name: string;
  /** The URL clients dial. */
  url: string;
  /** Its metrics base URL, if it serves one. */
  metricsUrl?: string | undefined;
  ttlSeconds: number;
  logger: Logger;
  /** Each etcd call, and waiting for a predecessor's lease. @default 10000 */
  timeoutMs?: number;
  /** --replicas and --zone, recorded in the member key for the controller (server/replication/). */
  replicas?: number;
  zone?: string | undefined;
  /** Runs before anything is written (a check that may refuse the start with a StartupError). */
  beforeClaim?: (client: Etcd3) => Promise<void>;
  /**
   * With it, the lease is kept alive by our own keepalives, every TTL/5 (each given TTL/5 to
   * answer), and each acknowledged one is reported with the time it was sent (performance.now()):
   * a replica's self-fence deadline counts from it (replication/self-fence.ts). Without it,
   * etcd3's own keepalive (every TTL/3, send times unknown).
   */
  onKeepalive?: (sentAt: number) => void;
  /** The lease was lost (before registering again): whatever was decided under it may be over. */
  onLost?: () => void;
  /** A new lease holds the alive key again (after a loss): anything read of etcd before now is from before it. */
  onClaimed?: () => void;
}

export class EtcdRegistration {
  private lease: Lease | undefined;
  /** The current lease's id: the controller key is created under it. undefined while lost. */
  leaseId: string | undefined;
  /** Whether this run created the member key (a refused start removes it again). */
  createdMember = false;
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;
  /** The next of our own keepalives (onKeepalive). */
  private keepaliveTimer: NodeJS.Timeout | undefined;

  private constructor(
    readonly client: Etcd3,
    private readonly options: RegistrationOptions,
  ) {}

  /** Registers, or throws a StartupError saying why not. */
  static async register(options: RegistrationOptions): Promise<EtcdRegistration> {
    const timeoutMs = options.timeoutMs ?? 10_000;
    const client = openEtcd(options.hosts, timeoutMs);
    const registration = new EtcdRegistration(client, options);
    try {
      await options.beforeClaim?.(client);
      await registration.claim(performance.now() + options.ttlSeconds * 1000 + 2000);
    } catch (error) {
      client.close();
      if (error instanceof StartupError) throw error;
      throw new StartupError(`cannot register in etcd at ${options.hosts.join(',')}: ${(error as Error).message}`);
    }
    options.logger.info({ member: options.name, url: options.url, prefix: options.prefix, ttlSeconds: options.ttlSeconds }, 'registered in etcd');
    return registration;
  }

  /**
   * Takes the alive key under a new lease, waiting until `deadline` for another
   * holder's lease to end. A failed claim gives its lease up: retries after a
   * lost lease must not leave leases behind, each kept alive forever.
   */
  private async claim(deadline: number): Promise<void> {
    const ours = this.options.onKeepalive !== undefined;
    const lease = this.client.lease(this.options.ttlSeconds, { autoKeepAlive: !ours });
    lease.on('lost', (error) => this.lost(lease, error.message));
    let leaseId: string;
    // Granted no earlier than sent: the lease lives at least a TTL from then.
    let acknowledgedAt = performance.now();
    // While a predecessor's alive key is waited out, nothing else keeps our new lease alive.
    const renew = async () => {
      const sentAt = performance.now();
      const waitMs = (this.options.ttlSeconds * 1000) / 2;
      await answeredWithin(lease.keepaliveOnce({ deadline: new Date(Date.now() + waitMs) }), waitMs).then(
        () => void (acknowledgedAt = sentAt),
        () => undefined, // the next try, or the claim's own failure, says more
      );
    };
    try {
      leaseId = await lease.grant();
      await this.claimUnder(leaseId, deadline, ours ? renew : undefined);
    } catch (error) {
      await lease.revoke().catch(() => lease.release());
      throw error;
    }
    this.lease = lease;
    this.leaseId = leaseId;
    this.options.onClaimed?.();
    if (ours) {
      this.options.onKeepalive!(acknowledgedAt);
      this.keepAlive(lease, acknowledgedAt);
    }
  }

  /**
   * Our own keepalives for `lease` (onKeepalive): one sent every TTL/5 whether or not the last
   * was answered (a slow etcd must not make a healthy member fence itself), each given TTL/2 to
   * answer (later, its deadline F has passed anyway). One that etcd says is for an expired lease
   * makes etcd3 report it lost; a TTL without any acknowledged one counts as lost too.
   */
  private keepAlive(lease: Lease, grantedAt: number): void {
    const ttlMs = this.options.ttlSeconds * 1000;
    const everyMs = ttlMs / 5;
    let lastAcknowledged = grantedAt;
    let failing = false;
    const current = () => !this.stopped && this.lease === lease;
    const send = () => {
      if (!current()) return;
      if (performance.now() - lastAcknowledged > ttlMs) return this.lost(lease, `no keepalive acknowledged for ${this.options.ttlSeconds} s`);
      const sentAt = performance.now();
      answeredWithin(lease.keepaliveOnce({ deadline: new Date(Date.now() + ttlMs / 2) }), ttlMs / 2).then(
        () => {
          if (!current()) return;
          lastAcknowledged = Math.max(lastAcknowledged, sentAt);
          if (failing) this.options.logger.info({ member: this.options.name }, 'etcd keepalives acknowledged again');
          failing = false;
          this.options.onKeepalive!(sentAt);
        },
        (error: Error) => {
          if (!current()) return;
          if (!failing) this.options.logger.warn({ member: this.options.name, err: error }, 'etcd keepalive failed: retrying');
          failing = true;
        },
      );
      this.keepaliveTimer = setTimeout(send, everyMs).unref();
    };
    send(); // at once: a slow claim may have used up much of the deadline its grant gave

  }

  /** The claim itself: the alive key bound to `leaseId`, then the member key if it is new. */
  private async claimUnder(leaseId: string, deadline: number, renew?: () => Promise<void>): Promise<void> {
    const { name, url, logger } = this.options;
    const keys = etcdKeys(this.options.prefix);
    const alive: AliveRecord = { url, pid: process.pid, host: hostname(), started: new Date().toISOString() };
    if (this.options.metricsUrl) alive.metrics = this.options.metricsUrl;
    for (;;) {
      const txn = await this.client
        .if(keys.aliveKey(name), 'Create', '==', 0)
        .then(this.client.put(keys.aliveKey(name)).value(JSON.stringify(alive)).lease(leaseId))
        .else(this.client.get(keys.aliveKey(name)))
        .commit();
      if (txn.succeeded) break;
      const held = txn.responses[0]?.response_range?.kvs[0];
      let holder: Partial<AliveRecord> = {};
      try {
        holder = JSON.parse(held?.value.toString() ?? '{}') as Partial<AliveRecord>;
      } catch {
        // unreadable: treat as someone else's, and wait for it to expire
      }
      if (holder.url === url) {
        // We listen on that URL now, so its holder is gone: our own predecessor, crashed.
        logger.warn({ member: name, url, previous: holder }, 'replacing the registration of a previous run');
        await this.client.delete().key(keys.aliveKey(name)).exec();
        continue;
      }
      if (performance.now() > deadline) {
        throw new StartupError(
          `another kv-server is registered as '${name}' in etcd (at ${holder.url ?? 'an unreadable address'}` +
            `${holder.host ? `, host ${holder.host} pid ${holder.pid}` : ''}): stop it, or give this one another --name`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
      await renew?.();
    }
    await this.recordMember();
  }

  /** Creates the member key, or brings its replicas and zone up to date (keeping when it joined). */
  private async recordMember(): Promise<void> {
    const { name, replicas = 1, zone } = this.options;
    const key = etcdKeys(this.options.prefix).member(name);
    const member: MemberRecord = { name, joined: new Date().toISOString(), replicas, ...(zone === undefined ? {} : { zone }) };
    const txn = await this.client
      .if(key, 'Create', '==', 0)
      .then(this.client.put(key).value(JSON.stringify(member)))
      .else(this.client.get(key))
      .commit();
    if (txn.succeeded) {
      this.createdMember = true;
      return;
    }
    const held = txn.responses[0]?.response_range?.kvs[0];
    let before: Partial<MemberRecord> = {};
    try {
      before = JSON.parse(held?.value.toString() ?? '{}') as Partial<MemberRecord>;
    } catch {
      // unreadable: rewritten below
    }
    if (before.replicas === replicas && before.zone === zone && typeof before.joined === 'string') return;
    const updated = { ...member, joined: typeof before.joined === 'string' ? before.joined : member.joined };
    // Only if it is still there: a `kvctl forget` meanwhile wins.
    await this.client.if(key, 'Mod', '==', held?.mod_revision ?? '0').then(this.client.put(key).value(JSON.stringify(updated))).commit();
  }

  /** The lease expired (etcd unreachable for a TTL): clients see us as down until we register again. */
  private lost(lease: Lease, why: string): void {
    if (this.stopped || this.lease !== lease) return;
    this.lease = undefined;
    this.leaseId = undefined;
    lease.release();
    this.options.onLost?.();
    this.options.logger.error({ member: this.options.name, reason: why }, 'etcd lease lost: registering again');
    const again = () => {
      this.retry = undefined;
      if (this.stopped) return;
      this.claim(performance.now() + this.options.ttlSeconds * 1000 + 2000).then(
        () => this.options.logger.info({ member: this.options.name }, 'registered in etcd again'),
        (error: Error) => {
          this.options.logger.error({ err: error }, 'etcd registration failed: retrying in 1 s');
          this.retry = setTimeout(again, 1000);
        },
      );
    };
    again();
  }

  /** Revokes the lease (the alive key goes with it at once) and disconnects. The member key stays. */
  async close(): Promise<void> {
    this.stopped = true;
    if (this.retry) clearTimeout(this.retry);
    if (this.keepaliveTimer) clearTimeout(this.keepaliveTimer);
    await this.lease?.revoke().catch(() => undefined);
    this.client.close();
  }
}

/** `call`, or a rejection once `ms` have passed without its answer. */
function answeredWithin<T>(call: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([call, late]).finally(() => clearTimeout(timer));
}
