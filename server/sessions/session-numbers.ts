// Session numbers: the high bits of every version a client writes
// (KvLayout.SESSION_VERSION_BITS). They are numbered for the region's life and
// persisted in the superblock before a hello hands one out, so a restart on a
// region file never hands one out twice and versions never repeat.
import { KvLayout } from '../../protocol/constants.js';
import { versionSession } from '../../protocol/index-format.js';
import { readNextSession, writeNextSession } from '../store/layout.js';

export class SessionNumbers {
  private next: bigint;

  constructor(private readonly region: Buffer) {
    this.next = readNextSession(region) || 1n; // 0: a new region, or a v1 region file (see continueAbove)
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
