// layout: the cluster map as every client computes it (members, state, hash
// slots owned); with a key, its hash slot and the member that owns it. On an
// etcd cluster whose controller has written a config, also its ranges of hash
// slots: primary, backups and epoch (clients route by it with --replicas > 1;
// docs/cluster.md), and what a failover left: hash slots short of replicas and
// members failed over; and whether placement is frozen, why, and who waits for
// kvctl rebalance because of it.
import type { Etcd3 } from 'etcd3';

import { SLOT_COUNT, keySlot } from '../../../client/index.js';
import { type ClusterConfig, etcdKeys, openEtcd, parseFrozenRecord, removedMembers, slotsHeld, underReplicatedSlots } from '../../../protocol/registry.js';
import type { CtlArgs, EtcdTarget } from '../args.js';
import { withClient } from '../connect.js';
import { liveMembers, readClusterConfig } from '../etcd.js';
import { configRanges, configTable, layoutEntries, layoutTable, oneLine } from '../format.js';
import type { Io } from '../io.js';

export async function layout(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key;
  const { members, owner } = await withClient(
    args,
    io,
    async (kv) => ({ members: layoutEntries(kv.layout()), owner: key === undefined ? undefined : kv.memberFor(key) }),
    false, // a cluster that is down still has a map
  );
  const { config, frozen, auto, waiting = [] } = (await readConfig(args, io)) ?? {};
  const slot = key === undefined ? undefined : keySlot(Buffer.from(key, 'utf8'));
  const ranges = config && configRanges(config);
  const range = slot === undefined ? undefined : ranges?.find((r) => r.from <= slot && slot <= r.to);
  if (args.json) {
    const configJson = config && { epoch: config.epoch, replicas: config.replicas, underReplicated: underReplicatedSlots(config), syncing: syncingSlots(config), failedOver: removedMembers(config), frozen: frozen ? { ...frozen, autoRebalance: auto === true } : null, waiting, ranges };
    const keyJson = key === undefined ? {} : { key: { key, slot, member: owner ?? null, ...(range ? { replicas: [range.primary, ...range.backups], epoch: range.epoch } : {}) } };
    io.stdout(JSON.stringify({ slots: SLOT_COUNT, members, ...(configJson ? { config: configJson } : {}), ...keyJson }) + '\n');
    return;
  }
  if (key === undefined) {
    io.stdout(layoutTable(members) + `${SLOT_COUNT} slots over ${members.length} member${members.length === 1 ? '' : 's'}\n`);
    if (config) io.stdout(`config epoch ${config.epoch}, replicas ${config.replicas}, ${ranges!.length} range${ranges!.length === 1 ? '' : 's'}:\n` + configTable(ranges!) + health(config) + frozenText(frozen, waiting, auto === true));
    return;
  }
  const m = members.find((entry) => entry.name === owner);
  const detail = m && (m.url === m.name ? m.state : `${m.url ?? 'no address'}, ${m.state}`);
  const placed = range ? `; config: primary ${range.primary ?? '-'}, backups ${range.backups.join(', ') || '-'}, epoch ${range.epoch}` : '';
  io.stdout(m ? `${key}: slot ${slot}, member ${m.name} (${detail})${placed}\n` : `${key}: slot ${slot}, no member (the cluster is empty)${placed}\n`);
}

/** What a failover left behind: hash slots short of replicas, copies under way, members holding none (nothing when all is well). */
function health(config: ClusterConfig): string {
  const under = underReplicatedSlots(config);
  const syncing = syncingSlots(config);
  const removed = removedMembers(config);
  if (config.replicas === 1 || (under === 0 && removed.length === 0)) return '';
  return (
    `${under} hash slot${under === 1 ? '' : 's'} with fewer than ${config.replicas} replicas` +
    (syncing > 0 ? `, ${syncing} of them being copied to the members syncing into them (repair)` : '') +
    (removed.length > 0 ? `; failed over, holding none: ${removed.join(', ')} (a repair target once back)` : '') +
    '\n'
  );
}

type Frozen = ReturnType<typeof parseFrozenRecord>;

const FROZEN_BECAUSE: Record<Frozen['reason'], (members: string) => string> = {
  failover: (members) => `a failover of ${members}`,
  drain: (members) => `a drain of ${members}`,
  loaded: (members) => `a member joined while ${members} may have held keys`,
  rebalance: () => 'kvctl rebalance',
  'rebalance given up': () => 'a rebalance was given up',
  unknown: () => 'a record this kvctl cannot read',
};

/** Whether placement is frozen and why; the live members it leaves without hash slots until kvctl rebalance. */
function frozenText(frozen: Frozen | undefined, waiting: string[], auto: boolean): string {
  if (frozen === undefined) return '';
  const because = FROZEN_BECAUSE[frozen.reason](frozen.members.join(', ') || 'members');
  const line = `placement frozen${frozen.since ? ` since ${frozen.since}` : ''} (${because}): hash slots move only by copying (kvctl rebalance, drain, repair)\n`;
  if (waiting.length === 0) return line;
  return line + `joined, holding no hash slot: ${waiting.join(', ')} (${auto ? 'the rebalance the controller starts (--auto on)' : 'kvctl rebalance'} moves their share to them)\n`;
}

/** Hash slots with members syncing into them: their primaries are copying (repair). */
function syncingSlots(config: ClusterConfig): number {
  return config.slots.reduce((n, r) => (r.syncing.length > 0 ? n + r.to - r.from + 1 : n), 0);
}

/**
 * The config when the target is etcd and one is written; with placement frozen, the record and the members that
 * wait for a rebalance (those a fresh placement would place, kvctl rebalance's rule, that hold no hash slot and
 * are not being drained). What cannot be read is warned about, not fatal.
 */
async function readConfig(args: CtlArgs, io: Io): Promise<{ config?: ClusterConfig; frozen?: Frozen; auto?: boolean; waiting?: string[] } | undefined> {
  const { target } = args;
  if (target.kind !== 'etcd') return undefined;
  const etcd = openEtcd(target.hosts, args.timeoutMs);
  try {
    const config = await readClusterConfig(etcd, target);
    if (!config) return {};
    const frozen = await readFrozen(etcd, target, config).catch((error: Error) => {
      io.stderr(`kvctl: warning: placement's frozen state: ${oneLine(error.message)}\n`);
      return {};
    });
    return { config, ...frozen };
  } catch (error) {
    io.stderr(`kvctl: warning: ${oneLine((error as Error).message)}\n`);
    return undefined;
  } finally {
    etcd.close();
  }
}

/** Placement's frozen record, if any, with whether --auto is on and the members waiting for a rebalance. */
async function readFrozen(etcd: Etcd3, target: EtcdTarget, config: ClusterConfig): Promise<{ frozen?: Frozen; auto?: boolean; waiting?: string[] }> {
  const keys = etcdKeys(target.prefix);
  const text = await etcd.get(keys.frozen).string();
  if (text === null) return {};
  const auto = (await etcd.get(keys.autoRebalance).string()) !== null;
  const draining = Object.keys(await etcd.getAll().prefix(keys.drainKey('')).strings()).map((key) => key.slice(keys.drainKey('').length));
  const live = await liveMembers(etcd, target, config.replicas);
  const waiting = live.map((m) => m.name).filter((name) => slotsHeld(config, name) === 0 && !draining.includes(name));
  return { frozen: parseFrozenRecord(text), auto, waiting };
}
