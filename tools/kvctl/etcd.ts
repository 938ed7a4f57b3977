// What kvctl reads from etcd directly, beside KvClient: the member and alive
// records under the cluster's prefix (forget needs them, and stats and watch
// take each member's metrics address from its alive record), and the members a
// fresh placement would place (rebalance, layout). The records'
// format is protocol/registry.ts; kv-server writes them.
import type { Etcd3 } from 'etcd3';

import type { PlacedMember } from '../../protocol/hash-slots.js';

import { type AliveRecord, type ClusterConfig, type MemberRecord, etcdKeys, parseClusterConfig } from '../../protocol/registry.js';
import type { EtcdTarget } from './args.js';

export interface EtcdCluster {
  /** Member names, sorted. */
  members: string[];
  /** Alive records by member name (fields may be missing in a malformed record). */
  alive: Map<string, Partial<AliveRecord>>;
}

/** The members and alive records under the prefix, at one revision. */
export async function readCluster(etcd: Etcd3, target: EtcdTarget): Promise<EtcdCluster> {
  const keys = etcdKeys(target.prefix);
  let entries: Record<string, string>;
  try {
    // Not the whole prefix: it also holds the controller's config (tens of KB), and watch reads this every interval.
    const joined = await etcd.getAll().prefix(keys.members).exec();
    const live = await etcd.getAll().prefix(keys.alive).revision(joined.header.revision).exec();
    entries = Object.fromEntries([...joined.kvs, ...live.kvs].map((kv) => [kv.key.toString(), kv.value.toString()]));
  } catch (error) {
    throw new Error(`cannot read the cluster from etcd at ${target.hosts.join(',')} (prefix ${target.prefix}): ${(error as Error).message}`);
  }
  const members: string[] = [];
  const alive = new Map<string, Partial<AliveRecord>>();
  for (const [key, value] of Object.entries(entries)) {
    if (key.startsWith(keys.members)) members.push(key.slice(keys.members.length));
    if (key.startsWith(keys.alive)) {
      let record: Partial<AliveRecord> = {};
      try {
        record = JSON.parse(value) as Partial<AliveRecord>;
      } catch {
        // kept as alive with nothing known: the key's existence is what makes it alive
      }
      alive.set(key.slice(keys.alive.length), record);
    }
  }
  return { members: members.sort(), alive };
}

/** Each member's metrics base URL as registered (undefined: not alive, or no --metrics-port). */
export function etcdMetrics(cluster: EtcdCluster): Map<string, string | undefined> {
  return new Map(cluster.members.map((name) => [name, cluster.alive.get(name)?.metrics]));
}

/** The controller's config (docs/cluster.md, "Replicas and zones"), or undefined when none is written yet. Throws on an unreadable one. */
export async function readClusterConfig(etcd: Etcd3, target: EtcdTarget): Promise<ClusterConfig | undefined> {
  let text: string | null;
  try {
    text = await etcd.get(etcdKeys(target.prefix).config).string();
  } catch (error) {
    throw new Error(`cannot read the cluster from etcd at ${target.hosts.join(',')} (prefix ${target.prefix}): ${(error as Error).message}`);
  }
  return text === null ? undefined : parseClusterConfig(text);
}

/** The members a fresh placement would place: alive, registered with the cluster's --replicas (the controller's rule). */
export async function liveMembers(etcd: Etcd3, target: EtcdTarget, replicas: number): Promise<PlacedMember[]> {
  const cluster = await readCluster(etcd, target);
  const records = await etcd.getAll().prefix(etcdKeys(target.prefix).members).strings();
  const placed: PlacedMember[] = [];
  for (const name of cluster.members) {
    if (!cluster.alive.has(name)) continue;
    let record: Partial<MemberRecord> = {};
    try {
      record = JSON.parse(records[etcdKeys(target.prefix).member(name)] ?? '{}') as Partial<MemberRecord>;
    } catch {
      // no zone known
    }
    if (record.replicas !== undefined && record.replicas !== replicas) continue;
    placed.push({ name, zone: typeof record.zone === 'string' ? record.zone : undefined });
  }
  return placed;
}
