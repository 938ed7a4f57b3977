// What operators type, and the two errors every command line turns into an
// exit code: sizes (1GiB, 64M), durations (250ms, 2s), counts, token files,
// and byte counts shown to people. kv-server, kvctl and kv-bench share these,
// so one spelling works everywhere. Every failure is one sentence naming the
// option and what it expected.
import { readFileSync } from 'node:fs';

/** This package's version, for --version ('unknown' if package.json cannot be read). */
export function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** The command line cannot work on any machine (exit code 2). */
export class UsageError extends Error {}

/** The command line is fine, but this machine or its files do not allow it (exit code 1). */
export class StartupError extends Error {}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 2 ** 10, kb: 2 ** 10, kib: 2 ** 10,
  m: 2 ** 20, mb: 2 ** 20, mib: 2 ** 20,
  g: 2 ** 30, gb: 2 ** 30, gib: 2 ** 30,
  t: 2 ** 40, tb: 2 ** 40, tib: 2 ** 40,
};

/**
 * A size in bytes. Units are binary and case-insensitive: K, KB and KiB all
 * mean 1024 (memory is sized in powers of two; no unit means bytes).
 * Fractions are allowed when the result is a whole number of bytes (1.5GiB).
 */
export function parseSize(text: string, option: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = match ? SIZE_UNITS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined) {
    throw new UsageError(`${option}: '${text}' is not a size (examples: 1GiB, 512MiB, 64M, 4096)`);
  }
  const bytes = Number(match[1]) * unit;
  if (!Number.isInteger(bytes)) throw new UsageError(`${option}: '${text}' is not a whole number of bytes`);
  if (!Number.isSafeInteger(bytes)) throw new UsageError(`${option}: '${text}' is too large`);
  return bytes;
}

const DURATION_UNITS: Record<string, number> = { '': 1, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A duration in milliseconds: 1000, 250ms, 1.5s, 2m, 1h (no unit: milliseconds). */
export function parseDuration(text: string, option: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = match ? DURATION_UNITS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined) throw new UsageError(`${option}: '${text}' is not a duration (examples: 1000, 250ms, 2s)`);
  const ms = Number(match[1]) * unit;
  if (!Number.isInteger(ms)) throw new UsageError(`${option}: '${text}' is not a whole number of milliseconds`);
  if (!Number.isSafeInteger(ms)) throw new UsageError(`${option}: '${text}' is too long`);
  return ms;
}

/** A whole number within [min, max]. */
export function parseCount(text: string, option: string, min: number, max: number): number {
  if (!/^\s*\d+\s*$/.test(text)) throw new UsageError(`${option}: '${text}' is not a whole number`);
  const n = Number(text);
  if (n < min || n > max) throw new UsageError(`${option}: ${n} is out of range (${min} to ${max})`);
  return n;
}

/** 1073741824 → "1 GiB", 1572864 → "1.5 MiB", 1000 → "1000 B". */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let i = 0;
  while (value >= 1024 && i < units.length - 1) {
    value /= 1024;
    i++;
  }
  const text = i === 0 || Number.isInteger(value) ? String(value) : value.toFixed(1).replace(/\.0$/, '');
  return `${text} ${units[i]}`;
}

// ---- mistyped names ----

/**
 * Edits between two words: insert, delete, substitute, or swap two neighbours
 * (memroy → memory is one edit), each costing one (optimal string alignment).
 */
function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      rows[i]![j] = d;
    }
  }
  return rows[a.length]![b.length]!;
}

/**
 * The candidate a mistyped word most likely meant, ignoring case: the only one
 * within a third of the word's length in edits (at least one edit), else the
 * only one the word begins (3 letters or more: --region for --region-file).
 * Undefined when none is that close or two are equally close: a wrong guess
 * misleads more than none.
 */
export function closestMatch(word: string, candidates: Iterable<string>): string | undefined {
  const typed = word.toLowerCase();
  const budget = Math.max(1, Math.floor(typed.length / 3));
  let best: string | undefined;
  let bestDistance = Infinity;
  let tied = false;
  const prefixed: string[] = [];
  for (const candidate of new Set(candidates)) {
    const distance = editDistance(typed, candidate.toLowerCase());
    if (distance < bestDistance) [best, bestDistance, tied] = [candidate, distance, false];
    else if (distance === bestDistance) tied = true;
    if (typed.length >= 3 && candidate.toLowerCase().startsWith(typed)) prefixed.push(candidate);
  }
  if (best !== undefined && bestDistance <= budget && !tied) return best;
  return prefixed.length === 1 ? prefixed[0] : undefined;
}

/** An option as typed on a command line: --name, or -n for a one-letter alias. */
export const optionFlag = (name: string): string => (name.length === 1 ? `-${name}` : `--${name}`);

/**
 * "did you mean --memory?" for an option name nobody declared (`name` and
 * `options` without dashes), or undefined when no option is close enough.
 */
export function optionSuggestion(name: string, options: Iterable<string>): string | undefined {
  const match = closestMatch(name.replace(/^-+/, ''), options);
  return match === undefined ? undefined : `did you mean ${optionFlag(match)}?`;
}

/**
 * The option names of a parsed command line (yargs' keys) that no option
 * declares. `known` holds the declared names and aliases; their camelCase
 * forms count as known (yargs accepts --tokenFile for --token-file), and the
 * camelCase twin yargs adds for an unknown dashed name is folded into it.
 */
export function unknownOptionNames(parsedKeys: Iterable<string>, known: Iterable<string>): string[] {
  const camel = (name: string) => name.replace(/-+([^-])/g, (_, c: string) => c.toUpperCase());
  const declared = new Set<string>(['_', '$0']);
  for (const name of known) declared.add(name).add(camel(name));
  const unknown = [...parsedKeys].filter((key) => !declared.has(key));
  const twins = new Set(unknown.filter((key) => key.includes('-')).map(camel));
  return unknown.filter((key) => key.includes('-') || !twins.has(key));
}
