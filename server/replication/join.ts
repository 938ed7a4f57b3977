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
 * Starts this member's controller (controller.ts) once it is registered, and waits for a config
 * that agrees with its --replicas. A refused member removes the member key it created, so the
 * cluster does not keep a member that never served.
 */
export async function startController(registration: EtcdRegistration, options: { prefix: string; name: string; replicas: number; ttlSeconds: number }, logger: Logger): Promise<ReplicationController> {
  const { client } = registration;
  const { prefix, name, replicas } = options;
  const controller = await ReplicationController.start({ client, prefix, name, replicas, leaseId: () => registration.leaseId, logger });
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
