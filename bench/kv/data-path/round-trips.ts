/**
 * The 1-RTT GET hit rate: the share of GETs that took one READ round trip instead of two
 * (bucket, then item). Only a client that remembers where keys are (a cache of bucket or item
 * locations, checked by the item READ itself) can answer in one; KvClient has no such cache
 * yet, so the row reads "not built".
 *
 * What this benchmark expects the client to offer once it has one (public API, read before
 * and after a phase; counters since the client was created):
 *
 *   client.stats(): { gets: number; oneRoundTripGets: number; ... }
 *
 * gets: GETs finished (found or not); oneRoundTripGets: those answered by one READ.
 */
import type { KvClient } from '../../../client/index.js';

export interface RoundTripCounters {
  gets: number;
  oneRoundTripGets: number;
}

/** The client's counters, or undefined when it does not count one-round-trip GETs. */
export function roundTripCounters(client: KvClient): RoundTripCounters | undefined {
  const stats = (client as unknown as { stats?: () => Partial<RoundTripCounters> }).stats;
  if (typeof stats !== 'function') return undefined;
  const s = stats.call(client);
  if (typeof s?.gets !== 'number' || typeof s.oneRoundTripGets !== 'number') return undefined;
  return { gets: s.gets, oneRoundTripGets: s.oneRoundTripGets };
}

/** The hit rate between two readings, in %. */
export function hitRatePercent(before: RoundTripCounters, after: RoundTripCounters): number | undefined {
  const gets = after.gets - before.gets;
  return gets > 0 ? (100 * (after.oneRoundTripGets - before.oneRoundTripGets)) / gets : undefined;
}
