// The controller's part in a rebalance (kvctl rebalance writes <prefix>/target;
// the steps are rebalance.ts's). One round does at most one thing, in this
// order, and the controller runs another after any write:
//   - gives up the target when it cannot be reached: a member it names is not
//     alive (a joining member killed mid-copy: what it copied is dropped with
//     it at the failover, and the cluster stays as it was before the move),
//     a drain started, or it is unreadable;
//   - removes it once config has the target's replicas everywhere (done);
//   - moves the hash slots that are ready (withMoved), with the handoff records
//     of the quiet members they leave set to `moved` in the same transaction,
//     conditioned on those records as read (so a give-up that came first wins);
//   - has the target's members sync into the hash slots they lack (withMoveSyncing);
//   - asks the primaries whose leaving hash slots are all copied to quiesce.
// Records of members asked to quiesce that have nothing to hand over any more
// go (here, and with no target at all: clearHandoffs), so no member stays
// without read leases. While a target is there the controller does nothing
// else (no repair, no placement); a member that joins meanwhile waits for the
// next rebalance. A give-up freezes placement (repair drops unfinished copies).
import type { Etcd3, IKeyValue } from 'etcd3';
import type { Logger } from 'pino';

import { encodeClusterConfig } from '../../protocol/config-codec.js';
import type { PlacedMember } from '../../protocol/hash-slots.js';
import { type ClusterConfig, type HandoffRecord, etcdKeys, frozenRecord, parseClusterConfig, parseHandoffRecord } from '../../protocol/registry.js';
import { writeConfig } from './config-store.js';
import type { CopiedRange } from './placement.js';
import { deadHolders, handoffsDue, primariesLeaving, rebalanceTarget, slotsToMove, withMoveSyncing, withMoved } from './rebalance.js';

export interface RebalanceContext {
  client: Etcd3;
  keys: ReturnType<typeof etcdKeys>;
  logger: Logger;
  leaseId: string;
}

/** What the round saw of the cluster. */
export interface RebalanceView {
  config: ClusterConfig;
  modRevision: string;
  /** The target key as read. */
  target: IKeyValue;
  alive: ReadonlySet<string>;
  draining: boolean;
  copied: ReadonlyMap<string, readonly CopiedRange[]>;
}

