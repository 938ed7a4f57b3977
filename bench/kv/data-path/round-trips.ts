/**
 * The 1-RTT GET hit rate: the share of GETs that took one READ round trip instead of two
 * (bucket, then item): the client's location cache (docs/protocol.md, "GET on a cache hit")
 * answers a GET of a key it read or wrote within half the grace period with one READ of the
 * item. The counters are KvClient.stats() (read before and after the phases; counters since
 * the client was created):
 *
 *   client.stats(): { gets: number; oneRoundTripGets: number; ... }
 *
 * gets: GETs that reached the data path (found or not); oneRoundTripGets: those answered by one
 * READ. A client without stats() (an older build) leaves the row "not built".
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
