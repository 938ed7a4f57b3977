// kvctl rebalance --by bytes: a target placement whose members hold about the
// same bytes, not only the same number of hash slots (docs/cluster.md,
// "Rebalancing"). A hash slot is the unit: its bytes come from the members'
// load records (server/replication/slot-load.ts). Pure: kvctl reads the
// records and writes the target; the controller moves to it as to any other.
//
// It starts from the cluster as it is when its members are the live ones
// (nothing is moved that need not be), else from the placement a fresh cluster
// of the live members would get (the by-count target: a member that joined
// gets its share first). Then, while the member holding the most bytes is
// above the mean by more than the tolerance, it gives the lightest member the
// largest hash slot of at most half their gap (a replica's place is taken
// over, a primary stays primary), keeping a hash slot's replicas in distinct
// zones. Each move narrows the spread, so the walk ends.
import { SLOT_COUNT, type PlacedMember } from './hash-slots.js';
import type { ClusterConfig } from './registry.js';
import { rebalanceTarget, slotReplicaNames, slotsToMove, toRanges } from './slot-table.js';

/** Per member, the bytes of the hash slots it holds (as any replica). */
export function bytesHeld(config: ClusterConfig, slotBytes: ArrayLike<number>): Map<string, number> {
  const held = new Map<string, number>(config.members.map((name) => [name, 0]));
  slotReplicaNames(config).names.forEach((names, slot) => {
    for (const name of names) held.set(name, (held.get(name) ?? 0) + slotBytes[slot]!);
  });
  return held;
}

/**
 * The by-bytes target for `config` over `live`, or undefined when no hash slot would move.
 * `tolerance`: how far above the mean a member may stay (0.05: 5 %).
 */
export function balanceByBytes(config: ClusterConfig, live: readonly PlacedMember[], slotBytes: ArrayLike<number>, tolerance: number): ClusterConfig | undefined {
  const liveNames = new Set(live.map((m) => m.name));
  const holders = new Set(slotReplicaNames(config).names.flat());
  const same = holders.size === liveNames.size && [...holders].every((name) => liveNames.has(name));
  const base = same ? config : (rebalanceTarget(config, live) ?? config);
  const names = slotReplicaNames(base).names.map((list) => [...list]);
  // No zone (or an empty one) is a zone of its own, as placeReplicas has it.
  const zoneOf = new Map(live.map((m) => [m.name, m.zone === '' ? undefined : m.zone]));
  const held = new Map([...liveNames].map((name) => [name, 0]));
  names.forEach((list, slot) => {
    for (const name of list) held.set(name, held.get(name)! + slotBytes[slot]!);
  });
  // Per member, the hash slots it holds with bytes, largest first: a move takes one from a list to another.
  const bySize = new Map([...liveNames].map((name) => [name, [] as number[]]));
  names.forEach((list, slot) => {
    if (slotBytes[slot]! > 0) for (const name of list) bySize.get(name)?.push(slot);
  });
  for (const list of bySize.values()) list.sort((a, b) => slotBytes[b]! - slotBytes[a]!);
  const total = [...held.values()].reduce((a, b) => a + b, 0);
  const ceiling = (total / Math.max(1, held.size)) * (1 + tolerance);
  // Each move narrows the spread (a sum of squares that falls): the bound is only a guard.
  for (let moves = 0; moves < SLOT_COUNT * 4; moves++) {
    const order = [...held.entries()].sort((a, b) => b[1] - a[1]);
    const [heavy, most] = order[0]!;
    if (most <= ceiling) break;
    let moved = false;
    // The lightest member first; one the heaviest can give nothing to (zones, all shared) yields to the next.
    for (const [light, least] of order.slice(1).reverse()) {
      const from = bySize.get(heavy)!;
      const at = bestSlot(from, names, slotBytes, heavy, light, (most - least) / 2, zoneOf);
      if (at === undefined) continue;
      const slot = from[at]!;
      const list = names[slot]!;
      list[list.indexOf(heavy)] = light;
      from.splice(at, 1);
      const into = bySize.get(light)!;
      const place = into.findIndex((other) => slotBytes[other]! < slotBytes[slot]!);
      into.splice(place < 0 ? into.length : place, 0, slot);
      held.set(heavy, most - slotBytes[slot]!);
      held.set(light, least + slotBytes[slot]!);
      moved = true;
      break;
    }
    if (!moved) break;
  }
  const members = [...new Set(names.flat())].sort();
  const index = new Map(members.map((name, i) => [name, i]));
  const target: ClusterConfig = {
    epoch: config.epoch,
    replicas: config.replicas,
    members,
    slots: toRanges(names.map((list) => list.map((name) => index.get(name)!)), new Uint32Array(SLOT_COUNT).fill(config.epoch)),
  };
  return slotsToMove(config, target) === 0 ? undefined : target;
}

/**
 * Where in `from` (the hash slots `heavy` holds, largest first) is the largest one `light` does not
 * hold of at most `limit` bytes, half their gap (so the two end nearest each other, `heavy` still
 * the heavier: a hash slot never swings back and forth), that keeps its replicas in distinct zones;
 * undefined when none is.
 */
function bestSlot(from: readonly number[], names: string[][], slotBytes: ArrayLike<number>, heavy: string, light: string, limit: number, zoneOf: ReadonlyMap<string, string | undefined>): number | undefined {
  const zone = zoneOf.get(light);
  // The first hash slot of at most `limit` bytes, by bisection.
  let low = 0;
  let high = from.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (slotBytes[from[mid]!]! > limit) low = mid + 1;
    else high = mid;
  }
  for (let at = low; at < from.length; at++) {
    const list = names[from[at]!]!;
    if (list.includes(light)) continue;
    if (zone !== undefined && list.some((name) => name !== heavy && zoneOf.get(name) === zone)) continue;
    return at;
  }
  return undefined;
}
