// drain: asks the controller to move every hash slot of a member to other
// members (docs/cluster.md, "Draining a member"): it writes
// <prefix>/drain/<name>, and the controller has the hash slots copied (repair),
// the member quiesced, and then the copies made replicas in its place. With
// --wait it prints progress until the member holds no hash slot; --cancel
// removes the record (what has moved stays moved). --max-mbps caps the rate of
// each copying member while the drain runs (kept in the record: it goes with
// it), for a new drain or the one in progress.
import { SLOT_COUNT } from '../../../client/index.js';
import { UsageError } from '../../../protocol/operator-input.js';
import { type DrainRecord, checkMemberName, etcdKeys, openEtcd, parseDrainRecord, slotsHeld } from '../../../protocol/registry.js';
import type { CtlArgs } from '../args.js';
import { CopyWatch } from '../copy-progress.js';
import { readCluster, readClusterConfig } from '../etcd.js';
import { rateText } from '../format.js';
import { type Io, NotFound } from '../io.js';

/** How often --wait looks at the config. */
const POLL_MS = 500;
/** --wait prints a line per change, and at least this often while a copy runs. */
const PROGRESS_EVERY_MS = 5000;

export async function drain(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  if (target.kind !== 'etcd') throw new UsageError('drain works on an etcd cluster: give --etcd (a --servers list cannot move hash slots)');
  let name: string;
  try {
    name = checkMemberName(args.name!);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (args.cancel && args.maxBytesPerSecond !== undefined) throw new UsageError('--max-mbps and --cancel exclude each other');
  const etcd = openEtcd(target.hosts, args.timeoutMs);
  try {
    const keys = etcdKeys(target.prefix);
    const cluster = await readCluster(etcd, target);
    if (!cluster.members.includes(name)) throw new NotFound(`no member '${name}' under etcd prefix ${target.prefix} (members: ${cluster.members.join(', ') || 'none'})`);
    const config = await readClusterConfig(etcd, target);
    if (args.cancel) {
      await cancel(etcd, keys, name, args, io);
      return;
    }
    if (config === undefined) throw new Error('this cluster has no config yet: no member has registered (docs/cluster.md)');
    // With --replicas 1 its keys are in its region only: nothing can copy them while it is down.
    if (config.replicas === 1 && !cluster.alive.has(name)) throw new Error(`${name} is down: with --replicas 1 its keys are only in its region file, and nothing can copy them until it serves again (start it, then drain it; or kvctl forget it, losing its keys)`);
    const stored = (await etcd.get(keys.drainKey(name)).exec()).kvs[0];
    const existing = stored?.value.toString();
    const draining = new Set((await etcd.getAll().prefix(keys.drain).keys()).map((key) => key.slice(keys.drain.length)));
    draining.add(name);
    const staying = [...cluster.alive.keys()].filter((member) => !draining.has(member));
    if (existing === undefined && staying.length < config.replicas) {
      throw new Error(`draining ${name} would leave ${staying.length} live member${staying.length === 1 ? '' : 's'} (${staying.join(', ') || 'none'}) for --replicas ${config.replicas}: start another member first`);
    }
    if (existing === undefined) {
      const record: DrainRecord = { since: new Date().toISOString(), phase: 'copying', ...capOf(args.maxBytesPerSecond) };
      const put = await etcd.if(keys.drainKey(name), 'Create', '==', 0).then(etcd.put(keys.drainKey(name)).value(JSON.stringify(record))).commit();
      if (!put.succeeded) throw new Error(`'${name}' changed while the drain was being written: look again with kvctl layout`);
    } else if (args.maxBytesPerSecond !== undefined) {
      // A new rate for the drain in progress, on the record as read: a phase the controller or the member wrote meanwhile wins.
      const { maxBytesPerSecond: _old, ...record } = parseDrainRecord(existing) ?? { since: new Date().toISOString(), phase: 'copying' as const };
      const put = await etcd.if(keys.drainKey(name), 'Mod', '==', stored!.mod_revision).then(etcd.put(keys.drainKey(name)).value(JSON.stringify({ ...record, ...capOf(args.maxBytesPerSecond) }))).commit();
      if (!put.succeeded) throw new Error(`the drain of ${name} moved on while its rate was being written: run it again`);
    }
    const held = slotsHeld(config, name);
    if (!args.wait) {
      const phase = existing === undefined ? 'copying' : (parseDrainRecord(existing)?.phase ?? 'copying');
      const rate = args.maxBytesPerSecond === undefined ? '' : `; each member copying for it: ${rateText(args.maxBytesPerSecond)}`;
      const json = { member: name, phase, slotsHeld: held, ...(args.maxBytesPerSecond !== undefined ? { maxBytesPerSecond: args.maxBytesPerSecond } : {}) };
      io.stdout(args.json ? JSON.stringify(json) + '\n' : `${existing === undefined ? 'draining' : 'already draining'} ${name}: it holds ${held} of ${SLOT_COUNT} hash slots (phase ${phase})${rate}; kvctl drain ${name} --wait follows it, kvctl layout shows it\n`);
      return;
    }
    await follow(args, io, etcd, name, held);
  } finally {
    etcd.close();
  }
}

/**
 * --cancel: deletes the drain record, in one transaction with the record and config as read: a
 * controller that gave the member's hash slots away meanwhile wins, and the member (which grants
 * read leases again once its record goes) is then drained for good: refused.
 */
async function cancel(etcd: ReturnType<typeof openEtcd>, keys: ReturnType<typeof etcdKeys>, name: string, args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  if (target.kind !== 'etcd') return;
  const [record, stored] = await Promise.all([etcd.get(keys.drainKey(name)).exec(), etcd.get(keys.config).exec()]);
  const drainKv = record.kvs[0];
  const configKv = stored.kvs[0];
  const config = await readClusterConfig(etcd, target);
  const held = slotsHeld(config, name);
  if (drainKv === undefined) {
    io.stdout(args.json ? JSON.stringify({ member: name, cancelled: false, slotsHeld: held }) + '\n' : `${name} was not being drained\n`);
    return;
  }
  if (held === 0 && parseDrainRecord(drainKv.value.toString())?.phase === 'quiet') {
    throw new Error(`${name} is drained already (it holds no hash slot): its drain record goes once it is stopped; started again, it is a member like any other`);
  }
  let txn = etcd.if(keys.drainKey(name), 'Mod', '==', drainKv.mod_revision);
  txn = configKv ? txn.and(keys.config, 'Mod', '==', configKv.mod_revision) : txn.and(keys.config, 'Create', '==', 0);
  const deleted = await txn.then(etcd.delete().key(keys.drainKey(name))).commit();
  if (!deleted.succeeded) throw new Error(`the drain of ${name} moved on while being cancelled: look again (kvctl layout), and cancel again if it still holds hash slots`);
  io.stdout(args.json ? JSON.stringify({ member: name, cancelled: true, slotsHeld: held }) + '\n' : `drain of ${name} cancelled; it holds ${held} hash slots (those already moved stay moved)\n`);
}

/** --wait: one progress line per change on stderr, until `name` holds no hash slot (or its drain record goes). */
async function follow(args: CtlArgs, io: Io, etcd: ReturnType<typeof openEtcd>, name: string, first: number): Promise<void> {
  const { target } = args;
  if (target.kind !== 'etcd') return;
  const key = etcdKeys(target.prefix).drainKey(name);
  const started = performance.now();
  const copies = await CopyWatch.start(etcd, target.prefix);
  let last = '';
  let lastAt = 0;
  for (;;) {
    const config = await readClusterConfig(etcd, target);
    const held = slotsHeld(config, name);
    const text = await etcd.get(key).string();
    const phase = text === null ? 'cancelled' : (parseDrainRecord(text)?.phase ?? 'copying');
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    if (held === 0 || text === null) {
      if (args.json) io.stdout(JSON.stringify({ member: name, phase: held === 0 ? 'drained' : phase, slotsHeld: held, moved: first - held, seconds: Number(seconds) }) + '\n');
      else io.stdout(held === 0 ? `${name} is drained: it holds no hash slot (${first} moved in ${seconds} s); it can be stopped\n` : `drain of ${name} was cancelled; it still holds ${held} hash slots\n`);
      if (held !== 0) throw new Error(`drain of ${name} cancelled`);
      return;
    }
    const copy = await copies.read();
    // A line per change of phase or of hash slots held, and one every few seconds while only the copy moves on.
    const step = `${phase}, ${held} of ${first} hash slots still held`;
    const now = performance.now();
    if (step !== last || (copy.keysLeft > 0 && now - lastAt > PROGRESS_EVERY_MS)) {
      io.stderr(`drain ${name}: ${step}, ${copy.text} (config epoch ${config?.epoch ?? '-'}), ${seconds} s\n`);
      last = step;
      lastAt = now;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** The drain record's cap for --max-mbps (none for 0 or not given: the members' own --repair-rate). */
function capOf(bytesPerSecond: number | undefined): { maxBytesPerSecond?: number } {
  return bytesPerSecond ? { maxBytesPerSecond: bytesPerSecond } : {};
}

