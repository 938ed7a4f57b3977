/**
 * kv-bench cache mode's output: one Markdown table of the rows (a row that did not run says why
 * in its hit-ratio cell), issue 16's goal per policy under it, and the JSON document written
 * under bench/results/.
 */
import { markdownTable } from '../../kv/markdown-table.js';
import type { CacheGoal, CacheRow } from './run.js';
import type { CacheWorkload } from './workload.js';

const COLUMNS = ['store', 'policy', 'hit ratio', 'ops/s', 'p50 (µs)', 'p99 (µs)', 'server CPU (µs/op)', 'not cached', 'resident keys', 'server'];

function cells(row: CacheRow): string[] {
  const name = row.db === 'redis' ? `redis${row.version ? ` ${row.version}` : ''}` : 'rdma-kv';
  if (!row.result) return [name, row.policy, row.unavailable ?? '—', '', '', '', '', '', '', row.config ?? ''];
  const r = row.result;
  return [
    name,
    row.policy,
    `${row.hitRatioPercent!.toFixed(2)} %${r.wrong ? ` (${r.wrong} WRONG)` : ''}`,
    Math.round(row.opsPerSec!).toLocaleString('en-US'),
    r.latencyUs.p50.toFixed(1),
    r.latencyUs.p99.toFixed(1),
    row.serverCpuUsPerOp!.toFixed(2),
    r.notCached.toLocaleString('en-US'),
    row.resident ? row.resident.keys.toLocaleString('en-US') : '—',
    row.config ?? '',
  ];
}

export function cacheTable(rows: readonly CacheRow[]): string {
  return markdownTable(COLUMNS, rows.map(cells), 'll');
}

/** One line per policy measured on both stores: the goal and whether this run met it. */
export function goalLines(goals: readonly CacheGoal[]): string[] {
  return goals.map((g) => {
    const points = `${g.hitRatioPoints >= 0 ? '+' : ''}${g.hitRatioPoints.toFixed(2)} points`;
    return `goal (${g.policy}): hit ratio within 2 points of Redis's or better (${points}), lower server CPU per op (rdma-kv/Redis ${g.serverCpuRatio.toFixed(2)}×): ${g.met ? 'yes' : 'NO'}`;
  });
}

/** What the run was, for the table's heading and the JSON. */
export function describeWorkload(workload: CacheWorkload, memory: string, heapBytes: number, lanes: number): string {
  const { keys, valueBytes, warmup, operations, options } = workload;
  const ratio = (keys * valueBytes) / heapBytes;
  return (
    `read-through over ${keys.toLocaleString('en-US')} keys × ${valueBytes} B values (${ratio.toFixed(1)}× the item memory), zipfian θ ${options.theta}, seed ${options.seed}; ` +
    `item memory ${heapBytes.toLocaleString('en-US')} B (rdma-kv's heap at --memory ${memory}); ` +
    `${warmup.toLocaleString('en-US')} requests of warm-up, ${operations.toLocaleString('en-US')} measured, ${lanes} in flight`
  );
}

export function cacheDocument(rows: readonly CacheRow[], goals: readonly CacheGoal[], workload: CacheWorkload, memory: string, heapBytes: number, lanes: number): object {
  return {
    tool: 'kv-bench',
    kind: 'cache',
    date: new Date().toISOString(),
    workload: { ...workload.options, memory, itemMemoryBytes: heapBytes, lanes },
    description: describeWorkload(workload, memory, heapBytes, lanes),
    rows,
    goals,
  };
}
