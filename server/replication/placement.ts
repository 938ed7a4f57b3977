// The config the controller wants for a member set: placeReplicas
// (protocol/hash-slots.ts, the ranking clients also use) turned into ranges,
// with epochs carried over from the config in etcd. Pure: controller.ts reads
// and writes etcd, this only decides.
//   - a hash slot whose replicas (by name, in order) are unchanged keeps its epoch;
//   - every changed one gets epoch = previous.epoch + 1, and config.epoch moves there;
//   - nothing changed: no new config (undefined), so nothing is written.
import { SLOT_COUNT, type PlacedMember, placeReplicas } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type SlotRange, removedMembers } from '../../protocol/registry.js';
import { sameList, slotReplicaNames, toRanges } from '../../protocol/slot-table.js';
import { changedSlots } from './rebalance.js';

export { removedMembers, slotReplicaNames };

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
  const syncing: number[][] = [];
  const epochs = new Uint32Array(SLOT_COUNT);
  let changed = false;
  for (const range of config.slots) {
    const live = range.replicas.filter((i) => !deadIndex.has(i));
    const liveSyncing = range.syncing.filter((i) => !deadIndex.has(i));
    // A dead syncing member leaves too (its copy is lost with it); the primary's copy to the others starts over.
    const moved = live.length > 0 && (live.length < range.replicas.length || liveSyncing.length < range.syncing.length);
    changed ||= moved;
    for (let slot = range.from; slot <= range.to; slot++) {
      replicas[slot] = moved ? live : range.replicas;
      syncing[slot] = moved ? liveSyncing : range.syncing;
      epochs[slot] = moved ? epoch : range.epoch;
    }
  }
  if (!changed) return undefined;
  return { epoch, replicas: config.replicas, members: config.members, slots: toRanges(replicas, epochs, syncing) };
}

/**
 * Repair (docs/replication-design.md §5), its start: every hash slot with fewer replicas and
 * syncing members than config.replicas gets live members syncing into it, at a new epoch. From
 * then on every write of the hash slot also goes to them (client/cluster/replica-sets.ts), and its
 * primary copies what was there before (copier.ts). A candidate is chosen in a zone the hash
 * slot does not use yet if there is one, then by the fewest hash slots held, then by name; ranges
 * stay whole. `candidates`: live members that may hold hash slots (new ones join `members`);
 * `leaving`: members being drained, which count as holding nothing (a hash slot of theirs gets a
 * member syncing into it to replace them). undefined: nothing to repair, or no candidate.
 */
export function withSyncing(config: ClusterConfig, candidates: readonly PlacedMember[], leaving: ReadonlySet<string> = new Set()): ClusterConfig | undefined {
  const members = [...config.members];
  const zoneOf = new Map(candidates.map((m) => [m.name, m.zone]));
  const indexOf = (name: string): number => {
    let i = members.indexOf(name);
    if (i < 0) i = members.push(name) - 1;
    return i;
  };
  const load = new Map<string, number>(candidates.map((m) => [m.name, 0]));
  for (const range of config.slots) {
    for (const i of [...range.replicas, ...range.syncing]) {
      const name = config.members[i]!;
      if (load.has(name)) load.set(name, load.get(name)! + range.to - range.from + 1);
    }
  }
  const epoch = config.epoch + 1;
  if (epoch > 0xffffffff) throw new RangeError('config epoch exhausted (32 bits)');
  const slots: SlotRange[] = [];
  let changed = false;
  for (const range of config.slots) {
    const holding = [...range.replicas, ...range.syncing].map((i) => config.members[i]!);
    const syncing = [...range.syncing];
    // A member being drained still holds its hash slots until their copies replace it: it does not count.
    let staying = holding.filter((name) => !leaving.has(name)).length;
    while (staying < config.replicas && syncing.length < config.replicas) {
      const zones = new Set(holding.map((name) => zoneOf.get(name)));
      const pick = candidates
        .filter((m) => !holding.includes(m.name))
        .sort((a, b) => Number(zones.has(a.zone) && a.zone !== undefined) - Number(zones.has(b.zone) && b.zone !== undefined) || load.get(a.name)! - load.get(b.name)! || (a.name < b.name ? -1 : 1))[0];
      if (!pick) break;
      holding.push(pick.name);
      staying++;
      syncing.push(indexOf(pick.name));
      load.set(pick.name, load.get(pick.name)! + range.to - range.from + 1);
    }
    if (syncing.length > range.syncing.length) {
      changed = true;
      slots.push({ ...range, syncing, epoch });
    } else {
      slots.push(range);
    }
  }
  if (!changed) return undefined;
  return { epoch, replicas: config.replicas, members, slots: merged(slots) };
}

/** What a copier reported done: `target` holds every item of hash slots `from`..`to` as of `epoch`. */
export interface CopiedRange {
  from: number;
  to: number;
  epoch: number;
}

/**
 * Repair, its end: each member syncing into a hash slot whose copy is reported done (`copied`, by
 * target) at the hash slot's current epoch becomes a replica (after the others), all of a
 * range's at once, at a new epoch. undefined: none is.
 */
