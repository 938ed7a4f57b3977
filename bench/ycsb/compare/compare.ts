/**
 * `kv-bench compare`: for each db, start the peer it needs on loopback, load, run, stop the
 * peer (also on error and Ctrl-C), then print one side-by-side table of run-phase throughput
 * and average / p95 / p99 latency per operation.
 */
import { Properties } from '../properties.js';
import { runPhase, type PhaseResult } from '../client/client.js';
import { summarize } from '../measurements/aggregate.js';
import type { CompareRow } from '../report/html.js';
import { installSignalHandlers, peerFor, type PeerServer } from './servers.js';

export interface CompareOptions {
  props: Properties;
  dbs: string[];
  threads?: number;
  target?: number;
  status?: boolean;
  seed?: number;
  stderr?: (text: string) => void;
  /** called with each db's load and run results (to write per-phase reports) */
  onPhase?: (db: string, result: PhaseResult, props: Properties) => void;
}

export interface CompareResult {
  rows: CompareRow[];
  table: string;
}

export function compareRow(db: string, run: PhaseResult): CompareRow {
  const operations: CompareRow['operations'] = {};
  for (const m of run.measurements.ordered()) {
    if (m.exportName === 'CLEANUP') continue;
    const s = summarize(m.total);
    operations[m.exportName] = { average: s.mean, p95: s.percentile(95), p99: s.percentile(99), count: s.count };
  }
  return { db, throughput: (1000 * run.opsDone) / run.runtimeMs, operations };
}

/** A Markdown table (readable in a terminal, pastes into docs). */
export function formatCompareTable(rows: readonly CompareRow[]): string {
  const ops = [...new Set(rows.flatMap((r) => Object.keys(r.operations)))];
  const header = ['db', 'throughput (ops/s)', ...ops.flatMap((op) => [`${op} avg (µs)`, `${op} p95 (µs)`, `${op} p99 (µs)`])];
  const body = rows.map((r) => [
    r.db,
    r.throughput.toFixed(1),
    ...ops.flatMap((op) => {
      const o = r.operations[op];
      return o ? [o.average.toFixed(1), String(o.p95), String(o.p99)] : ['—', '—', '—'];
    }),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i]!.length)));
  const line = (cells: string[]): string => `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : '-'.repeat(w + 1) + ':')).join('|')}|`;
  return [line(header), rule, ...body.map(line)].join('\n');
}

export async function runCompare(options: CompareOptions): Promise<CompareResult> {
  installSignalHandlers();
  const stderr = options.stderr ?? ((t: string) => void process.stderr.write(t));
  const rows: CompareRow[] = [];
  for (const db of options.dbs) {
    let peer: PeerServer | undefined;
    try {
      const start = peerFor(db);
      let props = options.props;
      if (start) {
        peer = await start(props);
        stderr(`kv-bench: started ${peer.name} (pid ${peer.pid}) on ${peer.address}\n`);
        props = props.with(peer.properties);
      }
      if (db === 'basic' && !props.has('basicdb.verbose')) props = props.with([['basicdb.verbose', 'false']]);
      const common = { props, db, threads: options.threads, target: options.target, status: options.status, seed: options.seed, stderr };
      stderr(`kv-bench: ${db}: load\n`);
      const load = await runPhase({ ...common, phase: 'load' });
      options.onPhase?.(db, load, props);
      stderr(`kv-bench: ${db}: run\n`);
      const run = await runPhase({ ...common, phase: 'run' });
      options.onPhase?.(db, run, props);
      rows.push(compareRow(db, run));
    } finally {
      if (peer) {
        await peer.stop();
        stderr(`kv-bench: stopped ${peer.name}\n`);
      }
    }
  }
  return { rows, table: formatCompareTable(rows) };
}
