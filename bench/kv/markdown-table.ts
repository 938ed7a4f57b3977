/**
 * A Markdown table with padded columns, for the benchmarks' stdout (readable as text, and
 * pasted as is into docs/benchmarks.md). `align` gives each column's alignment, 'l' or 'r'
 * (numbers); columns past its end are right-aligned.
 */
export function markdownTable(header: string[], rows: string[][], align: string): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const left = (i: number): boolean => align[i] === 'l';
  const line = (cells: string[]): string => `| ${widths.map((w, i) => (left(i) ? (cells[i] ?? '').padEnd(w) : (cells[i] ?? '').padStart(w))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (left(i) ? '-'.repeat(w + 2) : '-'.repeat(w + 1) + ':')).join('|')}|`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}