export function withSynced(config: ClusterConfig, copied: ReadonlyMap<string, readonly CopiedRange[]>, leaving: ReadonlySet<string> = new Set()): ClusterConfig | undefined {
  const epoch = config.epoch + 1;
  if (epoch > 0xffffffff) throw new RangeError('config epoch exhausted (32 bits)');
  let changed = false;
  const slots = config.slots.map((range) => {
    // No more replicas than --replicas (the config's table has room for no more): the copy of a
    // member being drained waits for withDrained, which puts it in that member's place. A member
    // being drained is never made a replica.
    const room = Math.max(0, config.replicas - range.replicas.length);
    const done = copiesDone(config, range, copied)
      .filter((i) => !leaving.has(config.members[i]!))
      .slice(0, room);
    if (done.length === 0) {
      // More syncing than room, and no member of the range drained any more (a drain cancelled while
      // copying): the surplus stops taking writes.
      if (range.syncing.length <= room || [...range.replicas, ...range.syncing].some((i) => leaving.has(config.members[i]!))) return range;
      changed = true;
      return { ...range, syncing: range.syncing.slice(0, room), epoch };
    }
    changed = true;
    return { ...range, replicas: [...range.replicas, ...done], syncing: range.syncing.filter((i) => !done.includes(i)), epoch };
  });
  if (!changed) return undefined;
  return { epoch, replicas: config.replicas, members: config.members, slots: merged(slots) };
}

/** The members syncing into `range` whose copy is reported done at its current epoch. */
function copiesDone(config: ClusterConfig, range: SlotRange, copied: ReadonlyMap<string, readonly CopiedRange[]>): number[] {
  return range.syncing.filter((t) => copied.get(config.members[t]!)?.some((c) => c.epoch === range.epoch && c.from <= range.from && range.to <= c.to));
}

/**
 * A drained range: `range` without the members of `leaving` (by index), each leaving replica's
 * place taken by a copy done (primary order kept: a leaving primary's first backup becomes
 * primary, as in a failover). undefined: the range holds no leaving member, or too few copies are
 * done to replace its leaving replicas.
 */
function drainedRange(config: ClusterConfig, range: SlotRange, copied: ReadonlyMap<string, readonly CopiedRange[]>, leaving: ReadonlySet<number>, notCopies: ReadonlySet<number> = leaving): Pick<SlotRange, 'replicas' | 'syncing'> | undefined {
  if (![...range.replicas, ...range.syncing].some((i) => leaving.has(i))) return undefined;
  const done = copiesDone(config, range, copied).filter((i) => !notCopies.has(i));
  const staying = range.replicas.filter((i) => !leaving.has(i));
  const replaced = range.replicas.length - staying.length;
  if (done.length < replaced || staying.length + replaced === 0) return undefined;
  const taken = done.slice(0, replaced);
  return { replicas: [...staying, ...taken], syncing: range.syncing.filter((i) => !leaving.has(i) && !taken.includes(i)) };
}

/** Whether every hash slot `name` holds has copies done to replace it (kvctl drain's `quiesce` may start). */
export function drainReady(config: ClusterConfig, copied: ReadonlyMap<string, readonly CopiedRange[]>, name: string): boolean {
  const index = config.members.indexOf(name);
  if (index < 0) return false;
  const leaving = new Set([index]);
  return config.slots.every((range) => !range.replicas.includes(index) || drainedRange(config, range, copied, leaving) !== undefined);
}

/**
 * A drain, its end (docs/cluster.md, "Draining a member"): each hash slot that members of `quiet`
 * (drained members whose read leases have all ended) hold loses them at a new epoch, their copies
 * taking their place. The epoch word of every other replica moves, so a writer still routing by
 * the old config is refused with nothing written; the drained member then holds none (its words
 * fence). `drainedToo`: members being drained that are not quiet yet, never put in as copies.
 * undefined: nothing to give away yet.
 */
export function withDrained(config: ClusterConfig, copied: ReadonlyMap<string, readonly CopiedRange[]>, quiet: ReadonlySet<string>, drainedToo: ReadonlySet<string> = quiet): ClusterConfig | undefined {
  const epoch = config.epoch + 1;
  if (epoch > 0xffffffff) throw new RangeError('config epoch exhausted (32 bits)');
  const indices = (names: ReadonlySet<string>) => new Set(config.members.flatMap((name, i) => (names.has(name) ? [i] : [])));
  const leaving = indices(quiet);
  const notCopies = new Set([...leaving, ...indices(drainedToo)]);
  if (leaving.size === 0) return undefined;
  let changed = false;
  const slots = config.slots.map((range) => {
    const drained = drainedRange(config, range, copied, leaving, notCopies);
    if (drained === undefined) return range;
    changed = true;
    return { ...range, ...drained, epoch };
  });
  if (!changed) return undefined;
  return { epoch, replicas: config.replicas, members: config.members, slots: merged(slots) };
}

/** Ranges with neighbours of the same replicas, syncing members and epoch joined. */
function merged(ranges: readonly SlotRange[]): SlotRange[] {
  const out: SlotRange[] = [];
  for (const range of ranges) {
    const last = out[out.length - 1];
    if (last && last.epoch === range.epoch && sameList(last.replicas, range.replicas) && sameList(last.syncing, range.syncing)) last.to = range.to;
    else out.push({ ...range });
  }
  return out;
}


/**
 * With --replicas 1 once placement is frozen: the hash slots whose replica was forgotten (kvctl
 * forget: its name not in `registered`) go to the member placement over `candidates` (live members
 * not being drained) gives them, without keys (they had no other copy), at a new epoch; their
 * syncing members stop. undefined: no hash slot is held by a forgotten member, or no candidate.
 */
export function withForgottenPlaced(config: ClusterConfig, registered: ReadonlySet<string>, candidates: readonly PlacedMember[]): ClusterConfig | undefined {
  if (candidates.length === 0) return undefined;
  const placed = placeReplicas(candidates, 1);
  const now = slotReplicaNames(config).names;
  const forgotten = (slot: number) => now[slot]!.length > 0 && !registered.has(now[slot]![0]!);
  return changedSlots(config, (slot) => (forgotten(slot) ? { replicas: [placed.members[placed.replicas[slot]![0]!]!], syncing: [] } : undefined));
}