/** One rebalance round; whether it wrote (the controller then looks again). */
export async function rebalanceRound(ctx: RebalanceContext, view: RebalanceView): Promise<boolean> {
  const { client, keys, logger } = ctx;
  const { config, modRevision } = view;
  let target: ClusterConfig | undefined;
  try {
    target = parseClusterConfig(view.target.value.toString());
  } catch (error) {
    return giveUp(ctx, view, `the target is unreadable (${(error as Error).message})`);
  }
  const gone = target.members.filter((name) => !view.alive.has(name));
  if (gone.length > 0) return giveUp(ctx, view, `member${gone.length === 1 ? '' : 's'} ${gone.join(', ')} of the target ${gone.length === 1 ? 'is' : 'are'} not alive`);
  const holders = deadHolders(config, target, view.alive);
  if (holders.length > 0) return giveUp(ctx, view, `hash slots to move are held only by ${holders.join(', ')}, not alive: nothing can copy them`);
  if (view.draining) return giveUp(ctx, view, 'a drain started');
  if (target.replicas !== config.replicas) return giveUp(ctx, view, `the target has --replicas ${target.replicas}, the cluster ${config.replicas}`);

  const handoffs = await readHandoffs(client, keys);
  const open = (names: (name: string) => boolean) => [...handoffs].filter(([name, h]) => h.record?.phase !== 'moved' && names(name)).map(([, h]) => h.kv);
  if (slotsToMove(config, target) === 0) {
    // Done: the target goes, and with it any record of a member never handed over (it grants leases again).
    const done = await removeTarget(ctx, view, open(() => true));
    if (done) logger.warn({ epoch: config.epoch, members: target.members }, 'rebalance: done: every hash slot has the target\'s replicas');
    return true;
  }
  // A member asked to quiesce that gives no primary away any more (a failover took them, and it synced back in) grants leases again.
  const leaving = primariesLeaving(config, target);
  const stray = open((name) => !leaving.has(name));
  if (stray.length > 0) {
    let txn = client.if(keys.target, 'Mod', '==', view.target.mod_revision).and(keys.controller, 'Lease', '==', ctx.leaseId);
    for (const kv of stray) txn = txn.and(kv.key.toString(), 'Mod', '==', kv.mod_revision);
    await txn.then(...stray.map((kv) => client.delete().key(kv.key.toString()))).commit();
    return true;
  }

  const quiet = new Map([...handoffs].filter(([, h]) => h.record?.phase === 'quiet'));
  const moved = withMoved(config, target, view.copied, new Set(quiet.keys()));
  let next = moved?.config;
  let why = 'rebalance: hash slots whose copies are done have the target\'s replicas';
  // The quiet members whose primaries move say so in the same transaction: each grants leases again once it applied this config.
  // Conditioned on the target as read: a cancel or a give-up that came first wins.
  const handedOver = (moved?.handedOver ?? []).map((name) => [keys.handoffKey(name), quiet.get(name)!] as const);
  const unchanged = new Map([[keys.target, view.target.mod_revision], ...handedOver.map(([key, h]) => [key, h.kv.mod_revision] as const)]);
  const puts = new Map(handedOver.map(([key, h]) => [key, JSON.stringify({ since: h.record!.since, phase: 'moved', epoch: next!.epoch } satisfies HandoffRecord)]));
  if (next === undefined && (next = withMoveSyncing(config, target))) why = 'rebalance: the target\'s members sync into the hash slots they lack';
  if (next !== undefined) {
    const wrote = await writeConfig(client, keys, next, modRevision, ctx.leaseId, [], unchanged, puts);
    if (wrote) logger.warn({ epoch: next.epoch, toMove: slotsToMove(next, target), handedOver: [...puts.keys()].map((key) => key.slice(keys.handoff.length)) }, `controller: ${why}`);
    return true; // written or not: look again
  }

  // Nothing to write: ask the primaries whose leaving hash slots are all copied to quiesce (an unreadable record is replaced).
  const due = handoffsDue(config, target, view.copied).filter((name) => {
    const record = handoffs.get(name)?.record;
    return record === undefined || record.phase === 'moved';
  });
  if (due.length === 0) return false;
  // One transaction, conditioned on the target as read, which it puts again (the same value, a new revision):
  // a kvctl --cancel that read the records before this one fails on the target, and reads again.
  const record = JSON.stringify({ since: new Date().toISOString(), phase: 'quiesce' } satisfies HandoffRecord);
  let txn = client.if(keys.target, 'Mod', '==', view.target.mod_revision).and(keys.controller, 'Lease', '==', ctx.leaseId);
  for (const name of due) {
    const held = handoffs.get(name);
    txn = held === undefined ? txn.and(keys.handoffKey(name), 'Create', '==', 0) : txn.and(keys.handoffKey(name), 'Mod', '==', held.kv.mod_revision);
  }
  const put = await txn.then(client.put(keys.target).value(view.target.value), ...due.map((name) => client.put(keys.handoffKey(name)).value(record))).commit();
  if (put.succeeded) logger.warn({ members: due }, 'rebalance: the hash slots these primaries give away are copied; they stop granting read leases until they move');
  return true;
}

/**
 * With <prefix>/auto-rebalance (kvctl rebalance --auto on), on a frozen cluster with repair idle
 * (the caller's part): live members that hold no hash slot and are not being drained (joined, or
 * back after a drain) get their share by a rebalance the controller starts itself, as kvctl
 * rebalance would, unless members that are down alone hold hash slots it would move. Whether it
 * wrote the target.
 */
