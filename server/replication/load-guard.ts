// The controller's check before a direct placement (placement not frozen yet):
// a hash slot whose replicas change goes to members that do not hold its keys,
// so if its holders hold keys, the placement would hide them (a member joining
// a loaded cluster, issue 18's headline defect). Then placement freezes
// instead (<prefix>/frozen, `loaded: true`), and the member joins by a
// rebalance, copied with its keys. The holders' load records say whether they
// hold keys (slot-load.ts); a holder that is down counts as holding some; a
// member kvctl forget removed does not count (its keys are given up). A live
// holder without a record (just started, or of a version that puts none)
// holds the placement back, looked at every second, for at most a TTL: then
// it counts as holding keys, which is the safe side. A record says `granted`
// before its member answers its first block grant (slot-load.ts), and the
// placement is written only if the holders' records are still the ones read
// here: a member whose first write came after this check either changed its
// record first (the write fails, the next round sees it) or applies the new
// config before it grants (first-grant.ts), so no key lands in a hash slot the
// placement moved without it.
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';

import { type ClusterConfig, etcdKeys, frozenRecord, parseLoadRecord } from '../../protocol/registry.js';
import { sameList, slotReplicaNames } from '../../protocol/slot-table.js';
import { SLOT_COUNT } from '../../protocol/hash-slots.js';

/** How soon the controller looks again while a holder's record is awaited. */
const AWAIT_RECORD_MS = 1000;

export interface LoadGuardOptions {
  client: Etcd3;
  prefix: string;
  logger: Logger;
  /** How long a missing record holds the placement back before its member counts as holding keys. */
  ttlMs: number;
  /** Runs another controller round. */
  poke: () => void;
}

export class LoadGuard {
  /** Per member whose record is awaited: since when, and when a round last found it missing (this process's clock). */
  private readonly awaiting = new Map<string, { since: number; seen: number }>();

  constructor(private readonly options: LoadGuardOptions) {}

  /**
   * Whether the round stops here, without placing `next` (`hold`: placement frozen, or a record awaited), and
   * if not, the holders' load records as read (key → mod_revision): `next` is written only if they are unchanged.
   */
  async check(config: ClusterConfig, next: ClusterConfig, alive: ReadonlySet<string>, registered: ReadonlySet<string>): Promise<{ hold: true } | { hold: false; unchanged: ReadonlyMap<string, string> }> {
    const { client, prefix, logger } = this.options;
    const holders = holdersOfChanged(config, next).filter((name) => registered.has(name));
    const found = await holdersLoad(client, prefix, holders, alive);
    const now = performance.now();
    // A wait counts from when a member went missing in rounds that follow each other, not from an old episode.
    for (const [name, wait] of this.awaiting) if (!found.missing.includes(name) || now - wait.seen > 5 * AWAIT_RECORD_MS) this.awaiting.delete(name);
    if (found.load === 'empty') return { hold: false, unchanged: found.revisions };
    if (found.load === 'unknown') {
      const fresh = found.missing.filter((name) => !this.awaiting.has(name));
      if (fresh.length > 0) logger.warn({ members: fresh }, 'controller: waiting for the load records of members a placement would change hash slots of (they may hold keys)');
      for (const name of found.missing) this.awaiting.set(name, { since: this.awaiting.get(name)?.since ?? now, seen: now });
      if (found.missing.every((name) => now - this.awaiting.get(name)!.since < this.options.ttlMs)) {
        setTimeout(() => this.options.poke(), AWAIT_RECORD_MS).unref();
        return { hold: true };
      }
    }
    for (const name of found.missing) this.awaiting.delete(name);
    const keys = etcdKeys(prefix);
    const mayHold = [...found.holding, ...found.missing].sort(); // one list for the record and the log
    await client.if(keys.frozen, 'Create', '==', 0).then(client.put(keys.frozen).value(frozenRecord('loaded', config.epoch, mayHold))).commit();
    const why = found.load === 'loaded' ? `${found.holding.join(', ')} may hold keys` : `no load record from ${found.missing.join(', ')} within a TTL`;
    logger.warn({ epoch: config.epoch, members: mayHold }, `controller: ${why}, so placement is frozen: a member that joins gets hash slots with their keys by kvctl rebalance (or --auto on)`);
    this.options.poke();
    return { hold: true };
  }
}

/** The members holding, in `config`, a hash slot whose replicas (or their order) `next` changes. */
export function holdersOfChanged(config: ClusterConfig, next: ClusterConfig): string[] {
  const before = slotReplicaNames(config).names;
  const after = slotReplicaNames(next).names;
  const holders = new Set<string>();
  for (let slot = 0; slot < SLOT_COUNT; slot++) if (!sameList(before[slot]!, after[slot]!)) for (const name of before[slot]!) holders.add(name);
  return [...holders];
}

/**
 * Whether `members` hold keys by their load records: `loaded` (one does, has granted blocks, or is down),
 * `unknown` (a live one has none: `missing`), or `empty`; and each record's key and mod_revision as read.
 */
async function holdersLoad(client: Etcd3, prefix: string, members: readonly string[], alive: ReadonlySet<string>): Promise<{ load: 'empty' | 'loaded' | 'unknown'; missing: string[]; holding: string[]; revisions: Map<string, string> }> {
  const revisions = new Map<string, string>();
  if (members.length === 0) return { load: 'empty', missing: [], holding: [], revisions };
  const down = members.filter((name) => !alive.has(name));
  if (down.length > 0) return { load: 'loaded', missing: [], holding: down, revisions }; // a member that is down may hold keys
  const keys = etcdKeys(prefix);
  const read = await Promise.all(members.map((name) => client.get(keys.loadKey(name)).exec()));
  const missing: string[] = [];
  const holding: string[] = [];
  for (const [i, { kvs }] of read.entries()) {
    const kv = kvs[0];
    const record = kv === undefined ? undefined : parseLoadRecord(kv.value.toString());
    if (record === undefined) missing.push(members[i]!);
    else if (record.granted === true || record.keys.some((n) => n > 0)) holding.push(members[i]!);
    if (kv !== undefined) revisions.set(keys.loadKey(members[i]!), kv.mod_revision);
  }
  return { load: holding.length > 0 ? 'loaded' : missing.length > 0 ? 'unknown' : 'empty', missing, holding, revisions };
}
