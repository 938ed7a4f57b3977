// The config the controller wants for a member set: placeReplicas
// (protocol/hash-slots.ts, the ranking clients also use) turned into ranges,
// with epochs carried over from the config in etcd. Pure: controller.ts reads
// and writes etcd, this only decides.
//   - a hash slot whose replicas (by name, in order) are unchanged keeps its epoch;
//   - every changed one gets epoch = previous.epoch + 1, and config.epoch moves there;
//   - nothing changed: no new config (undefined), so nothing is written.
import { SLOT_COUNT, type PlacedMember, placeReplicas } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type SlotRange, removedMembers } from '../../protocol/registry.js';

export { removedMembers };

/**
 * The config for `members`, or undefined when `previous` already is it. `usedEpoch`: the highest
 * epoch known to be used (an unreadable config's), so a replacement never reuses one.
 */
export function nextConfig(previous: ClusterConfig | undefined, members: readonly PlacedMember[], replicas: number, usedEpoch = 0): ClusterConfig | undefined {
  const placed = placeReplicas(members, replicas);
  const before = previous && slotReplicaNames(previous);
  const epoch = Math.max(previous?.epoch ?? 0, usedEpoch) + 1;
  const epochs = new Uint32Array(SLOT_COUNT);
  let changed = previous === undefined || previous.replicas !== replicas || !sameList(previous.members, placed.members);
  let bumped = false;
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const names = placed.replicas[slot]!.map((i) => placed.members[i]!);
    if (before !== undefined && sameList(before.names[slot]!, names)) {
      epochs[slot] = before.epochs[slot]!;
    } else {
      epochs[slot] = epoch;
      changed = bumped = true;
    }
  }
  if (!changed) return undefined;
  // A member list or replica count change with no slot moved still publishes a config, at the same epoch.
  if (epoch > 0xffffffff) throw new RangeError('config epoch exhausted (32 bits)');
  return { epoch: bumped ? epoch : previous!.epoch, replicas, members: placed.members, slots: toRanges(placed.replicas, epochs) };
}

/**
 * Failover (docs/replication-design.md §4.5): `config` without the members of `dead` as replicas.
 * A hash slot that loses one gets epoch config.epoch + 1, its first live backup becoming primary
 * (scheme A commits every acknowledged write on every replica, so any backup has them all); one
 * whose replicas are all dead keeps them (nothing to promote: it stays unavailable until one
 * returns). The dead stay in `members`, holding no hash slot (removedMembers). undefined: no
 * hash slot changes.
 */
export function withoutReplicas(config: ClusterConfig, dead: ReadonlySet<string>): ClusterConfig | undefined {
  const epoch = config.epoch + 1;
  if (epoch > 0xffffffff) throw new RangeError('config epoch exhausted (32 bits)');
  const deadIndex = new Set(config.members.flatMap((name, i) => (dead.has(name) ? [i] : [])));
  const replicas: number[][] = [];
  const epochs = new Uint32Array(SLOT_COUNT);
  let changed = false;
  for (const range of config.slots) {
    const live = range.replicas.filter((i) => !deadIndex.has(i));
    const moved = live.length > 0 && live.length < range.replicas.length;
    changed ||= moved;
    for (let slot = range.from; slot <= range.to; slot++) {
      replicas[slot] = moved ? live : range.replicas;
      epochs[slot] = moved ? epoch : range.epoch;
    }
  }
  if (!changed) return undefined;
  return { epoch, replicas: config.replicas, members: config.members, slots: toRanges(replicas, epochs) };
}

/** Per hash slot: its replicas' names (primary first) and its epoch. */
export function slotReplicaNames(config: ClusterConfig): { names: string[][]; epochs: Uint32Array } {
  const names: string[][] = [];
  const epochs = new Uint32Array(SLOT_COUNT);
  for (const range of config.slots) {
    const list = range.replicas.map((i) => config.members[i]!);
    for (let slot = range.from; slot <= range.to; slot++) {
      names[slot] = list;
      epochs[slot] = range.epoch;
    }
  }
  return { names, epochs };
}

/** Consecutive hash slots with the same replicas and epoch, as one range each. */
function toRanges(replicas: number[][], epochs: Uint32Array): SlotRange[] {
  const ranges: SlotRange[] = [];
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const last = ranges[ranges.length - 1];
    if (last && last.epoch === epochs[slot] && sameList(last.replicas, replicas[slot]!)) last.to = slot;
    else ranges.push({ from: slot, to: slot, replicas: replicas[slot]!, syncing: [], epoch: epochs[slot]! });
  }
  return ranges;
}

function sameList<T>(a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
