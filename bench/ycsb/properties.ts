/**
 * YCSB configuration is a java.util.Properties: files given with -P (later files override
 * earlier ones) and -p name=value pairs (which override every file). This module reads the
 * .properties text format and offers typed getters that fail with a clear UsageError instead
 * of Java's NumberFormatException.
 */
import { readFileSync } from 'node:fs';
import { UsageError } from '../../protocol/operator-input.js';

/** Parses java.util.Properties text: comments (# !), separators (= : whitespace), continuations, escapes. */
export function parsePropertiesText(text: string): Map<string, string> {
  const result = new Map<string, string>();
  const rawLines = text.split(/\r\n|\r|\n/);
  for (let i = 0; i < rawLines.length; i++) {
    let line = rawLines[i]!.replace(/^[ \t\f]+/, '');
    if (line === '' || line.startsWith('#') || line.startsWith('!')) continue;
    // a line ending in an odd number of backslashes continues on the next line
    while (endsWithOddBackslashes(line) && i + 1 < rawLines.length) {
      line = line.slice(0, -1) + rawLines[++i]!.replace(/^[ \t\f]+/, '');
    }
    if (endsWithOddBackslashes(line)) line = line.slice(0, -1);
    let keyEnd = 0;
    while (keyEnd < line.length) {
      const c = line[keyEnd]!;
      if (c === '\\') {
        keyEnd += 2;
        continue;
      }
      if (c === '=' || c === ':' || c === ' ' || c === '\t' || c === '\f') break;
      keyEnd++;
    }
    let valueStart = keyEnd;
    while (valueStart < line.length && /[ \t\f]/.test(line[valueStart]!)) valueStart++;
    if (valueStart < line.length && (line[valueStart] === '=' || line[valueStart] === ':')) valueStart++;
    while (valueStart < line.length && /[ \t\f]/.test(line[valueStart]!)) valueStart++;
    result.set(unescape(line.slice(0, keyEnd)), unescape(line.slice(valueStart)));
  }
  return result;
}

function endsWithOddBackslashes(s: string): boolean {
  let n = 0;
  for (let i = s.length - 1; i >= 0 && s[i] === '\\'; i--) n++;
  return n % 2 === 1;
}

function unescape(s: string): string {
  return s.replace(/\\(u[0-9a-fA-F]{4}|.)/g, (_, e: string) => {
    if (e.length === 5) return String.fromCharCode(parseInt(e.slice(1), 16));
    switch (e) {
      case 't': return '\t';
      case 'n': return '\n';
      case 'r': return '\r';
      case 'f': return '\f';
      default: return e;
    }
  });
}

export function readPropertyFile(path: string): Map<string, string> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UsageError(`cannot read property file ${path}${code ? ` (${code})` : ''}`);
  }
  return parsePropertiesText(text);
}

/** Parses one "-p name=value" argument. */
export function parsePropertyArgument(arg: string): [string, string] {
  const eq = arg.indexOf('=');
  if (eq <= 0) throw new UsageError(`-p expects name=value (e.g. -p operationcount=99999), got "${arg}"`);
  return [arg.slice(0, eq), arg.slice(eq + 1)];
}

const INT_PATTERN = /^[+-]?\d+$/;
const DOUBLE_PATTERN = /^[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)$/;

/** Immutable property set with Java-like typed getters. */
export class Properties {
  private readonly map: ReadonlyMap<string, string>;

  constructor(entries: Iterable<[string, string]> = []) {
    this.map = new Map(entries);
  }

  /** Files in order, then -p overrides, as YCSB's Client.parseArguments merges them. */
  static fromSources(files: readonly string[], overrides: readonly string[] | ReadonlyMap<string, string>): Properties {
    const merged = new Map<string, string>();
    for (const file of files) for (const [k, v] of readPropertyFile(file)) merged.set(k, v);
    const pairs = overrides instanceof Map ? [...overrides] : (overrides as readonly string[]).map(parsePropertyArgument);
    for (const [k, v] of pairs) merged.set(k, v);
    return new Properties(merged);
  }

  with(overrides: Iterable<[string, string]>): Properties {
    const merged = new Map(this.map);
    for (const [k, v] of overrides) merged.set(k, v);
    return new Properties(merged);
  }

  has(name: string): boolean {
    return this.map.has(name);
  }

  get(name: string): string | undefined;
  get(name: string, fallback: string): string;
  get(name: string, fallback?: string): string | undefined {
    return this.map.get(name) ?? fallback;
  }

  /** Integer.parseInt: a 32-bit signed decimal. */
  getInt(name: string, fallback: number): number {
    const n = this.getInteger(name, fallback);
    if (n < -2147483648 || n > 2147483647) throw new UsageError(`property ${name}=${this.map.get(name)} does not fit in a 32-bit int`);
    return n;
  }

  /** Long.parseLong, limited to what a double holds exactly (2^53). */
  getLong(name: string, fallback: number): number {
    return this.getInteger(name, fallback);
  }

  private getInteger(name: string, fallback: number): number {
    const raw = this.map.get(name);
    if (raw === undefined) return fallback;
    const text = raw.trim();
    if (!INT_PATTERN.test(text)) throw new UsageError(`property ${name}="${raw}" is not an integer`);
    const n = Number(text);
    if (!Number.isSafeInteger(n)) throw new UsageError(`property ${name}=${raw} is too large`);
    return n;
  }

  /** Double.parseDouble. */
  getDouble(name: string, fallback: number): number {
    const raw = this.map.get(name);
    if (raw === undefined) return fallback;
    const text = raw.trim();
    if (!DOUBLE_PATTERN.test(text)) throw new UsageError(`property ${name}="${raw}" is not a number`);
    return Number(text.replace(/[fFdD]$/, ''));
  }

  /** Boolean.parseBoolean: "true" in any case is true, anything else false. */
  getBoolean(name: string, fallback: boolean): boolean {
    const raw = this.map.get(name);
    if (raw === undefined) return fallback;
    return raw.toLowerCase() === 'true';
  }

  entries(): IterableIterator<[string, string]> {
    return this.map.entries();
  }

  toObject(): Record<string, string> {
    return Object.fromEntries(this.map);
  }
}
