// Self-fencing (docs/replication-design.md §4.1, §4.4): a replica cut off from
// etcd stops serving before etcd can let its lease lapse and the controller
// promote another replica of its hash slots. Its deadline is
//   F = sent(last acknowledged keepalive) + T/2 − 100 ms    (monotonic clock)
// while etcd keeps the lease until at least processed(that keepalive) + T,
// later than F by T/2. At F it fences every epoch word (writers of its hash
// slots wait, or refresh their config) and grants no more read leases; every
// lease it granted (sessions/read-leases.ts) ended by F, being at most F − now
// when granted. The next acknowledged keepalive (of that lease, or of a new
// one after it lapsed) lifts the fence: the epoch follower opens, through the
// barrier, what the config in etcd gives this member then, and read leases
// resume only once a config read after the lapse names it (cli.ts). Keepalives are our own
// (membership.ts), every T/5, so their send times are known.
import type { Logger } from 'pino';

/** Taken off T/2: absorbs timer lateness and clock rate differences. */
const MARGIN_MS = 100;

export interface SelfFenceParts {
  /** The etcd lease's TTL (T). */
  ttlMs: number;
  /** Read leases are capped at twice this (the clients' ping interval): a lease granted long ago says little. */
  keepaliveMs: number;
  /** F passed: fence every epoch word. */
  fence: () => void;
  /** A keepalive came back after F: serve what the config gives us again. */
  lift: () => void;
  logger: Logger;
}

export class SelfFence {
  /** F; none before the first acknowledged keepalive. */
  private deadline = -Infinity;
  private fencedAt: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly parts: SelfFenceParts) {}

  /** Whether the words are fenced for want of etcd (the epoch follower opens nothing meanwhile). */
  get fenced(): boolean {
    return this.fencedAt !== undefined;
  }

  /** A keepalive sent at `sentAt` (performance.now()) was acknowledged: F moves on. */
  acknowledged(sentAt: number): void {
    if (this.closed) return;
    const deadline = sentAt + this.parts.ttlMs / 2 - MARGIN_MS;
    if (deadline <= this.deadline) return;
    this.deadline = deadline;
    this.arm();
    if (this.fencedAt !== undefined && performance.now() < deadline) {
      this.parts.logger.warn({ fencedMs: Math.round(performance.now() - this.fencedAt) }, 'etcd answers again and the lease held: self-fence lifted (hash slots open as the config says)');
      this.fencedAt = undefined;
      this.parts.lift();
    }
  }

  /** For a read lease: ms until F (capped), undefined once F has passed or while fenced. */
  leaseMs(): number | undefined {
    if (this.fencedAt !== undefined) return undefined;
    const left = this.deadline - performance.now();
    return left > 0 ? Math.min(left, 2 * this.parts.keepaliveMs) : undefined;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  private arm(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.check(), Math.max(0, this.deadline - performance.now()));
    this.timer.unref();
  }

  private check(): void {
    if (this.closed || this.fencedAt !== undefined) return;
    const now = performance.now();
    if (now < this.deadline) return this.arm();
    this.fencedAt = now;
    this.parts.logger.error(
      { lateMs: Math.round(now - this.deadline), ttlMs: this.parts.ttlMs },
      'no etcd keepalive acknowledged in time: self-fenced (every hash slot refuses writes here and no read lease is granted, before etcd can let our lease lapse)',
    );
    this.parts.fence();
  }
}
