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

/** The token in a file, without surrounding whitespace (a trailing newline is the usual case). */
export function readTokenFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    const e = error as NodeJS.ErrnoException;
    const why = e.code === 'ENOENT' ? 'no such file' : e.code === 'EACCES' ? 'permission denied' : e.code === 'EISDIR' ? 'it is a directory' : e.message;
    throw new StartupError(`cannot read --token-file ${path}: ${why}`);
  }
  const token = text.trim();
  if (token === '') throw new StartupError(`--token-file ${path} is empty`);
  return token;
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
