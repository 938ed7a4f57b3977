// stats: each server's /stats. One server (--url): its numbers, as they are.
// A cluster: every member's, each under its name; a member whose stats cannot
// be read makes the exit code 1.
import { openEtcd } from '../../../protocol/registry.js';
import { UsageError } from '../../../protocol/operator-input.js';
import type { CtlArgs } from '../args.js';
import { etcdMetrics, readCluster } from '../etcd.js';
import { statsTable } from '../format.js';
import type { Io } from '../io.js';
import { KVCTL_DEFAULTS } from '../parser.js';
import { readStats, staticMetrics } from '../stats-http.js';

export async function stats(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  if (target.kind === 'url') {
    const parsed = await readStats(args.metrics?.[0] ?? KVCTL_DEFAULTS.metrics, args.timeoutMs, args.namespace);
    io.stdout(args.json ? JSON.stringify(parsed) + '\n' : statsTable(parsed));
    return;
  }
  if (target.kind === 'servers' && args.metrics === undefined) {
    throw new UsageError('stats with --servers needs --metrics URL,URL,... (one per server, in --servers order)');
  }
  let where: Map<string, string | undefined>;
  if (target.kind === 'etcd') {
    const etcd = openEtcd(target.hosts, args.timeoutMs);
    try {
      where = etcdMetrics(await readCluster(etcd, target));
    } finally {
      etcd.close();
    }
  } else {
    where = staticMetrics(args);
  }
  const members = await Promise.all(
    [...where].map(async ([name, metrics]) => {
      if (metrics === undefined) return { name, metrics: null, error: 'no metrics address (not alive, or no --metrics-port)' };
      try {
        return { name, metrics, stats: await readStats(metrics, args.timeoutMs, args.namespace) };
      } catch (error) {
        return { name, metrics, error: (error as Error).message };
      }
    }),
  );
  if (args.json) {
    io.stdout(JSON.stringify({ members }) + '\n');
  } else {
    io.stdout(members.map((m) => `# ${m.name}${m.metrics ? ` (${m.metrics})` : ''}\n${m.stats ? statsTable(m.stats) : `${m.error}\n`}`).join('\n'));
  }
  const failed = members.filter((m) => m.error !== undefined);
  if (failed.length > 0) throw new Error(`no stats from ${failed.map((m) => m.name).join(', ')}`);
}
