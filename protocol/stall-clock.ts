// A keepalive timer's own lateness. Both ends count a peer's silence only over
// time they were running to hear it: when this process stalls (a blocked event
// loop, a long GC, a paused or starved VM), its keepalive timer fires late, the
// peer's pings or pongs sit unread in the CQ, and without this the peer would
// be taken for dead for what was our own pause (the Soft-RoCE guest's tests run
// a server and its clients in one starved process).

export class StallClock {
  private last = performance.now();

  constructor(private readonly intervalMs: number) {}

  /**
   * Called on every tick of an interval timer: how many ms this tick came late beyond one more
   * interval (the process stalled), or 0. Jitter below an interval is not a stall.
   */
  stalledMs(now = performance.now()): number {
    const late = now - this.last - this.intervalMs;
    this.last = now;
    return late > this.intervalMs ? late : 0;
  }
}
