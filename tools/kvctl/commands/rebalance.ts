// rebalance: moves a replicated cluster to the placement its live members would
// have if placed afresh (docs/cluster.md, "Rebalancing"): after a member joined,
// it takes its share. It freezes placement (from then on members that join get
// hash slots only this way) and writes <prefix>/target, and the controller has the
// hash slots copied (repair's copier), the primaries that give some away
// quiesced, and the copies made replicas (server/replication/rebalance*.ts).
// --dry-run prints the moves and writes nothing; --wait prints progress until
// the target is reached, with the copiers' live progress and an ETA; --cancel
// takes the target back (what moved stays moved). --max-mbps caps each
// copying member's rate (<prefix>/copy-rate, gone with the target), for a new
// rebalance or the one in progress. --by bytes evens out the bytes members hold
// instead of their hash slot counts (protocol/balance-by-bytes.ts), from the
// load records the members put (server/replication/slot-load.ts).
import type { Etcd3 } from 'etcd3';

import { SLOT_COUNT } from '../../../client/index.js';
import type { PlacedMember } from '../../../protocol/hash-slots.js';
import { UsageError, formatBytes } from '../../../protocol/operator-input.js';
import { encodeClusterConfig } from '../../../protocol/config-codec.js';
import { type ClusterConfig, type CopyRateRecord, etcdKeys, frozenRecord, openEtcd, parseClusterConfig, parseHandoffRecord, parseLoadRecord, underReplicatedSlots } from '../../../protocol/registry.js';
import { balanceByBytes, bytesHeld } from '../../../protocol/balance-by-bytes.js';
import { deadHolders, rebalanceTarget, slotReplicaNames, slotsToMove } from '../../../protocol/slot-table.js';
import type { CtlArgs, EtcdTarget } from '../args.js';
import { CopyWatch } from '../copy-progress.js';
import { liveMembers, readClusterConfig } from '../etcd.js';
import { rateText } from '../format.js';
import type { Io } from '../io.js';

/** How often --wait looks at the config. */
const POLL_MS = 500;
/** --wait prints a line per change, and at least this often while a copy runs. */
const PROGRESS_EVERY_MS = 5000;
/** --by bytes: how far above the mean a member may stay, without --tolerance. */
const DEFAULT_TOLERANCE = 0.05;

type Keys = ReturnType<typeof etcdKeys>;

