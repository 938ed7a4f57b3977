// A throwaway cluster for the replication benchmarks: kv-server processes on shm
// registered under a prefix of a throwaway etcd, and one KvClient routing by
// the controller's config.
import { KvClient } from '../../client/index.js';
import { type ClusterConfig, etcdKeys, parseClusterConfig } from '../../protocol/registry.js';
import { type PeerServer, startKvServer } from '../ycsb/compare/servers.js';
import { Properties } from '../ycsb/properties.js';
import type { EtcdProcess } from './etcd-process.js';

// kv-server refuses --replicas above 1 without it (docs/cluster.md: replication is experimental).
process.env.RKV_EXPERIMENTAL_REPLICAS = '1';

export interface BenchCluster {
  kv: KvClient;
  /** By member name (m0, m1, ...). */
  servers: PeerServer[];
  config: ClusterConfig;
}

/** `members` kv-servers with `--replicas replicas` (and `extra` arguments; on shm, or each on the URL `listen` gives), once the controller placed them all and the client reaches each. */
export async function startCluster(etcd: EtcdProcess, prefix: string, members: number, replicas: number, extra: readonly string[] = [], memory = '256M', listen?: () => string): Promise<BenchCluster> {
  const servers: PeerServer[] = [];
  for (let i = 0; i < members; i++) {
    const props = new Properties([['rdmakv.memory', memory], ...(listen ? [['rdmakv.listen', listen()] as [string, string]] : [])]);
    servers.push(await startKvServer(props, ['--etcd', etcd.url, '--etcd-prefix', prefix, '--name', `m${i}`, '--replicas', String(replicas), ...extra]));
  }
  const deadline = performance.now() + 30_000;
  let config: ClusterConfig | undefined;
  for (;;) {
    const text = await etcd.client.get(etcdKeys(prefix).config).string();
    config = text === null ? undefined : parseClusterConfig(text);
    // Members after the first join a replicated cluster by a rebalance: placed once nothing is left to move.
    const settled = (await etcd.client.get(etcdKeys(prefix).target).string()) === null && config?.slots.every((range) => range.syncing.length === 0);
    if (config?.members.length === members && settled) break;
    if (performance.now() > deadline) throw new Error(`the controller did not place ${members} members within 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 30_000 });
  while (kv.status !== 'ready') {
    if (performance.now() > deadline) throw new Error('the client did not reach every member within 30 s');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { kv, servers, config };
}
