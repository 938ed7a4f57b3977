// Read leases (docs/replication-design.md §4.4). A replica of a replicated
// cluster tells each client, in its hello and in every pong, for how long
// after the client's request its answers may be trusted: until this member's
// self-fence deadline (replication/self-fence.ts), which comes before etcd can
// let its lease lapse and promote another replica. The client counts a GET
// only if its answer came within that time (native/kv/client_core.h,
// permit_reads), so a primary cut off from etcd is not read after a new one
// serves. With the lease goes the config epoch this member has applied
// (protocol v9): a client with an older config counts nothing on the lease, so
// it never reads a hash slot here that this member gave up (or holds stale,
// having returned from a failover) while its config still says otherwise. A
// server that is not a replica grants none: its clients' reads are not
// limited, and its hellos and pongs say nothing of leases.

/** What a replica grants now: the lease (ms; undefined or not above 0: none now) and the config epoch it has applied. */
export interface LeaseGrant {
  leaseMs: number | undefined;
  configEpoch: number;
}

export class ReadLeases {
  private grant: (() => LeaseGrant) | undefined;

  /** From now on hellos and pongs carry what `grant()` says. */
  grantFrom(grant: () => LeaseGrant): void {
    this.grant = grant;
  }

  /** A hello's `readLeaseMs` and `configEpoch`: nothing when this server grants no leases at all, `readLeaseMs` 0 when it grants none now. */
  forHello(): { readLeaseMs?: number; configEpoch?: number } {
    if (!this.grant) return {};
    const { leaseMs, configEpoch } = this.current();
    return { readLeaseMs: leaseMs, configEpoch };
  }

  /** A pong's fields: `{ leaseMs, configEpoch }` from a server that grants leases (0: none now), nothing otherwise. */
  forPong(): { leaseMs?: number; configEpoch?: number } {
    return this.grant ? this.current() : {};
  }

  private current(): { leaseMs: number; configEpoch: number } {
    const { leaseMs: ms, configEpoch } = this.grant!();
    return { leaseMs: ms !== undefined && ms > 0 ? Math.floor(ms) : 0, configEpoch };
  }
}
