/**
 * `kv-bench cache`: for each eviction policy and each store, start the store's server sized to
 * the same item memory, replay the workload's read-through requests (warm-up, then measured),
 * read the server's CPU time around the measured part (/proc/<pid>/stat), stop it; then one
 * table and the goal of issue 16 per policy (hit ratio within 2 points of Redis's or better,
 * at a lower server CPU per operation).
 *
 * The item memory is rdma-kv's heap for the region `memory` (planned by the server's own
 * planLayout, checked against the server's /stats when it runs); Redis's maxmemory is that plus
 * its own used_memory when empty (stores.ts).
 */
import { DEFAULTS } from '../../../server/config.js';
import { planLayout } from '../../../server/store/layout.js';
import { parseSize } from '../../../protocol/operator-input.js';
import { ownCpuMs, processCpuMs } from '../../kv/data-path/processes.js';
import type { Properties } from '../properties.js';
import { hitRatioPercent, readThrough, type ReadThroughResult } from './read-through.js';
import { openRdmaKv, openRedis, type CacheDb, type OpenStore, type Policy, type Resident, type Unavailable } from './stores.js';
import { CacheWorkload } from './workload.js';

export interface CacheRunOptions {
  props: Properties;
  dbs: CacheDb[];
  policies: Policy[];
  /** kv-server's --memory (its region: rings, index and heap) */
  memory: string;
  workload: CacheWorkload;
  /** requests in flight (one client, one event loop) */
  lanes: number;
  /** more kv-server arguments (watermarks); not ones that change the layout */
  kvServerArgs: string[];
  stderr: (text: string) => void;
}

/** One table row: a store under a policy, measured or why not. */
export interface CacheRow {
  db: CacheDb;
  policy: Policy;
  /** "not built (…)", "missing: …" or "failed: …" when there are no numbers */
  unavailable?: string;
  config?: string;
  version?: string;
  result?: ReadThroughResult;
  hitRatioPercent?: number;
  opsPerSec?: number;
  serverCpuMs?: number;
  serverCpuUsPerOp?: number;
  clientCpuUsPerOp?: number;
  resident?: Resident;
}

/** rdma-kv's heap bytes for a region of `memory` with the server's defaults. */
export function plannedHeapBytes(memory: string): number {
  const regionBytes = parseSize(memory, 'cache.memory');
  return planLayout({ regionBytes, maxClients: Number(DEFAULTS.maxClients), maxValueBytes: parseSize(DEFAULTS.maxValue, '--max-value') }).heapBytes;
}

/** Lets work a phase left behind (notices, evictions) land before a CPU clock is read. */
const settle = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 100));

/** Warm-up, then the measured requests with the server's and this process's CPU time around them. */
async function measure(store: OpenStore, options: CacheRunOptions): Promise<CacheRow> {
  const { workload, lanes } = options;
  await readThrough(store, workload, 0, workload.warmup, lanes);
  await settle();
  const server0 = processCpuMs(store.serverPid);
  const client0 = ownCpuMs();
  const result = await readThrough(store, workload, workload.warmup, workload.warmup + workload.operations, lanes);
  const clientMs = ownCpuMs() - client0;
  await settle();
  const serverMs = processCpuMs(store.serverPid) - server0;
  return {
    db: store.db,
    policy: store.policy,
    config: store.config,
    ...(store.version !== undefined ? { version: store.version } : {}),
    result,
    hitRatioPercent: hitRatioPercent(result),
    opsPerSec: result.operations / result.seconds,
    serverCpuMs: serverMs,
    serverCpuUsPerOp: (serverMs * 1000) / result.operations,
    clientCpuUsPerOp: (clientMs * 1000) / result.operations,
    resident: await store.resident(),
  };
}

export async function runCache(options: CacheRunOptions): Promise<CacheRow[]> {
  const heapBytes = plannedHeapBytes(options.memory);
  const rows: CacheRow[] = [];
  for (const policy of options.policies) {
    for (const db of options.dbs) {
      let opened: OpenStore | Unavailable;
      try {
        opened = db === 'rdma-kv' ? await openRdmaKv(options.props, options.memory, policy, options.kvServerArgs) : await openRedis(heapBytes, policy);
      } catch (error) {
        opened = { unavailable: `failed: ${(error as Error).message}` };
      }
      if ('unavailable' in opened) {
        options.stderr(`kv-bench: cache: ${db} ${policy}: ${opened.unavailable}\n`);
        rows.push({ db, policy, unavailable: opened.unavailable });
        continue;
      }
      options.stderr(`kv-bench: cache: ${db} ${policy}: ${opened.config}; ${options.workload.warmup} requests of warm-up, ${options.workload.operations} measured\n`);
      try {
        const row = await measure(opened, options);
        if (db === 'rdma-kv' && row.resident?.capacityBytes !== undefined && row.resident.capacityBytes !== heapBytes) {
          row.config += `; heap ${row.resident.capacityBytes} B, not the planned ${heapBytes} B (Redis got the planned)`;
        }
        rows.push(row);
      } catch (error) {
        rows.push({ db, policy, config: opened.config, unavailable: `failed: ${(error as Error).message}` });
      } finally {
        await opened.close();
      }
    }
  }
  return rows;
}

/** Issue 16's goal for one policy, when both stores were measured under it. */
export interface CacheGoal {
  policy: Policy;
  /** rdma-kv's hit ratio minus Redis's, in points */
  hitRatioPoints: number;
  /** rdma-kv's server CPU per operation over Redis's */
  serverCpuRatio: number;
  met: boolean;
}

export function cacheGoals(rows: readonly CacheRow[]): CacheGoal[] {
  const goals: CacheGoal[] = [];
  for (const policy of new Set(rows.map((r) => r.policy))) {
    if (policy === 'none') continue; // the goal is about eviction
    const kv = rows.find((r) => r.db === 'rdma-kv' && r.policy === policy && r.result);
    const redis = rows.find((r) => r.db === 'redis' && r.policy === policy && r.result);
    if (!kv || !redis) continue;
    const hitRatioPoints = kv.hitRatioPercent! - redis.hitRatioPercent!;
    const serverCpuRatio = kv.serverCpuUsPerOp! / redis.serverCpuUsPerOp!;
    goals.push({ policy, hitRatioPoints, serverCpuRatio, met: hitRatioPoints >= -2 && serverCpuRatio < 1 });
  }
  return goals;
}
