// A config's hash slots one by one (ranges are its stored form), shared by the
// controller's placement functions (server/replication) and kvctl: per hash
// slot its replicas' names, and the placement a rebalance moves to.
import { SLOT_COUNT, type PlacedMember, placeReplicas } from './hash-slots.js';
import type { ClusterConfig, SlotRange } from './registry.js';

/** Per hash slot: its replicas' names (primary first), the members syncing into it, and its epoch. */
export function slotReplicaNames(config: ClusterConfig): { names: string[][]; syncing: string[][]; epochs: Uint32Array } {
  const names: string[][] = [];
  const syncing: string[][] = [];
  const epochs = new Uint32Array(SLOT_COUNT);
  for (const range of config.slots) {
    const list = range.replicas.map((i) => config.members[i]!);
    const sync = range.syncing.map((i) => config.members[i]!);
    for (let slot = range.from; slot <= range.to; slot++) {
      names[slot] = list;
      syncing[slot] = sync;
      epochs[slot] = range.epoch;
    }
  }
  return { names, syncing, epochs };
}

/** Consecutive hash slots with the same replicas, syncing members and epoch, as one range each. */
export function toRanges(replicas: number[][], epochs: Uint32Array, syncing?: number[][]): SlotRange[] {
  const ranges: SlotRange[] = [];
  const none: number[] = [];
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const last = ranges[ranges.length - 1];
    const sync = syncing?.[slot] ?? none;
    if (last && last.epoch === epochs[slot] && sameList(last.replicas, replicas[slot]!) && sameList(last.syncing, sync)) last.to = slot;
    else ranges.push({ from: slot, to: slot, replicas: replicas[slot]!, syncing: sync, epoch: epochs[slot]! });
  }
  return ranges;
}

export function sameList<T>(a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** How many hash slots of `config` do not have `target`'s replicas (by name, in order). */
export function slotsToMove(config: ClusterConfig, target: ClusterConfig): number {
  const current = slotReplicaNames(config).names;
  const wanted = slotReplicaNames(target).names;
  let count = 0;
  for (let slot = 0; slot < SLOT_COUNT; slot++) if (!sameList(current[slot]!, wanted[slot]!)) count++;
  return count;
}

/**
 * What a rebalance of `config` over `live` moves to (kvctl rebalance): the placement a fresh
 * cluster of those members would get (placeReplicas, as the controller places one), at
 * config's epoch (a target's epochs mean nothing), or undefined when no hash slot would move.
 */
export function rebalanceTarget(config: ClusterConfig, live: readonly PlacedMember[]): ClusterConfig | undefined {
  const placed = placeReplicas(live, config.replicas);
  const epochs = new Uint32Array(SLOT_COUNT).fill(config.epoch);
  const target: ClusterConfig = { epoch: config.epoch, replicas: config.replicas, members: placed.members, slots: toRanges(placed.replicas, epochs) };
  return slotsToMove(config, target) === 0 ? undefined : target;
}

/** The members not alive that alone hold a hash slot the target moves (--replicas 1: nothing can copy it until they return). */
export function deadHolders(config: ClusterConfig, target: ClusterConfig, alive: ReadonlySet<string>): string[] {
  const now = slotReplicaNames(config).names;
  const wanted = slotReplicaNames(target).names;
  const names = new Set<string>();
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    if (!sameList(now[slot]!, wanted[slot]!) && now[slot]!.length > 0 && now[slot]!.every((name) => !alive.has(name))) for (const name of now[slot]!) names.add(name);
  }
  return [...names];
}
