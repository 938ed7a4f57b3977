// Reading and writing <prefix>/config. Only the controller writes it
// (controller.ts), and only by a transaction conditioned on the key's
// mod_revision as it read it (or on its absence): a writer that read an older
// config, or that is no longer the controller, changes nothing and looks again.
import type { Etcd3 } from 'etcd3';

import { encodeClusterConfig } from '../../protocol/config-codec.js';
import { type ClusterConfig, etcdKeys, parseClusterConfig } from '../../protocol/registry.js';

type Keys = ReturnType<typeof etcdKeys>;

export interface StoredConfig {
  /** undefined: the key holds something unreadable (reported through `unreadable`). */
  config: ClusterConfig | undefined;
  modRevision: string;
  /** The highest epoch it is known to have used: a replacement continues above it. */
  epoch: number;
}

/** The config key as stored, or undefined when there is none. */
export async function readStoredConfig(client: Etcd3, keys: Keys, unreadable: (error: Error) => void = () => {}): Promise<StoredConfig | undefined> {
  const kv = (await client.get(keys.config).exec()).kvs[0];
  if (kv === undefined) return undefined;
  const text = kv.value.toString();
  try {
    const config = parseClusterConfig(text);
    return { config, modRevision: kv.mod_revision, epoch: config.epoch };
  } catch (error) {
    unreadable(error as Error);
    let epoch = 0;
    try {
      const salvaged = (JSON.parse(text) as { epoch?: unknown }).epoch;
      if (Number.isInteger(salvaged) && (salvaged as number) > 0) epoch = salvaged as number;
    } catch {
      // not JSON at all: nothing to continue from
    }
    return { config: undefined, modRevision: kv.mod_revision, epoch };
  }
}

/**
 * Writes `config` if the key's mod_revision is still `modRevision` (undefined: if the key is
 * still absent), given `leaseId`, the controller key is still held under that lease, and every
 * key of `absent` is absent (a failover: the dead members' alive keys), and every key of
 * `unchanged` still has that mod_revision (a drain: the quiet members' records, so a cancel
 * that came first wins). `puts`: keys written in the same transaction (a rebalance's handoff
 * records, saying which config moved their hash slots). Resolves to whether it was written.
 */
export async function writeConfig(client: Etcd3, keys: Keys, config: ClusterConfig, modRevision: string | undefined, leaseId?: string, absent: readonly string[] = [], unchanged: ReadonlyMap<string, string> = new Map(), puts: ReadonlyMap<string, string> = new Map()): Promise<boolean> {
  let txn = modRevision === undefined ? client.if(keys.config, 'Create', '==', 0) : client.if(keys.config, 'Mod', '==', modRevision);
  if (leaseId !== undefined) txn = txn.and(keys.controller, 'Lease', '==', leaseId);
  for (const key of absent) txn = txn.and(key, 'Create', '==', 0);
  for (const [key, revision] of unchanged) txn = txn.and(key, 'Mod', '==', revision);
  const result = await txn.then(client.put(keys.config).value(encodeClusterConfig(config)), ...[...puts].map(([key, value]) => client.put(key).value(value))).commit();
  return result.succeeded;
}

/** The config, if there is a readable one (for members checking --replicas, and for kvctl). */
export async function readConfig(client: Etcd3, prefix: string): Promise<ClusterConfig | undefined> {
  return (await readStoredConfig(client, etcdKeys(prefix)))?.config;
}
