// Routing by the controller's config (etcd; docs/cluster.md, "Replicas, zones
// and the controller"), whatever its --replicas: each hash slot's
// replica set as one ServerClient view, its primary's with its backups
// (ServerClient.withBackups), so reads go to the primary and PUT, DELETE and
// CAS to every replica, each write carrying the hash slot's epoch (the servers'
// epoch words check it: docs/replication-design.md §4.2). Members syncing into
// a hash slot (repair) are written as its backups are, after them, and never
// read. One view per distinct replica set and epoch, shared by its slots.
import { SLOT_COUNT } from '../../protocol/hash-slots.js';
import { KvDisconnectedError, type KvError } from '../../protocol/errors.js';
import type { ClusterConfig } from '../../protocol/registry.js';
import type { ServerClient } from '../server-client.js';

/** By hash slot, its replica set's view or why it has none; undefined without a config (a static list: routed by the member list). */
export function replicaSets(config: ClusterConfig | undefined, servers: ReadonlyMap<string, ServerClient>): Array<ServerClient | KvError> | undefined {
  if (config === undefined) return undefined;
  const sets = new Array<ServerClient | KvError>(SLOT_COUNT);
  const views = new Map<string, ServerClient | KvError>();
  for (const range of config.slots) {
    const names = [...range.replicas, ...range.syncing].map((i) => config.members[i]!);
    const id = `${names.join('\0')}\0${range.epoch}`;
    let set = views.get(id);
    if (set === undefined) {
      const down = (name: string) => new KvDisconnectedError(`hash slots ${range.from}-${range.to}: replica ${name} has no live registration (down since this client started, or never up)`);
      const [primary, ...backups] = names.map((name) => servers.get(name));
      const missing = names.slice(1).find((name) => !servers.has(name));
      // A backup down: reads still go to the primary; writes wait for a config without it (failover).
      set = primary === undefined ? down(names[0]!) : primary.withBackups(backups.filter((b) => b !== undefined), missing === undefined ? undefined : down(missing), range.epoch);
      views.set(id, set);
    }
    sets.fill(set, range.from, range.to + 1);
  }
  return sets;
}

/**
 * By hash slot, the index in `members` of the member that serves it: the config's primary (a
 * rebalance or a drain moves hash slots away from the member list's map `owner`), else `owner`'s
 * (for a primary that is no registered member: a forgotten one, until the controller moves it).
 */
export function configPrimaries(config: ClusterConfig, members: readonly string[], owner: Uint16Array): Uint16Array {
  const primaries = Uint16Array.from(owner);
  for (const range of config.slots) {
    const index = members.indexOf(config.members[range.replicas[0]!]!);
    if (index >= 0) primaries.fill(index, range.from, range.to + 1);
  }
  return primaries;
}