export async function rebalance(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  if (target.kind !== 'etcd') throw new UsageError('rebalance works on an etcd cluster: give --etcd (a --servers list cannot move hash slots: its map is the list you pass)');
  // Options that do not go together are refused before etcd is dialed.
  if (args.auto !== undefined && (args.dryRun || args.cancel || args.wait || args.maxBytesPerSecond !== undefined || args.by !== undefined || args.tolerance !== undefined)) {
    throw new UsageError('--auto is given alone: it only says whether the controller starts a rebalance when a member joins');
  }
  if (args.cancel && (args.dryRun || args.wait || args.maxBytesPerSecond !== undefined || args.by !== undefined || args.tolerance !== undefined)) throw new UsageError('--cancel takes no other rebalance option but --json');
  if (args.maxBytesPerSecond !== undefined && args.dryRun) throw new UsageError('--max-mbps and --dry-run exclude each other: a dry run writes nothing');
  if (args.tolerance !== undefined && args.by !== 'bytes') throw new UsageError('--tolerance goes with --by bytes');
  const etcd = openEtcd(target.hosts, args.timeoutMs);
  try {
    const keys = etcdKeys(target.prefix);
    const config = await readClusterConfig(etcd, target);
    if (args.auto !== undefined) return await setAuto(etcd, keys, args, io);
    if (args.cancel) return await cancel(etcd, keys, args, io);
    if (config === undefined) throw new Error('this cluster has no config yet: no member has registered (docs/cluster.md)');
    const pending = await etcd.get(keys.target).string();
    if (pending !== null) {
      if (args.by === 'bytes') throw new Error('a rebalance is in progress already: --by bytes plans a new one (kvctl rebalance --wait follows it, --cancel takes it back)');
      if (args.dryRun) {
        const plan = describe(config, parseClusterConfig(pending));
        io.stdout(args.json ? JSON.stringify({ dryRun: true, inProgress: true, ...(plan ?? { moves: 0, members: {} }) }) + '\n' : `${plan?.text ?? 'every hash slot has moved; '}(a rebalance is in progress: nothing written)\n`);
        return;
      }
      if (args.maxBytesPerSecond !== undefined) {
        // The rate of the rebalance in progress, as long as it is the one read.
        const set = await etcd.if(keys.target, 'Value', '==', pending).then(rateRecord(etcd, keys, args.maxBytesPerSecond)).commit();
        if (!set.succeeded) throw new Error('the rebalance ended or changed meanwhile: run it again');
        if (!args.wait) {
          io.stdout(args.json ? JSON.stringify({ maxBytesPerSecond: args.maxBytesPerSecond }) + '\n' : `the rebalance in progress copies at ${rateText(args.maxBytesPerSecond)} per copying member\n`);
          return;
        }
      }
      if (!args.wait) throw new Error('a rebalance is in progress already: kvctl rebalance --wait follows it, --max-mbps changes its rate, --cancel takes it back');
      return await follow(args, io, etcd, keys, pending);
    }
    const draining = (await etcd.getAll().prefix(keys.drain).keys()).map((key) => key.slice(keys.drain.length));
    if (draining.length > 0) throw new Error(`${draining.join(', ')} ${draining.length === 1 ? 'is' : 'are'} being drained: rebalance once the drain is done (or cancelled)`);
    const short = underReplicatedSlots(config);
    const syncing = config.slots.reduce((n, r) => (r.syncing.length > 0 ? n + r.to - r.from + 1 : n), 0);
    if (short > 0 || syncing > 0) throw new Error(`repair is not done (${short} hash slots short of replicas, ${syncing} with members syncing into them): rebalance once it is (kvctl layout shows it)`);
    const live = await liveMembers(etcd, args.target as EtcdTarget, config.replicas);
    const slotBytes = args.by === 'bytes' ? await loadOf(etcd, keys, config, live) : undefined;
    const next = slotBytes ? balanceByBytes(config, live, slotBytes, args.tolerance ?? DEFAULT_TOLERANCE) : rebalanceTarget(config, live);
    // With --replicas 1 a member that is down alone holds its hash slots: nothing can copy them.
    const stuck = next ? deadHolders(config, next, new Set(live.map((m) => m.name))) : [];
    if (stuck.length > 0) throw new Error(`${stuck.join(', ')} ${stuck.length === 1 ? 'is' : 'are'} down and alone hold${stuck.length === 1 ? 's' : ''} hash slots that would move: start ${stuck.length === 1 ? 'it' : 'them'} again (or kvctl forget ${stuck.length === 1 ? 'it' : 'them'}, losing ${stuck.length === 1 ? 'its' : 'their'} keys) before rebalancing`);
    const plan = next && describe(config, next, slotBytes);
    if (next === undefined || plan === undefined) {
      if (!args.dryRun) await freeze(etcd, keys);
      const balanced = slotBytes ? `every member holds within ${Math.round((args.tolerance ?? DEFAULT_TOLERANCE) * 100)} % of the mean bytes, or no hash slot can move to even them out more` : 'every hash slot already has the replicas its live members would be given';
      io.stdout(args.json ? JSON.stringify({ moves: 0, members: {} }) + '\n' : `balanced: ${balanced}${args.dryRun ? '' : '; placement is frozen: a member that joins gets hash slots by kvctl rebalance'}\n`);
      return;
    }
    if (args.dryRun) {
      io.stdout(args.json ? JSON.stringify({ dryRun: true, ...plan }) + '\n' : `${plan.text}(dry run: nothing written)\n`);
      return;
    }
    // Placement freezes with it: the controller must not place members directly from then on (without their keys).
    const rate = args.maxBytesPerSecond ? [rateRecord(etcd, keys, args.maxBytesPerSecond)] : [etcd.delete().key(keys.copyRate)];
    const put = await etcd.if(keys.target, 'Create', '==', 0).and(keys.config, 'Mod', '==', await configRevision(etcd, keys)).then(etcd.put(keys.target).value(encodeClusterConfig(next)), freezeOp(etcd, keys), ...rate).commit();
    if (!put.succeeded) {
      // The controller may have started the same rebalance itself (a member joined): follow that one.
      const started = await etcd.get(keys.target).string();
      // A cap given applies to the rebalance that started meanwhile too.
      if (started !== null && args.maxBytesPerSecond !== undefined) await etcd.if(keys.target, 'Value', '==', started).then(rateRecord(etcd, keys, args.maxBytesPerSecond)).commit();
      if (started !== null && args.wait) return await follow(args, io, etcd, keys, started);
      throw new Error(started !== null ? 'a rebalance started meanwhile (a member joined): kvctl rebalance --wait follows it' : 'the cluster changed while the rebalance was being written: run it again');
    }
    if (!args.wait) {
      io.stdout(args.json ? JSON.stringify(plan) + '\n' : `${plan.text}rebalancing; kvctl rebalance --wait follows it, kvctl layout shows it\n`);
      return;
    }
    io.stderr(plan.text);
    await follow(args, io, etcd, keys, encodeClusterConfig(next));
  } finally {
    etcd.close();
  }
}

