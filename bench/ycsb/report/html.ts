/** Self-contained HTML reports: one per phase (time series + YCSB summary) and one per compare. */
import { escapeXml, lineChart, barChart, type Series } from './svg.js';
import type { ResultsDocument } from './results.js';

const STYLE = `body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:12px 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}code{background:#f5f5f5;padding:1px 4px}
.meta td{text-align:left}svg{display:block;margin:16px 0}`;

function page(title: string, body: string): string {
  return `<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>${escapeXml(title)}</title><style>${STYLE}</style></head><body>\n${body}\n</body></html>\n`;
}

function fmt(n: number, digits = 2): string {
  return Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: digits }) : String(n);
}

export function phaseReportHtml(doc: ResultsDocument): string {
  const title = `kv-bench ${doc.phase}: ${doc.db} — ${doc.workloadFiles.join(', ') || 'default workload'}`;
  const seconds = doc.sampleIntervalMs / 1000;
  const throughput: Series = {
    name: 'ops/s',
    points: doc.samples.map((s, i) => {
      const prev = i === 0 ? 0 : doc.samples[i - 1]!.tMs;
      return [s.tMs / 1000, (s.ops * 1000) / Math.max(1, s.tMs - prev)] as [number, number];
    }),
  };
  // CLEANUP happens once per thread at the very end: nothing to plot over time
  const names = [...new Set(doc.samples.flatMap((s) => Object.keys(s.latency)))].filter((n) => n !== 'CLEANUP');
  const latencyCharts = names.map((name) => {
    const pick = (k: 'p50' | 'p95' | 'p99'): [number, number][] =>
      doc.samples.filter((s) => s.latency[name]).map((s) => [s.tMs / 1000, s.latency[name]![k]] as [number, number]);
    return lineChart({
      title: `${name} latency per ${seconds} s interval`,
      xLabel: 'time (s)',
      yLabel: 'latency (µs)',
      series: [
        { name: 'p50', points: pick('p50') },
        { name: 'p95', points: pick('p95') },
        { name: 'p99', points: pick('p99') },
      ],
    });
  });
  const percentileNames = [...new Set(doc.measurements.flatMap((m) => Object.keys(m.percentilesUs)))];
  const rows = doc.measurements
    .map(
      (m) =>
        `<tr><td>${escapeXml(m.name)}</td><td>${fmt(m.operations, 0)}</td><td>${fmt(m.averageLatencyUs)}</td><td>${fmt(m.minLatencyUs, 0)}</td><td>${fmt(m.maxLatencyUs, 0)}</td>` +
        percentileNames.map((p) => `<td>${fmt(m.percentilesUs[p] ?? NaN, 0)}</td>`).join('') +
        `<td>${escapeXml(Object.entries(m.returns).map(([k, v]) => `${k}=${v}`).join(', '))}</td></tr>`,
    )
    .join('\n');
  const body = `<h1>${escapeXml(title)}</h1>
<table class="meta">
<tr><td>started</td><td>${escapeXml(doc.startedAt)}</td></tr>
<tr><td>threads / target</td><td>${doc.threads} / ${doc.target > 0 ? `${doc.target} ops/s` : 'unthrottled'}</td></tr>
<tr><td>runtime</td><td>${fmt(doc.runtimeMs, 0)} ms</td></tr>
<tr><td>operations</td><td>${fmt(doc.operations, 0)}</td></tr>
<tr><td>throughput</td><td>${fmt(doc.throughputOpsPerSec)} ops/s</td></tr>
<tr><td>node</td><td>${escapeXml(doc.node)}</td></tr>
</table>
${lineChart({ title: `Throughput per ${seconds} s interval`, xLabel: 'time (s)', yLabel: 'operations / s', series: [throughput] })}
${latencyCharts.join('\n')}
<h2>Latency summary (µs)</h2>
<table><tr><th>operation</th><th>operations</th><th>average</th><th>min</th><th>max</th>${percentileNames.map((p) => `<th>${escapeXml(p)}</th>`).join('')}<th>return codes</th></tr>
${rows}
</table>
<h2>Properties</h2>
<table class="meta">${Object.entries(doc.properties).map(([k, v]) => `<tr><td><code>${escapeXml(k)}</code></td><td><code>${escapeXml(v)}</code></td></tr>`).join('\n')}</table>`;
  return page(title, body);
}

export interface CompareRow {
  db: string;
  throughput: number;
  operations: { [op: string]: { average: number; p95: number; p99: number; count: number } };
}

export function compareReportHtml(title: string, rows: readonly CompareRow[], tableText: string): string {
  const ops = [...new Set(rows.flatMap((r) => Object.keys(r.operations)))];
  const charts = [
    barChart({ title: 'Run-phase throughput', yLabel: 'operations / s', bars: rows.map((r) => ({ label: r.db, value: r.throughput })) }),
    ...ops.map((op) =>
      barChart({ title: `${op} p99 latency`, yLabel: 'µs', bars: rows.filter((r) => r.operations[op]).map((r) => ({ label: r.db, value: r.operations[op]!.p99 })) }),
    ),
  ];
  return page(title, `<h1>${escapeXml(title)}</h1>\n<pre>${escapeXml(tableText)}</pre>\n${charts.join('\n')}`);
}
