// A rebalance (kvctl rebalance; docs/cluster.md, "Rebalancing"): the cluster
// moves, by copying, from its config to a target placement (the rendezvous
// placement over the live members, as a fresh cluster would be placed). Pure:
// rebalance-round.ts reads and writes etcd, this only decides. Per hash slot:
//   1. the target's members that do not hold it sync into it (withMoveSyncing):
//      they take every write from then on while its primary copies the rest
//      (copier.ts, as for repair);
//   2. once every such copy is done at the hash slot's epoch, its replicas
//      become the target's (withMoved), at a new epoch. A hash slot whose
//      primary changes moves only once its old primary is quiet (it granted no
//      read lease since, handoff.ts), and all of that member's such hash slots
//      move in one config: a client routing by the old config could otherwise
//      read the old primary after the new one took a write. A hash slot that
//      keeps its primary (only backups change) needs no quiesce: no one reads
//      a backup.
import { SLOT_COUNT } from '../../protocol/hash-slots.js';
import type { ClusterConfig } from '../../protocol/registry.js';
import { deadHolders, rebalanceTarget, sameList, slotReplicaNames, slotsToMove, toRanges } from '../../protocol/slot-table.js';
import type { CopiedRange } from './placement.js';

export { deadHolders, rebalanceTarget, slotsToMove };

type Copied = ReadonlyMap<string, readonly CopiedRange[]>;
type Slots = ReturnType<typeof slotReplicaNames>;

/**
 * Step 1: every target member that neither replicates nor syncs into a hash slot syncs into it,
 * and members syncing that the target does not name stop, at a new epoch. undefined: none missing.
 */
export function withMoveSyncing(config: ClusterConfig, target: ClusterConfig): ClusterConfig | undefined {
  const now = slotReplicaNames(config);
  const wanted = slotReplicaNames(target).names;
  return changedSlots(config, (slot) => {
    // Members syncing that the target does not name (a cancelled move's) stop taking writes: they would fill the room.
    const kept = now.syncing[slot]!.filter((name) => wanted[slot]!.includes(name));
    const holding = [...now.names[slot]!, ...kept];
    // The config's table has room for --replicas syncing members; a hash slot without a live replica has no one to copy from.
    const room = now.names[slot]!.length > 0 ? config.replicas - kept.length : 0;
    const adds = wanted[slot]!.filter((name) => !holding.includes(name)).slice(0, Math.max(0, room));
    if (adds.length === 0 && kept.length === now.syncing[slot]!.length) return undefined;
    return { replicas: now.names[slot]!, syncing: [...kept, ...adds] };
  });
}

/** Whether hash slot `slot` can take the target's replicas: each one that is not a replica yet reports its copy done at the hash slot's epoch. */
function slotReady(now: Slots, wanted: string[][], copied: Copied, slot: number): boolean {
  if (now.names[slot]!.length === 0) return false; // no live replica to hand over from
  const epoch = now.epochs[slot]!;
  return wanted[slot]!.every((name) => now.names[slot]!.includes(name) || (now.syncing[slot]!.includes(name) && (copied.get(name)?.some((c) => c.epoch === epoch && c.from <= slot && slot <= c.to) ?? false)));
}

/** The members that are the primary of some hash slot whose target primary is another: those a rebalance has yet to hand over. */
export function primariesLeaving(config: ClusterConfig, target: ClusterConfig): Set<string> {
  const now = slotReplicaNames(config).names;
  const wanted = slotReplicaNames(target).names;
  const names = new Set<string>();
  for (let slot = 0; slot < SLOT_COUNT; slot++) if (now[slot]!.length > 0 && now[slot]![0] !== wanted[slot]![0]) names.add(now[slot]![0]!);
  return names;
}

/** The hash slots whose primary is `name` and whose target primary is another member. */
function primaryLeaving(now: Slots, wanted: string[][], name: string): number[] {
  const slots: number[] = [];
  for (let slot = 0; slot < SLOT_COUNT; slot++) if (now.names[slot]![0] === name && wanted[slot]![0] !== name) slots.push(slot);
  return slots;
}

/**
 * The members that must quiesce before hash slots they are primary of move (kvctl rebalance): the
 * primaries losing hash slots all of whose copies are done.
 */
export function handoffsDue(config: ClusterConfig, target: ClusterConfig, copied: Copied): string[] {
  const now = slotReplicaNames(config);
  const wanted = slotReplicaNames(target).names;
  return config.members.filter((name) => {
    const slots = primaryLeaving(now, wanted, name);
    return slots.length > 0 && slots.every((slot) => slotReady(now, wanted, copied, slot));
  });
}

/**
 * Step 2: every hash slot that is ready takes the target's replicas (in the target's order) at a
 * new epoch, its syncing members that the target names leaving `syncing`. One whose primary
 * changes only if that primary is in `quiet`, and then all of that primary's such hash slots
 * (or none: never some, then read again under a lease at a config that moved them); `handedOver`
 * lists those primaries. undefined: nothing ready.
 */
export function withMoved(config: ClusterConfig, target: ClusterConfig, copied: Copied, quiet: ReadonlySet<string>): { config: ClusterConfig; handedOver: string[] } | undefined {
  const now = slotReplicaNames(config);
  const wanted = slotReplicaNames(target).names;
  const handedOver = new Set<string>();
  for (const name of quiet) {
    const slots = primaryLeaving(now, wanted, name);
    if (slots.length > 0 && slots.every((slot) => slotReady(now, wanted, copied, slot))) handedOver.add(name);
  }
  const moved = changedSlots(config, (slot) => {
    const names = now.names[slot]!;
    const want = wanted[slot]!;
    const moves = !sameList(names, want) && slotReady(now, wanted, copied, slot) && (names[0] === want[0] || handedOver.has(names[0]!));
    // Every member the target names is a replica now; any other syncing one stops taking writes.
    return moves ? { replicas: want, syncing: [] } : undefined;
  });
  return moved && { config: moved, handedOver: [...handedOver] };
}

/**
 * `config` with new replicas and syncing members (by name) for the hash slots `change` gives them
 * for, those at a new epoch (names not in `members` yet are added); undefined when it gives none.
 */
export function changedSlots(config: ClusterConfig, change: (slot: number) => { replicas: readonly string[]; syncing: readonly string[] } | undefined): ClusterConfig | undefined {
  const now = slotReplicaNames(config);
  const members = [...config.members];
  const indexOf = (name: string): number => {
    let i = members.indexOf(name);
    if (i < 0) i = members.push(name) - 1;
    return i;
  };
  const epoch = nextEpoch(config);
  let changed = false;
  const replicas: number[][] = [];
  const syncing: number[][] = [];
  const epochs = new Uint32Array(SLOT_COUNT);
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const next = change(slot);
    replicas[slot] = (next?.replicas ?? now.names[slot]!).map(indexOf);
    syncing[slot] = (next?.syncing ?? now.syncing[slot]!).map(indexOf);
    epochs[slot] = next ? epoch : now.epochs[slot]!;
    changed ||= next !== undefined;
  }
  return changed ? { epoch, replicas: config.replicas, members, slots: toRanges(replicas, epochs, syncing) } : undefined;
}

function nextEpoch(config: ClusterConfig): number {
  const epoch = config.epoch + 1;
  if (epoch > 0xffffffff) throw new RangeError('config epoch exhausted (32 bits)');
  return epoch;
}
