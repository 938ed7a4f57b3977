// Tokens and roles: kv-server's --token-file, one `<token> <role> [<namespace>]`
// per line, and the digests the acceptor compares in constant time. A file
// that holds one bare token keeps the meaning it had before roles: that token
// may write the default namespace. A token opens the one namespace its third
// column names (none: the default one); whether the server hosts it is the
// server's check (server/options.ts, checkTokens), not the file's
// (docs/operations.md, "Tokens and roles", "Namespaces").
import { readFileSync, statSync } from 'node:fs';

import { StartupError } from './operator-input.js';
import { tokenDigest } from './connect.js';

/** read: get, getMany, getWithVersion, watch, stats. write: everything. */
export type Role = 'read' | 'write';
export const ROLES: readonly Role[] = ['read', 'write'];
/** The namespace every server hosts (sized by --memory), and the one a token without a third column opens. */
export const DEFAULT_NAMESPACE = 'default';
/**
 * Longest namespace name, in bytes: a client names its namespace in its connect private data
 * (protocol/connect.ts), which the transport limits to 56 bytes, 35 of them taken.
 */
export const MAX_NAMESPACE_NAME = 20;
const NAMESPACE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

/** Why `name` cannot name a namespace, or undefined when it can. */
export function namespaceNameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string' || !NAMESPACE_NAME.test(name)) return `namespace '${String(name)}': a name is letters, digits, '_', '.' and '-', starting with a letter or digit`;
  if (name.length > MAX_NAMESPACE_NAME) return `namespace '${name}': at most ${MAX_NAMESPACE_NAME} characters`;
  return undefined;
}

export interface TokenEntry {
  token: string;
  role: Role;
  /** absent: the default namespace */
  namespace?: string;
}

/** What a token file holds, and the warning its permissions deserve (undefined: none). */
export interface TokenFile {
  entries: TokenEntry[];
  warning: string | undefined;
}

/**
 * The entries of a token file's text; a StartupError naming `path` and the line for the first
 * thing wrong. `#` starts a comment line; blank lines are skipped; fields are separated by
 * whitespace (so a token holds none).
 */
export function parseTokenFile(text: string, path: string): TokenEntry[] {
  if (text.trim() === '') throw new StartupError(`--token-file ${path} is empty`);
  const lines = text.split('\n').map((line, i) => ({ n: i + 1, fields: line.trim().split(/\s+/).filter((f) => f !== '') }));
  const used = lines.filter(({ fields }) => fields.length > 0 && !fields[0]!.startsWith('#'));
  if (used.length === 0) throw new StartupError(`--token-file ${path} holds no token`);
  const at = (n: number, why: string) => new StartupError(`--token-file ${path} line ${n}: ${why}`);
  // One bare token: the file as it was before roles.
  if (used.length === 1 && used[0]!.fields.length === 1) return [{ token: used[0]!.fields[0]!, role: 'write', namespace: DEFAULT_NAMESPACE }];
  const entries: TokenEntry[] = [];
  const seen = new Map<string, number>();
  for (const { n, fields } of used) {
    const [token, role, namespace = DEFAULT_NAMESPACE, ...rest] = fields as [string, string | undefined, string | undefined, ...string[]];
    if (role === undefined) throw at(n, 'a token without a role: with more than one token, every line is `<token> <role> [<namespace>]` (role read or write)');
    if (rest.length > 0) throw at(n, `${fields.length} fields: expected \`<token> <role> [<namespace>]\``);
    if (!ROLES.includes(role as Role)) throw at(n, `unknown role '${role}': expected read or write`);
    const bad = namespaceNameProblem(namespace);
    if (bad !== undefined) throw at(n, bad);
    const first = seen.get(token);
    if (first !== undefined) throw at(n, `the token of line ${first} again: each token has one role`);
    seen.set(token, n);
    entries.push({ token, role: role as Role, namespace });
  }
  return entries;
}

/** Reads and parses a token file; a StartupError for a file that cannot be read or parsed. */
export function loadTokenFile(path: string): TokenFile {
  let text: string;
  let mode: number;
  try {
    text = readFileSync(path, 'utf8');
    mode = statSync(path).mode;
  } catch (error) {
    const e = error as NodeJS.ErrnoException;
    const why = e.code === 'ENOENT' ? 'no such file' : e.code === 'EACCES' ? 'permission denied' : e.code === 'EISDIR' ? 'it is a directory' : e.message;
    throw new StartupError(`cannot read --token-file ${path}: ${why}`);
  }
  const entries = parseTokenFile(text, path);
  const warning = (mode & 0o044) !== 0
    ? `--token-file ${path} is readable by ${(mode & 0o004) !== 0 ? 'everyone' : 'its group'} (mode ${(mode & 0o777).toString(8).padStart(3, '0')}): anyone who reads it can use its tokens; chmod 600 it`
    : undefined;
  return { entries, warning };
}

/**
 * The token a client (kvctl) connects with, from a token file read as the server reads it: the
 * file's bare token, or, from a file of `<token> <role> [<namespace>]` lines (the server's own
 * file, say), its first write token, else its first read token — of `namespace` when given
 * (a StartupError if the file has none for it). So one file serves both sides, and a line such
 * as `s3cret write` gives the token `s3cret`, as the server takes it. The warning is the
 * server's for the same file (readable by others), for the client to print.
 */
export function clientToken(path: string, namespace?: string): { token: string; warning: string | undefined } {
  const { entries, warning } = loadTokenFile(path);
  const usable = namespace === undefined ? entries : entries.filter((e) => (e.namespace ?? DEFAULT_NAMESPACE) === namespace);
  if (usable.length === 0) throw new StartupError(`--token-file ${path} holds no token for namespace '${namespace}'`);
  return { token: (usable.find((e) => e.role === 'write') ?? usable[0]!).token, warning };
}

/** A token as the acceptor keeps it: its digest (what a client's connect data carries), role and namespace. */
export interface TokenKey {
  digest: Buffer;
  role: Role;
  namespace: string;
}

export function tokenKeys(entries: readonly TokenEntry[]): TokenKey[] {
  return entries.map(({ token, role, namespace }) => ({ digest: tokenDigest(token), role, namespace: namespace ?? DEFAULT_NAMESPACE }));
}
