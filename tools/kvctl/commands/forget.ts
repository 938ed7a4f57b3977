// forget: removes <prefix>/members/<name> from etcd, so from then on clients
// map its hash slots to the other members. Refused while its alive key exists
// (unless --force); the delete is conditional on that in one transaction, so
// a member that comes back in between is not forgotten. What it prints says
// what became of the member's keys: with --replicas 1 they are lost to the
// cluster (they were in its region file only); with more, its hash slots'
// other replicas hold them, and repair restores the count.
import { SLOT_COUNT } from '../../../client/index.js';
import { assignSlots } from '../../../protocol/hash-slots.js';
import { UsageError } from '../../../protocol/operator-input.js';
import { type ClusterConfig, checkMemberName, etcdKeys, openEtcd, slotsHeld, underReplicatedSlots } from '../../../protocol/registry.js';
import { slotReplicaNames } from '../../../protocol/slot-table.js';
import type { CtlArgs, EtcdTarget } from '../args.js';
import { readCluster, readClusterConfig } from '../etcd.js';
import { percent } from '../format.js';
import { type Io, NotFound } from '../io.js';

/** How many of the forgotten member's hash slots, and where they go: the map every client computes for the remaining members. */
function slotsMoved(members: string[], name: string): { slots: number; remaining: string[]; movedTo: Map<string, number> } {
  const before = assignSlots(members);
  const remaining = members.filter((m) => m !== name);
  const after = assignSlots(remaining);
  const index = before.members.indexOf(name);
  const movedTo = new Map<string, number>(remaining.map((m) => [m, 0]));
  let slots = 0;
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    if (before.owner[slot] !== index) continue;
    slots++;
    const heir = after.members[after.owner[slot]!];
    if (heir !== undefined) movedTo.set(heir, movedTo.get(heir)! + 1);
  }
  return { slots, remaining, movedTo };
}

export async function forget(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  if (target.kind !== 'etcd') throw new UsageError('forget works on an etcd cluster: give --etcd (a --servers cluster is the list you pass)');
  let name: string;
  try {
    name = checkMemberName(args.name!);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const etcd = openEtcd(target.hosts, args.timeoutMs);
  try {
    const keys = etcdKeys(target.prefix);
    const cluster = await readCluster(etcd, target);
    if (!cluster.members.includes(name)) {
      throw new NotFound(`no member '${name}' under etcd prefix ${target.prefix} (members: ${cluster.members.join(', ') || 'none'})`);
    }
    const alive = cluster.alive.get(name);
    const where = alive ? `at ${alive.url ?? 'an unknown address'}${alive.host ? `, host ${alive.host} pid ${alive.pid}` : ''}` : '';
    if (alive && !args.force) {
      throw new Error(`'${name}' is alive (${where}): stop it first, or give --force to forget a running member (its keys become unreachable)`);
    }
    let txn = etcd.if(keys.member(name), 'Create', '>', 0);
    if (!args.force) txn = txn.and(keys.aliveKey(name), 'Create', '==', 0);
    const result = await txn.then(etcd.delete().key(keys.member(name))).commit();
    if (!result.succeeded) throw new Error(`'${name}' changed while being forgotten (it came alive, or someone else forgot it): look again with kvctl layout`);

    const config = await readClusterConfig(etcd, target as EtcdTarget);
    if (config !== undefined && config.replicas > 1) return replicated(args, io, config, name, new Set(cluster.alive.keys()), alive ? where : undefined);
    if (config !== undefined && (await etcd.get(keys.frozen).string()) !== null) return frozenSingle(args, io, config, name, alive ? where : undefined);
    const { slots, remaining, movedTo } = slotsMoved(cluster.members, name);
    if (args.json) {
      io.stdout(JSON.stringify({ forgotten: name, slots, movedTo: Object.fromEntries(movedTo), alive: alive !== undefined, members: remaining, replicas: 1, keysLost: true }) + '\n');
      return;
    }
    const to = remaining.length > 0 ? `now belong to ${[...movedTo].map(([m, n]) => `${m} (${n})`).join(', ')}` : 'belong to nobody: the cluster has no members left';
    io.stdout(
      `forgot member ${name}: its ${slots} slots (${percent(slots).toFixed(1)}%) ${to}.\n` +
        `Its keys are lost to the cluster: with --replicas 1 they had no other copy. Its region file still holds them, but a server that registers as '${name}' again joins as a new member: once the others hold keys it gets hash slots only by a rebalance, which replaces what its file held of them.\n` +
        (alive ? `It is still running (${where}): stop it.\n` : ''),
    );
  } finally {
    etcd.close();
  }
}

/**
 * forget with --replicas 1 once placement is frozen: the controller gives its hash slots (by the
 * config) to the live members, empty; its region file cannot bring its keys back.
 */
function frozenSingle(args: CtlArgs, io: Io, config: ClusterConfig, name: string, running: string | undefined): void {
  const index = config.members.indexOf(name);
  const held = config.slots.reduce((n, r) => (r.replicas[0] === index ? n + r.to - r.from + 1 : n), 0);
  if (args.json) {
    io.stdout(JSON.stringify({ forgotten: name, hashSlotsHeld: held, alive: running !== undefined, replicas: 1, keysLost: true, frozen: true }) + '\n');
    return;
  }
  io.stdout(
    `forgot member ${name}: its ${held} hash slots go to the live members, without their keys.\n` +
      `Its keys are lost to the cluster: with --replicas 1 they had no other copy, and placement is frozen, so its region file cannot bring them back (a server registering as '${name}' again gets hash slots only by kvctl rebalance, copied from the others).\n` +
      (running ? `It is still running (${running}): stop it.\n` : ''),
  );
}

/**
 * forget on a replicated cluster: its hash slots' other replicas hold their keys, unless none of them
 * is alive (failover keeps a dead member as the last replica of a hash slot: then its keys are lost
 * unless such a replica returns with its region file); what it still holds in config is failed over
 * once its lease lapses, and repair restores the count.
 */
function replicated(args: CtlArgs, io: Io, config: ClusterConfig, name: string, alive: ReadonlySet<string>, runningAt: string | undefined): void {
  const held = slotsHeld(config, name);
  const short = underReplicatedSlots(config);
  const lost = slotReplicaNames(config).names.filter((list) => list.includes(name) && list.every((m) => m === name || !alive.has(m))).length;
  if (args.json) {
    io.stdout(JSON.stringify({ forgotten: name, replicas: config.replicas, keysLost: lost > 0, hashSlotsLost: lost, hashSlotsHeld: held, underReplicated: short, alive: runningAt !== undefined }) + '\n');
    return;
  }
  const first = lost > 0
    ? `forgot member ${name}: ${lost} of its hash slots have no other live replica: their keys are lost unless one of their replicas returns with its region file (kvctl layout lists them).\n`
    : `forgot member ${name}: with --replicas ${config.replicas} its keys are on the other replicas of its hash slots: nothing is lost.\n`;
  const holds = held > lost
    ? `It still holds ${held - lost} hash slots in config that have a live replica: once it is failed over (its lease lapses) those serve them, and repair copies them to another member.\n`
    : short > 0
      ? `${short} hash slots are short of a replica: repair copies them to a member that holds none at once, or to the others after --replace-after (kvctl layout shows it).\n`
      : '';
  io.stdout(first + holds + (runningAt ? `It is still running (${runningAt}): stop it.\n` : ''));
}