type Plan = { moves: number; members: Record<string, { held: [number, number]; primary: [number, number]; bytes?: [number, number] }>; text: string };

/** Per member: hash slots held (as a replica) and as primary, and with `slotBytes` the bytes held, now and after; the hash slots that move. */
function describe(config: ClusterConfig, next: ClusterConfig, slotBytes?: Float64Array): Plan | undefined {
  const moves = slotsToMove(config, next);
  if (moves === 0) return undefined;
  const members: Plan['members'] = {};
  const count = (names: string[][], after: 0 | 1) => {
    for (const list of names) {
      list.forEach((name, i) => {
        const m = (members[name] ??= { held: [0, 0], primary: [0, 0] });
        m.held[after]++;
        if (i === 0) m.primary[after]++;
      });
    }
  };
  count(slotReplicaNames(config).names, 0);
  count(slotReplicaNames(next).names, 1);
  if (slotBytes) {
    const [before, after] = [bytesHeld(config, slotBytes), bytesHeld(next, slotBytes)];
    for (const [name, m] of Object.entries(members)) m.bytes = [before.get(name) ?? 0, after.get(name) ?? 0];
  }
  const lines = Object.entries(members)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([name, m]) => `  ${name.padEnd(16)} holds ${String(m.held[0]).padStart(5)} -> ${String(m.held[1]).padStart(5)}   primary of ${String(m.primary[0]).padStart(5)} -> ${String(m.primary[1]).padStart(5)}${m.bytes ? `   ${formatBytes(m.bytes[0]).padStart(9)} -> ${formatBytes(m.bytes[1]).padStart(9)}` : ''}\n`);
  return { moves, members, text: `${moves} of ${SLOT_COUNT} hash slots change replicas:\n${lines.join('')}` };
}

/**
 * --by bytes: per hash slot, the bytes its replicas hold, from the members' load records (the
 * largest a replica reports). Every live member that holds hash slots must have put one.
 */
async function loadOf(etcd: Etcd3, keys: Keys, config: ClusterConfig, live: readonly PlacedMember[]): Promise<Float64Array> {
  const records = await etcd.getAll().prefix(keys.load).strings();
  const { names } = slotReplicaNames(config);
  const holders = new Set(names.flat());
  const slotBytes = new Float64Array(SLOT_COUNT);
  const missing: string[] = [];
  for (const { name } of live) {
    const text = records[keys.loadKey(name)];
    const record = text === undefined ? undefined : parseLoadRecord(text);
    if (record === undefined) {
      if (holders.has(name)) missing.push(name);
      continue;
    }
    // Only what a replica reports: a member may still hold, fenced, items of hash slots it gave away.
    record.slots.forEach((slot, i) => {
      if (names[slot]!.includes(name)) slotBytes[slot] = Math.max(slotBytes[slot]!, record.bytes[i]!);
    });
  }
  if (missing.length > 0) throw new Error(`no load record from ${missing.join(', ')} yet: a member puts one within seconds of starting (docs/cluster.md, "Rebalancing"); try again shortly`);
  return slotBytes;
}

/** The put that freezes placement (kvctl rebalance did it). */
function freezeOp(etcd: Etcd3, keys: Keys) {
  return etcd.put(keys.frozen).value(frozenRecord('rebalance'));
}

/** --auto on|off, alone: <prefix>/auto-rebalance present or not (the controller reads it: rebalance-round.ts). */
async function setAuto(etcd: Etcd3, keys: Keys, args: CtlArgs, io: Io): Promise<void> {
  // On freezes placement too: from then on a member that joins is never placed directly (without keys).
  if (args.auto) {
    await freeze(etcd, keys);
    await etcd.put(keys.autoRebalance).value(JSON.stringify({ since: new Date().toISOString() }));
  } else {
    await etcd.delete().key(keys.autoRebalance);
  }
  io.stdout(args.json ? JSON.stringify({ auto: args.auto }) + '\n' : args.auto ? 'automatic rebalancing on: placement is frozen, and a member that joins gets its share by a rebalance the controller starts\n' : 'automatic rebalancing off: a member that joins a frozen cluster waits for kvctl rebalance\n');
}

/** What <prefix>/copy-rate says for --max-mbps (0: no cap). */
function rateRecord(etcd: Etcd3, keys: Keys, bytesPerSecond: number) {
  return etcd.put(keys.copyRate).value(JSON.stringify({ bytesPerSecond, since: new Date().toISOString() } satisfies CopyRateRecord));
}

/** Freezes placement, if it is not frozen yet. */
async function freeze(etcd: Etcd3, keys: Keys): Promise<void> {
  await etcd.if(keys.frozen, 'Create', '==', 0).then(freezeOp(etcd, keys)).commit();
}

