// Session numbers: the high bits of every version a client writes
// (KvLayout.SESSION_VERSION_BITS). They are numbered for the region's life and
// persisted in the superblock before a hello hands one out, so a restart on a
// region file never hands one out twice and versions never repeat.
// A replica's new region (--replicas > 1) starts at a random session in the
// lower half of the space (others start at 1): the replicas of a cluster hold each other's versions after a
// failover, and members that all started at 1 would hand the same sessions to
// the same clients, so one version could name two writes of a key (a CAS could
// match the wrong one). Random starts make that unlikely (two members' first
// k sessions overlap with probability about 2k / 2^23), not impossible:
// cluster-unique sessions from etcd are docs/replication-design.md §4.6.
import { randomInt } from 'node:crypto';

import { KvLayout } from '../../protocol/constants.js';
import { versionSession } from '../../protocol/index-format.js';
import { readNextSession, writeNextSession } from '../store/layout.js';

export class SessionNumbers {
  private next: bigint;

  constructor(private readonly region: Buffer, randomStart = false) {
    // 0: a new region, or a v1 region file (continueAbove then moves above its items' sessions)
    this.next = readNextSession(region) || (randomStart ? BigInt(randomInt(1, KvLayout.MAX_SESSIONS / 2)) : 1n);
  }

  /** Every session number is used: versions would repeat. */
  get exhausted(): boolean {
    return this.next >= BigInt(KvLayout.MAX_SESSIONS);
  }

  /** The next session, persisted as taken before the caller hands it out. */
  take(): bigint {
    const session = this.next++;
    writeNextSession(this.region, this.next);
    return session;
  }

  /**
   * A region file written before sessions were persisted (no next-session word) continues
   * above the highest session among the versions of its trusted items, so no version repeats.
   */
  continueAbove(versions: Iterable<bigint>): void {
    if (readNextSession(this.region) !== 0n) return;
    for (const version of versions) {
      const session = versionSession(version);
      if (session >= this.next) this.next = session + 1n;
    }
    writeNextSession(this.region, this.next);
  }
}
