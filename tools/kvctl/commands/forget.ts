// forget: removes <prefix>/members/<name> from etcd, so from then on clients
// map its hash slots to the other members. Refused while its alive key exists
// (unless --force); the delete is conditional on that in one transaction, so
// a member that comes back in between is not forgotten.
import { SLOT_COUNT } from '../../../client/index.js';
import { assignSlots } from '../../../protocol/hash-slots.js';
import { UsageError } from '../../../protocol/operator-input.js';
import { checkMemberName, etcdKeys, openEtcd } from '../../../protocol/registry.js';
import type { CtlArgs } from '../args.js';
import { readCluster } from '../etcd.js';
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

    const { slots, remaining, movedTo } = slotsMoved(cluster.members, name);
    if (args.json) {
      io.stdout(JSON.stringify({ forgotten: name, slots, movedTo: Object.fromEntries(movedTo), alive: alive !== undefined, members: remaining }) + '\n');
      return;
    }
    const to = remaining.length > 0 ? `now belong to ${[...movedTo].map(([m, n]) => `${m} (${n})`).join(', ')}` : 'belong to nobody: the cluster has no members left';
    io.stdout(
      `forgot member ${name}: its ${slots} slots (${percent(slots).toFixed(1)}%) ${to}.\n` +
        `The keys it held are no longer reachable through the cluster; a server that registers as '${name}' again rejoins with its region file.\n` +
        (alive ? `It is still running (${where}): stop it.\n` : ''),
    );
  } finally {
    etcd.close();
  }
}