async function configRevision(etcd: Etcd3, keys: Keys): Promise<string> {
  return (await etcd.get(keys.config).exec()).kvs[0]?.mod_revision ?? '0';
}

/**
 * --cancel: deletes the target and the handoff records not yet `moved` (their members grant read
 * leases again: nothing moved away from them), and freezes placement (else the controller would
 * start the same rebalance again; repair then drops the copies not finished), in one transaction
 * on them as read: a controller that moved hash slots or asked for a quiesce meanwhile wins, and
 * kvctl says to cancel again.
 */
async function cancel(etcd: Etcd3, keys: Keys, args: CtlArgs, io: Io): Promise<void> {
  const stored = (await etcd.get(keys.target).exec()).kvs[0];
  if (stored === undefined) {
    io.stdout(args.json ? JSON.stringify({ cancelled: false }) + '\n' : 'no rebalance in progress\n');
    return;
  }
  const handoffs = (await etcd.getAll().prefix(keys.handoff).exec()).kvs.filter((kv) => parseHandoffRecord(kv.value.toString())?.phase !== 'moved');
  let txn = etcd.if(keys.target, 'Mod', '==', stored.mod_revision);
  for (const kv of handoffs) txn = txn.and(kv.key.toString(), 'Mod', '==', kv.mod_revision);
  // Automatic rebalancing goes too: the controller would start the same rebalance again at once.
  const auto = (await etcd.get(keys.autoRebalance).string()) !== null;
  const done = await txn.then(etcd.delete().key(keys.target), etcd.delete().key(keys.copyRate), etcd.delete().key(keys.autoRebalance), ...handoffs.map((kv) => etcd.delete().key(kv.key.toString())), freezeOp(etcd, keys)).commit();
  if (!done.succeeded) throw new Error('the rebalance moved on while being cancelled: cancel again');
  const config = await readClusterConfig(etcd, args.target as EtcdTarget);
  const left = config ? slotsToMove(config, parseClusterConfig(stored.value.toString())) : 0;
  io.stdout(args.json ? JSON.stringify({ cancelled: true, notMoved: left, ...(auto ? { auto: false } : {}) }) + '\n' : `rebalance cancelled; ${left} hash slots had not moved (those that had stay moved)${auto ? '; automatic rebalancing is off (kvctl rebalance --auto on turns it on again)' : ''}\n`);
}

/**
 * --wait: a progress line per change on stderr, until config has the target's replicas everywhere
 * (done), or the target goes or changes first (given up, cancelled, or replaced by another: exit 1).
 */
async function follow(args: CtlArgs, io: Io, etcd: Etcd3, keys: Keys, goalText: string): Promise<void> {
  const goal = parseClusterConfig(goalText);
  const started = performance.now();
  const copies = await CopyWatch.start(etcd, (args.target as EtcdTarget).prefix);
  let first: number | undefined;
  let last = '';
  let lastAt = 0;
  for (;;) {
    const config = await readClusterConfig(etcd, args.target as EtcdTarget);
    const left = config ? slotsToMove(config, goal) : SLOT_COUNT;
    first ??= left;
    const same = (await etcd.get(keys.target).string()) === goalText;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const copy = await copies.read();
    if (left === 0 || !same) {
      const copied = copy.copiedBytes;
      if (args.json) io.stdout(JSON.stringify({ done: left === 0, moved: first - left, left, copiedBytes: copied, seconds: Number(seconds) }) + '\n');
      else io.stdout(left === 0 ? `rebalanced: ${first} hash slots moved in ${seconds} s (${(copied / 1e6).toFixed(1)} MB copied)\n` : `rebalance given up, cancelled or replaced with ${left} hash slots not moved (the controller's log says why)\n`);
      if (left !== 0) throw new Error('rebalance not finished');
      return;
    }
    const handoffs = await etcd.getAll().prefix(keys.handoff).strings();
    const quiescing = Object.entries(handoffs).filter(([, v]) => parseHandoffRecord(v)?.phase !== 'moved').map(([k]) => k.slice(keys.handoff.length));
    const syncing = config ? config.slots.reduce((n, r) => (r.syncing.length > 0 ? n + r.to - r.from + 1 : n), 0) : 0;
    const line = `rebalance: ${left} of ${first} hash slots still to move, ${syncing} syncing, ${copy.text}${quiescing.length ? `, quiescing ${quiescing.join(', ')}` : ''} (config epoch ${config?.epoch ?? '-'})`;
    // A line per change of step, and one every few seconds while only the copy moves on.
    const step = `${left} ${syncing} ${quiescing.join()} ${config?.epoch}`;
    const now = performance.now();
    if (step !== last || (copy.keysLeft > 0 && now - lastAt > PROGRESS_EVERY_MS)) {
      io.stderr(`${line}, ${seconds} s\n`);
      last = step;
      lastAt = now;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
