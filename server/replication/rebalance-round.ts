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
// While a target is there the controller does nothing else (no repair, no
// placement); a member that joins meanwhile waits for the next rebalance.
import type { Etcd3, IKeyValue } from 'etcd3';
import type { Logger } from 'pino';

import { type ClusterConfig, type HandoffRecord, etcdKeys, parseClusterConfig, parseHandoffRecord } from '../../protocol/registry.js';
import { writeConfig } from './config-store.js';
import type { CopiedRange } from './placement.js';
import { handoffsDue, slotsToMove, withMoveSyncing, withMoved } from './rebalance.js';

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
  if (view.draining) return giveUp(ctx, view, 'a drain started');
  if (target.replicas !== config.replicas) return giveUp(ctx, view, `the target has --replicas ${target.replicas}, the cluster ${config.replicas}`);

  if (slotsToMove(config, target) === 0) {
    const done = await client.if(keys.target, 'Mod', '==', view.target.mod_revision).then(client.delete().key(keys.target)).commit();
    if (done.succeeded) logger.warn({ epoch: config.epoch, members: target.members }, 'rebalance: done: every hash slot has the target\'s replicas');
    return done.succeeded;
  }

  const handoffs = await readHandoffs(client, keys);
  const quiet = new Map([...handoffs].filter(([, h]) => h.record?.phase === 'quiet'));
  const moved = withMoved(config, target, view.copied, new Set(quiet.keys()));
  let next = moved?.config;
  let why = 'rebalance: hash slots whose copies are done have the target\'s replicas';
  // The quiet members whose primaries move say so in the same transaction: each grants leases again once it applied this config.
  const handedOver = (moved?.handedOver ?? []).map((name) => [keys.handoffKey(name), quiet.get(name)!] as const);
  const unchanged = new Map(handedOver.map(([key, h]) => [key, h.kv.mod_revision]));
  const puts = new Map(handedOver.map(([key, h]) => [key, JSON.stringify({ since: h.record!.since, phase: 'moved', epoch: next!.epoch } satisfies HandoffRecord)]));
  if (next === undefined && (next = withMoveSyncing(config, target))) why = 'rebalance: the target\'s members sync into the hash slots they lack';
  if (next !== undefined) {
    const wrote = await writeConfig(client, keys, next, modRevision, ctx.leaseId, [], unchanged, puts);
    if (wrote) logger.warn({ epoch: next.epoch, toMove: slotsToMove(next, target), handedOver: [...puts.keys()].map((key) => key.slice(keys.handoff.length)) }, `controller: ${why}`);
    return true; // written or not: look again
  }

  // Nothing to write: ask the primaries whose leaving hash slots are all copied to quiesce.
  for (const name of handoffsDue(config, target, view.copied)) {
    const held = handoffs.get(name);
    if (held !== undefined && held.record?.phase !== 'moved') continue; // asked already
    const record: HandoffRecord = { since: new Date().toISOString(), phase: 'quiesce' };
    const key = keys.handoffKey(name);
    const txn = held === undefined ? client.if(key, 'Create', '==', 0) : client.if(key, 'Mod', '==', held.kv.mod_revision);
    const put = await txn.then(client.put(key).value(JSON.stringify(record))).commit();
    if (put.succeeded) logger.warn({ member: name }, 'rebalance: the hash slots this primary gives away are copied; it stops granting read leases until they move');
  }
  return false;
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
 * leases again: nothing moved away from them), each conditioned on its revision as read. The
 * members syncing for it stay until repair's rule drops those beyond --replicas (withSynced).
 */
async function giveUp(ctx: RebalanceContext, view: RebalanceView, why: string): Promise<boolean> {
  const { client, keys, logger } = ctx;
  const handoffs = await readHandoffs(client, keys);
  const pending = [...handoffs].filter(([, h]) => h.record?.phase !== 'moved');
  let txn = client.if(keys.target, 'Mod', '==', view.target.mod_revision);
  for (const [, h] of pending) txn = txn.and(h.kv.key.toString(), 'Mod', '==', h.kv.mod_revision);
  const gone = await txn.then(client.delete().key(keys.target), ...pending.map(([, h]) => client.delete().key(h.kv.key.toString()))).commit();
  if (gone.succeeded) logger.error({ epoch: view.config.epoch }, `rebalance: given up: ${why}; hash slots already moved stay moved (kvctl rebalance starts again)`);
  return true;
}