export async function rebalanceJoined(ctx: RebalanceContext, config: ClusterConfig, modRevision: string, live: readonly PlacedMember[], draining: ReadonlySet<string>): Promise<boolean> {
  const { client, keys, logger } = ctx;
  const held = new Set(config.slots.flatMap((range) => [...range.replicas, ...range.syncing].map((i) => config.members[i]!)));
  const staying = live.filter((member) => !draining.has(member.name));
  const joined = staying.filter((member) => !held.has(member.name)).map((member) => member.name);
  if (joined.length === 0 || (await client.get(keys.autoRebalance).string()) === null) return false;
  const target = rebalanceTarget(config, staying);
  if (target === undefined || deadHolders(config, target, new Set(live.map((member) => member.name))).length > 0) return false;
  const put = await client.if(keys.target, 'Create', '==', 0).and(keys.config, 'Mod', '==', modRevision).and(keys.controller, 'Lease', '==', ctx.leaseId).then(client.put(keys.target).value(encodeClusterConfig(target))).commit();
  if (put.succeeded) logger.warn({ joined, toMove: slotsToMove(config, target) }, 'rebalance: started by the controller: members joined the frozen cluster (kvctl rebalance --auto off stops this)');
  return true;
}

/**
 * The target goes, with the records `open` (each as read), while this member is the controller;
 * `freeze`: placement freezes too (a give-up: repair then drops the copies left unfinished, and
 * the controller starts no rebalance by itself). Whether it went.
 */
async function removeTarget(ctx: RebalanceContext, view: RebalanceView, open: IKeyValue[], freeze = false): Promise<boolean> {
  const { client, keys } = ctx;
  let txn = client.if(keys.target, 'Mod', '==', view.target.mod_revision).and(keys.controller, 'Lease', '==', ctx.leaseId);
  for (const kv of open) txn = txn.and(kv.key.toString(), 'Mod', '==', kv.mod_revision);
  const frozen = freeze ? [client.put(keys.frozen).value(frozenRecord('rebalance given up', view.config.epoch))] : [];
  return (await txn.then(client.delete().key(keys.target), client.delete().key(keys.copyRate), ...open.map((kv) => client.delete().key(kv.key.toString())), ...frozen).commit()).succeeded;
}

/**
 * With no rebalance pending, a handoff record not yet `moved` has no purpose (a target that went
 * without it: a cancel racing the request, or a give-up): it goes, and its member grants leases
 * again. Nothing moved away from it under that record: that takes the transaction that sets `moved`.
 */
export async function clearHandoffs(ctx: RebalanceContext): Promise<void> {
  const { client, keys, logger } = ctx;
  const open = [...(await readHandoffs(client, keys)).values()].filter((h) => h.record?.phase !== 'moved');
  for (const { kv } of open) {
    const gone = await client.if(keys.target, 'Create', '==', 0).and(kv.key.toString(), 'Mod', '==', kv.mod_revision).and(keys.controller, 'Lease', '==', ctx.leaseId).then(client.delete().key(kv.key.toString())).commit();
    if (gone.succeeded) logger.warn({ member: kv.key.toString().slice(keys.handoff.length) }, 'rebalance: no rebalance pending: a member left quiesced grants read leases again');
  }
}

interface Handoff {
  kv: IKeyValue;
  /** undefined: unreadable (the member treats it as `quiesce`). */
  record: HandoffRecord | undefined;
}

async function readHandoffs(client: Etcd3, keys: ReturnType<typeof etcdKeys>): Promise<Map<string, Handoff>> {
  const read = await client.getAll().prefix(keys.handoff).exec();
  return new Map(read.kvs.map((kv) => [kv.key.toString().slice(keys.handoff.length), { kv, record: parseHandoffRecord(kv.value.toString()) }]));
}

/**
 * Gives the target up: it goes, and so do the handoff records not yet `moved` (their members grant
 * leases again: nothing moved away from them), each conditioned on its revision as read, and
 * placement freezes: repair's rule drops the members syncing beyond --replicas (withSynced).
 */
async function giveUp(ctx: RebalanceContext, view: RebalanceView, why: string): Promise<boolean> {
  const open = [...(await readHandoffs(ctx.client, ctx.keys)).values()].filter((h) => h.record?.phase !== 'moved').map((h) => h.kv);
  if (await removeTarget(ctx, view, open, true)) ctx.logger.error({ epoch: view.config.epoch }, `rebalance: given up: ${why}; hash slots already moved stay moved (kvctl rebalance starts again)`);
  return true;
}
