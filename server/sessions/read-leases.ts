// Read leases (docs/replication-design.md §4.4). A replica of a replicated
// cluster tells each client, in its hello and in every pong, for how long
// after the client's request its answers may be trusted: until this member's
// self-fence deadline (replication/self-fence.ts), which comes before etcd can
// let its lease lapse and promote another replica. The client counts a GET
// only if its answer came within that time (native/kv/client_core.h,
// permit_reads), so a primary cut off from etcd is not read after a new one
// serves. A server that is not a replica grants none: its clients' reads are
// not limited, and its hellos and pongs say nothing of leases.
export class ReadLeases {
  private leaseMs: (() => number | undefined) | undefined;

  /** From now on hellos and pongs carry `leaseMs()` (undefined, or not above 0: no lease now). */
  grantFrom(leaseMs: () => number | undefined): void {
    this.leaseMs = leaseMs;
  }

  /** A hello's `readLeaseMs`: undefined when this server grants no leases at all, 0 when it grants none now. */
  forHello(): number | undefined {
    return this.leaseMs ? this.current() : undefined;
  }

  /** A pong's fields: `{ leaseMs }` from a server that grants leases (0: none now), nothing otherwise. */
  forPong(): { leaseMs?: number } {
    return this.leaseMs ? { leaseMs: this.current() } : {};
  }

  private current(): number {
    const ms = this.leaseMs!();
    return ms !== undefined && ms > 0 ? Math.floor(ms) : 0;
  }
}
