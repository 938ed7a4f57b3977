// A drained member's side of kvctl drain (docs/cluster.md, "Draining a member").
// The controller gives a drained member's hash slots to their copies only once
// no client can still count a read of it: a client routing by the old config
// would read its stale values after the new replicas take writes. So when the
// controller sets <prefix>/drain/<name> to `quiesce`, this member grants no more
// read leases (hellos and pongs say 0, sessions/read-leases.ts), waits until
// every lease it granted has ended (each ends no later than its grant time plus
// its length, as the client counts it from before it asked), and sets the record
// to `quiet`. Reads of its hash slots meanwhile fail KV_READ_LEASE_LAPSED, which
// clients' failover waits retry until the config without it arrives.
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import type { Logger } from 'pino';

import { type DrainRecord, etcdKeys, parseDrainRecord } from '../../protocol/registry.js';

/** Added to the last lease's end: timer lateness is on the safe side, this covers rounding. */
const MARGIN_MS = 20;

export class DrainQuiesce {
  /** By when (performance.now()) every read lease this member granted has ended. */
  private grantedUntil = 0;
  private quiescing = false;
  private timer: NodeJS.Timeout | undefined;
  private watcher: Watcher | undefined;
  private closed = false;
  private readonly key: string;

  private constructor(
    private readonly client: Etcd3,
    prefix: string,
    private readonly name: string,
    private readonly logger: Logger,
  ) {
    this.key = etcdKeys(prefix).drainKey(name);
  }

  /** Watches this member's drain record (and reads it once: a member restarted while quiescing goes on). */
  static async start(client: Etcd3, prefix: string, name: string, logger: Logger): Promise<DrainQuiesce> {
    const drain = new DrainQuiesce(client, prefix, name, logger);
    const watcher = await client.watch().key(drain.key).create();
    drain.watcher = watcher;
    watcher.on('put', (kv) => drain.seen(kv));
    watcher.on('delete', () => drain.seen(undefined));
    watcher.on('connected', () => void drain.reread());
    watcher.on('error', (error) => logger.warn({ err: error }, 'drain: etcd watch failed; it retries'));
    await drain.reread();
    return drain;
  }

  /** The read lease to grant now: none while quiescing; else `leaseMs`, whose end is remembered. */
  lease(leaseMs: number | undefined): number | undefined {
    if (this.quiescing) return undefined;
    if (leaseMs !== undefined && leaseMs > 0) this.grantedUntil = Math.max(this.grantedUntil, performance.now() + leaseMs);
    return leaseMs;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    void this.watcher?.cancel().catch(() => undefined);
  }

  private async reread(): Promise<void> {
    try {
      const read = await this.client.get(this.key).exec();
      this.seen(read.kvs[0]);
    } catch (error) {
      this.logger.warn({ err: error }, 'drain: cannot read this member\'s drain record; the watch tells');
    }
  }

  private seen(kv: IKeyValue | undefined): void {
    if (this.closed) return;
    const record = kv && parseDrainRecord(kv.value.toString());
    const quiescing = record !== undefined && record.phase !== 'copying';
    if (quiescing && !this.quiescing) this.logger.warn({ member: this.name }, 'drain: granting no more read leases; the hash slots go to their copies once the granted ones end');
    if (!quiescing && this.quiescing) this.logger.warn({ member: this.name }, 'drain: cancelled or restarted; granting read leases again');
    this.quiescing = quiescing;
    clearTimeout(this.timer);
    if (kv && record?.phase === 'quiesce') {
      const quiet: DrainRecord = { since: record.since, phase: 'quiet' };
      this.timer = setTimeout(() => void this.sayQuiet(kv.mod_revision, quiet), Math.max(0, this.grantedUntil - performance.now()) + MARGIN_MS);
      this.timer.unref();
    }
  }

  /** Every lease granted has ended: say so, unless the record changed meanwhile (a cancel). */
  private async sayQuiet(modRevision: string, quiet: DrainRecord): Promise<void> {
    try {
      const put = await this.client.if(this.key, 'Mod', '==', modRevision).then(this.client.put(this.key).value(JSON.stringify(quiet))).commit();
      if (put.succeeded) this.logger.warn({ member: this.name }, 'drain: every read lease granted here has ended');
    } catch (error) {
      if (this.closed) return;
      this.logger.warn({ err: error }, 'drain: cannot say quiet; trying again');
      this.timer = setTimeout(() => void this.sayQuiet(modRevision, quiet), 500);
      this.timer.unref();
    }
  }
}
