/** Small inline-SVG line and bar charts for the self-contained HTML reports (no scripts, no external assets). */

export interface Series {
  name: string;
  points: [number, number][];
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];

export function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** Round axis steps: 1, 2, 5 x 10^n. */
export function niceStep(range: number, targetTicks = 5): number {
  if (!(range > 0)) return 1;
  const raw = range / targetTicks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
}

export function formatTick(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e9) return `${+(v / 1e9).toPrecision(3)}G`;
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toPrecision(3)}k`;
  return `${+v.toPrecision(3)}`;
}

export function lineChart(opts: { title: string; xLabel: string; yLabel: string; series: Series[]; width?: number; height?: number }): string {
  const width = opts.width ?? 720;
  const height = opts.height ?? 300;
  const m = { left: 64, right: 150, top: 30, bottom: 44 };
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  const all = opts.series.flatMap((s) => s.points);
  const xMax = Math.max(1e-9, ...all.map((p) => p[0]));
  const yMaxRaw = Math.max(0, ...all.map((p) => p[1]));
  const yStep = niceStep(yMaxRaw || 1);
  const yMax = Math.max(yStep, Math.ceil(yMaxRaw / yStep) * yStep);
  const xStep = niceStep(xMax);
  const sx = (x: number): number => m.left + (x / xMax) * pw;
  const sy = (y: number): number => m.top + ph - (y / yMax) * ph;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${escapeXml(opts.title)}">`);
  parts.push(`<text x="${width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">${escapeXml(opts.title)}</text>`);
  for (let y = 0; y <= yMax + 1e-9; y += yStep) {
    parts.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${sy(y)}" y2="${sy(y)}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${m.left - 6}" y="${sy(y) + 4}" text-anchor="end" font-size="11">${formatTick(y)}</text>`);
  }
  for (let x = 0; x <= xMax + 1e-9; x += xStep) {
    parts.push(`<line x1="${sx(x)}" x2="${sx(x)}" y1="${m.top + ph}" y2="${m.top + ph + 4}" stroke="#333"/>`);
    parts.push(`<text x="${sx(x)}" y="${m.top + ph + 16}" text-anchor="middle" font-size="11">${formatTick(x)}</text>`);
  }
  parts.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
  parts.push(`<text x="${m.left + pw / 2}" y="${height - 6}" text-anchor="middle" font-size="12">${escapeXml(opts.xLabel)}</text>`);
  parts.push(`<text transform="translate(14 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle" font-size="12">${escapeXml(opts.yLabel)}</text>`);
  opts.series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length]!;
    if (s.points.length === 1) {
      const [x, y] = s.points[0]!;
      parts.push(`<circle cx="${sx(x).toFixed(1)}" cy="${sy(y).toFixed(1)}" r="3" fill="${color}"/>`);
    } else if (s.points.length > 1) {
      const d = s.points.map(([x, y], j) => `${j === 0 ? 'M' : 'L'}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join('');
      parts.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="1.8"/>`);
    }
    const ly = m.top + 10 + i * 18;
    parts.push(`<line x1="${m.left + pw + 12}" x2="${m.left + pw + 32}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="3"/>`);
    parts.push(`<text x="${m.left + pw + 38}" y="${ly + 4}" font-size="12">${escapeXml(s.name)}</text>`);
  });
  if (all.length === 0) parts.push(`<text x="${m.left + pw / 2}" y="${m.top + ph / 2}" text-anchor="middle" fill="#888">no samples</text>`);
  parts.push('</svg>');
  return parts.join('\n');
}

export function barChart(opts: { title: string; yLabel: string; bars: { label: string; value: number }[]; width?: number; height?: number }): string {
  const width = opts.width ?? 520;
  const height = opts.height ?? 260;
  const m = { left: 64, right: 16, top: 30, bottom: 40 };
  const pw = width - m.left - m.right;
  const ph = height - m.top - m.bottom;
  const maxRaw = Math.max(0, ...opts.bars.map((b) => b.value));
  const step = niceStep(maxRaw || 1);
  const yMax = Math.max(step, Math.ceil(maxRaw / step) * step);
  const sy = (y: number): number => m.top + ph - (y / yMax) * ph;
  const slot = pw / Math.max(1, opts.bars.length);
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${escapeXml(opts.title)}">`);
  parts.push(`<text x="${width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">${escapeXml(opts.title)}</text>`);
  for (let y = 0; y <= yMax + 1e-9; y += step) {
    parts.push(`<line x1="${m.left}" x2="${m.left + pw}" y1="${sy(y)}" y2="${sy(y)}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${m.left - 6}" y="${sy(y) + 4}" text-anchor="end" font-size="11">${formatTick(y)}</text>`);
  }
  opts.bars.forEach((b, i) => {
    const x = m.left + i * slot + slot * 0.2;
    const w = slot * 0.6;
    parts.push(`<rect x="${x.toFixed(1)}" y="${sy(b.value).toFixed(1)}" width="${w.toFixed(1)}" height="${(m.top + ph - sy(b.value)).toFixed(1)}" fill="${PALETTE[i % PALETTE.length]}"/>`);
    parts.push(`<text x="${(x + w / 2).toFixed(1)}" y="${(sy(b.value) - 4).toFixed(1)}" text-anchor="middle" font-size="11">${formatTick(b.value)}</text>`);
    parts.push(`<text x="${(x + w / 2).toFixed(1)}" y="${m.top + ph + 16}" text-anchor="middle" font-size="12">${escapeXml(b.label)}</text>`);
  });
  parts.push(`<rect x="${m.left}" y="${m.top}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
  parts.push(`<text transform="translate(14 ${m.top + ph / 2}) rotate(-90)" text-anchor="middle" font-size="12">${escapeXml(opts.yLabel)}</text>`);
  parts.push('</svg>');
  return parts.join('\n');
}
