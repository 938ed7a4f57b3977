// A member's --replicas must be the cluster's: checked before it registers
// (the config in etcd, if any), and again once config exists, since two first
// members may start at once, both before any config (the controller's
// placement skips a member whose record disagrees: controller.ts).
import type { Etcd3 } from 'etcd3';
import type { Logger } from 'pino';


import { StartupError } from '../../protocol/operator-input.js';
import { type ClusterConfig, etcdKeys } from '../../protocol/registry.js';
import type { EtcdRegistration } from '../membership.js';
import { readConfig } from './config-store.js';
import { ReplicationController } from './controller.js';

/** The refusal for a member whose --replicas is not the cluster's, or undefined. */
export function replicasMismatch(config: ClusterConfig | undefined, prefix: string, replicas: number): StartupError | undefined {
  if (config === undefined || config.replicas === replicas) return undefined;
  return new StartupError(`the cluster at ${prefix} has --replicas ${config.replicas}; this server was started with --replicas ${replicas}`);
}

/** Before registering: refuses a --replicas other than the config's. */
export async function checkReplicasBeforeJoining(client: Etcd3, prefix: string, replicas: number): Promise<void> {
  const refusal = replicasMismatch(await readConfig(client, prefix), prefix, replicas);
  if (refusal) throw refusal;
}

/**
 * After registering: waits until a config exists (this member's controller, or another's, writes
 * it) and checks it, until `deadline` (performance.now()); a controller that died before writing
 * is replaced within its lease's TTL, which the caller's deadline covers.
 */
export async function awaitConfig(client: Etcd3, prefix: string, replicas: number, deadline: number): Promise<ClusterConfig> {
  for (;;) {
    const config = await readConfig(client, prefix);
    const refusal = replicasMismatch(config, prefix, replicas);
    if (refusal) throw refusal;
    if (config !== undefined) return config;
    if (performance.now() > deadline) throw new StartupError(`no config appeared under ${prefix}/config in etcd: is the controller (${prefix}/controller) stuck?`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Before registering: a member that config still names as a replica beside others, or as
 * syncing into a hash slot (it
 * crashed or stopped and is back before the controller failed it over) waits until it has been
 * failed over, since its region may be empty or stale and nothing yet proves otherwise (the region
 * id check of docs/replication-design.md §4.5 is to come). Its predecessor's alive key at our URL
 * is removed, so the controller acts at once rather than after the lease. Hash slots it is the last
 * live replica of keep it (nothing else holds them): past `deadline` it goes on and serves those.
 */
export async function awaitFailoverOfPredecessor(client: Etcd3, prefix: string, name: string, url: string, deadline: number, logger: Logger): Promise<void> {
  const keys = etcdKeys(prefix);
  let said = false;
  for (;;) {
    const config = await readConfig(client, prefix);
    const index = config?.members.indexOf(name) ?? -1;
    // Syncing into a hash slot counts too: its copy may be reported done, and its items are gone with this restart.
    if (!config || index < 0 || !config.slots.some((r) => (r.replicas.includes(index) && r.replicas.length > 1) || r.syncing.includes(index))) return;
    if (!said) {
      said = true;
      logger.warn({ member: name, epoch: config.epoch }, 'config still names this member a replica: waiting for the controller to fail its previous run over before registering');
      const held = await client.get(keys.aliveKey(name)).string();
      let heldUrl: unknown;
      try {
        heldUrl = held === null ? undefined : (JSON.parse(held) as { url?: unknown }).url;
      } catch {
        heldUrl = undefined; // unreadable: left to its lease
      }
      if (heldUrl === url) await client.delete().key(keys.aliveKey(name)).exec();
    }
    if (performance.now() > deadline) {
      logger.warn({ member: name }, 'not failed over in time (no controller, or hash slots with no other replica): registering; this member serves its hash slots from its region as it is');
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/**
 * Starts this member's controller (controller.ts) once it is registered, and waits for a config
 * that agrees with its --replicas. A refused member removes the member key it created, so the
 * cluster does not keep a member that never served.
 */
export async function startController(registration: EtcdRegistration, options: { prefix: string; name: string; replicas: number; ttlSeconds: number; replaceAfterMs: number }, logger: Logger): Promise<ReplicationController> {
  const { client } = registration;
  const { prefix, name, replicas, replaceAfterMs } = options;
  const controller = await ReplicationController.start({ client, prefix, name, replicas, leaseId: () => registration.leaseId, ttlMs: options.ttlSeconds * 1000, replaceAfterMs, logger });
  try {
    // A dead controller's key lapses within a TTL; then some member (maybe this one) writes config.
    await awaitConfig(client, prefix, replicas, performance.now() + options.ttlSeconds * 1000 + 10_000);
  } catch (error) {
    await controller.close();
    if (registration.createdMember) await client.delete().key(etcdKeys(prefix).member(name)).exec().catch(() => undefined);
    throw error;
  }
  return controller;
}
