// How kvctl shows things to people: one-line messages, member states, tables,
// stats rows, values in --json. Pure functions of what the commands fetched.
import { type KvStatusName, type MemberLayout, SLOT_COUNT } from '../../client/index.js';
import { formatBytes } from '../../protocol/operator-input.js';
import type { ClusterConfig } from '../../protocol/registry.js';

/** Errors and warnings are one line on stderr, whatever the message held. */
export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

/** What people are told about a member: ready, reconnecting, or down (no connection and none coming). */
export type MemberState = 'ready' | 'reconnecting' | 'down';

export function memberState(status: KvStatusName | 'down'): MemberState {
  // 'connecting' after connect() returned means its first attempt failed (one-shot commands do not retry).
  return status === 'ready' ? 'ready' : status === 'reconnecting' ? 'reconnecting' : 'down';
}

/** A member's share of the hash slots, in percent (two decimals). */
export const percent = (slots: number) => Math.round((slots / SLOT_COUNT) * 10_000) / 100;

/** Columns padded to their widest cell; numeric columns right-aligned. */
export function table(rows: string[][], numeric: boolean[]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
  return rows
    .map((row) => row.map((cell, c) => (numeric[c] ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!))).join('  ').trimEnd())
    .join('\n') + '\n';
}

/** HH:MM:SS, local time: the start of each line watch prints. */
export function clock(): string {
  return new Date().toTimeString().slice(0, 8);
}

/** A value in --json: text when it is valid UTF-8, else base64. */
export function jsonValue(value: Buffer): { value: string; encoding: 'utf8' | 'base64' } {
  const text = value.toString('utf8');
  return Buffer.from(text, 'utf8').equals(value) ? { value: text, encoding: 'utf8' } : { value: value.toString('base64'), encoding: 'base64' };
}

/** `a.b 12` lines, sizes in bytes also in human units. */
export function statsTable(stats: Record<string, unknown>): string {
  const rows: Array<[string, string]> = [];
  const walk = (prefix: string, value: unknown) => {
    if (value !== null && typeof value === 'object') {
      const entries = Object.entries(value as Record<string, unknown>);
      if (entries.length === 0) rows.push([prefix, '-']);
      for (const [k, v] of entries) walk(prefix ? `${prefix}.${k}` : k, v);
      return;
    }
    const text = String(value);
    rows.push([prefix, typeof value === 'number' && /bytes/i.test(prefix) && value >= 1024 ? `${text} (${formatBytes(value)})` : text]);
  };
  walk('', stats);
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n') + '\n';
}

/** One member in layout and watch output. */
export interface LayoutEntry {
  name: string;
  url?: string;
  state: MemberState;
  slots: number;
  /** Its share of the 16,384 hash slots, in percent (two decimals). */
  percent: number;
}

export function layoutEntries(members: MemberLayout[]): LayoutEntry[] {
  // No URL: etcd has no live registration for it, whatever its last connection is still trying.
  return members.map(({ name, url, status, slots }) => ({ name, ...(url ? { url } : {}), state: url ? memberState(status) : 'down', slots, percent: percent(slots) }));
}

export function layoutTable(entries: LayoutEntry[]): string {
  // Static members are named by their URL: one column is enough.
  const named = entries.every((m) => m.url === m.name);
  const rows = entries.map((m) => [m.name, ...(named ? [] : [m.url ?? '-']), m.state, String(m.slots), `${m.percent.toFixed(1)}%`]);
  const header = named ? ['MEMBER', 'STATE', 'SLOTS', 'SHARE'] : ['MEMBER', 'URL', 'STATE', 'SLOTS', 'SHARE'];
  return table([header, ...rows], header.map((h) => h === 'SLOTS' || h === 'SHARE'));
}

/** One range of the controller's config, with member names. */
export interface ConfigRange {
  from: number;
  to: number;
  /** undefined: no replica (a config of no members). */
  primary?: string;
  backups: string[];
  syncing: string[];
  epoch: number;
}

export function configRanges(config: ClusterConfig): ConfigRange[] {
  const name = (i: number) => config.members[i]!;
  return config.slots.map(({ from, to, replicas, syncing, epoch }) => ({
    from, to, ...(replicas.length > 0 ? { primary: name(replicas[0]!) } : {}), backups: replicas.slice(1).map(name), syncing: syncing.map(name), epoch,
  }));
}

export function configTable(ranges: ConfigRange[]): string {
  const rows = ranges.map((r) => [r.from === r.to ? String(r.from) : `${r.from}-${r.to}`, r.primary ?? '-', r.backups.join(',') || '-', r.syncing.join(',') || '-', String(r.epoch)]);
  return table([['SLOTS', 'PRIMARY', 'BACKUPS', 'SYNCING', 'EPOCH'], ...rows], [false, false, false, false, true]);
}

/** A --max-mbps cap as kvctl says it (0: none). */
export function rateText(bytesPerSecond: number): string {
  return bytesPerSecond === 0 ? "no cap (each member's --repair-rate)" : `at most ${(bytesPerSecond / 1e6).toFixed(1)} MB/s`;
}
