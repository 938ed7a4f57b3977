// kvctl: rdma-kv from a shell. get/put/del go through KvClient; stats reads a
// server's /stats over HTTP (kv-server --metrics-port). Output is for people
// by default and JSON with --json. Exit codes: 0 done, 1 failed (including a
// key that does not exist), 2 bad command line.
import { readFileSync } from 'node:fs';

import yargs from 'yargs';

import { KvClient, type KvError } from '../client/index.js';
import { StartupError, checkListenUrl, formatBytes, parseDuration, readTokenFile } from './config.js';

export const KVCTL_DEFAULTS = {
  url: 'shm:///run/rdma-kv/kv.sock',
  metrics: 'http://127.0.0.1:9464',
  timeoutMs: '5000',
} as const;

interface Io {
  stdout: (data: string | Buffer) => void;
  stderr: (text: string) => void;
  stdin: () => Promise<Buffer>;
  stdoutIsTTY: boolean;
}

interface CtlArgs {
  command: string;
  key?: string;
  value?: string;
  url: string;
  token?: string;
  tokenFile?: string;
  metrics: string;
  json: boolean;
  timeoutMs: number;
}

class CtlUsageError extends Error {}

function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string }).version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}
/** Not a failure of kvctl, but exit code 1 all the same (a missing key). */
class NotFound extends Error {}

function parser(argv: string[]) {
  return yargs(argv)
    .scriptName('kvctl')
    .usage('$0 [options] <command>\n\nrdma-kv from a shell: read and write keys through KvClient, read a server\'s stats.')
    .parserConfiguration({ 'parse-numbers': false, 'parse-positional-numbers': false, 'dot-notation': false })
    .option('url', { alias: 'u', requiresArg: true, default: KVCTL_DEFAULTS.url, describe: 'server to talk to: shm:///path/to.sock or rdma://host:port' })
    .option('token', { requiresArg: true, defaultDescription: 'none', describe: 'the server\'s token (shows in ps: prefer --token-file)' })
    .option('token-file', { requiresArg: true, defaultDescription: 'none', describe: 'file holding the token (whitespace around it is trimmed)' })
    .option('metrics', { requiresArg: true, default: KVCTL_DEFAULTS.metrics, describe: 'the server\'s metrics address (kv-server --metrics-port), for stats' })
    .option('timeout-ms', { requiresArg: true, default: KVCTL_DEFAULTS.timeoutMs, describe: 'milliseconds to wait for connecting and for each request' })
    .option('json', { type: 'boolean', default: false, describe: 'machine-readable output: one JSON document on stdout' })
    .command('get <key>', 'print the value of KEY (raw bytes; missing: nothing on stdout, exit 1)', (y) => y.positional('key', { type: 'string' }))
    .command('put <key> <value>', 'store VALUE under KEY (VALUE - reads it from stdin)', (y) =>
      y.positional('key', { type: 'string' }).positional('value', { type: 'string' }),
    )
    .command(['del <key>', 'delete <key>'], 'delete KEY (missing: exit 1)', (y) => y.positional('key', { type: 'string' }))
    .command('stats', 'the server\'s counters and sizes, from <metrics>/stats')
    .demandCommand(1, 'name a command: get, put, del or stats')
    .strict()
    .epilog(
      [
        'Keys and values given as arguments are UTF-8 text; words after -- are taken as they are (put -- -k -v).',
        'With --json, values that are not valid UTF-8 are shown in base64.',
        'Exit codes: 0 done, 1 failed or key not found, 2 bad command line.',
        '',
        'Examples:',
        '  kvctl put greeting hello && kvctl get greeting',
        '  kvctl --url rdma://10.0.0.5:7471 --token-file /etc/rdma-kv/token put config - < config.json',
        '  kvctl --metrics http://127.0.0.1:9464 stats --json',
      ].join('\n'),
    )
    .wrap(Math.max(100, Math.min(120, process.stdout.columns ?? 120)))
    .help()
    .alias('help', 'h')
    .version(packageVersion())
    .exitProcess(false);
}

/**
 * yargs turns a lone '-' into '' and leaves arguments after '--' out of the
 * positionals. Marked, they pass as plain words: `put KEY -` reads stdin and
 * `put -- -key -value` stores words that start with a dash.
 */
const MARK = '\u0001';

function protect(argv: string[]): string[] {
  const out: string[] = [];
  let rest = false;
  for (const arg of argv) {
    if (rest || arg === '-') out.push(MARK + arg);
    else if (arg === '--') rest = true;
    else out.push(arg);
  }
  return out;
}

function unprotect(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  const text = String(value);
  return text.startsWith(MARK) ? text.slice(1) : text;
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

async function parseArgs(argv: string[], io: Io): Promise<CtlArgs | number> {
  let failure: string | undefined;
  let args: Record<string, unknown> = {};
  try {
    args = (await parser(protect(argv))
      .fail((message, error) => {
        failure = message ?? error?.message ?? 'invalid arguments';
      })
      .parseAsync()) as Record<string, unknown>;
  } catch (error) {
    failure ??= (error as Error).message;
  }
  if (failure !== undefined) {
    io.stderr(`kvctl: ${oneLine(failure)} (see kvctl --help)\n`);
    return 2;
  }
  if (args.help === true || args.version === true) return 0;
  for (const name of ['url', 'token', 'token-file', 'metrics', 'timeout-ms', 'json', 'key', 'value']) {
    if (Array.isArray(args[name])) {
      io.stderr(`kvctl: --${name} is given more than once (see kvctl --help)\n`);
      return 2;
    }
  }
  const positional = (args._ as unknown[]).map(String);
  const command = positional[0] === 'delete' ? 'del' : positional[0]!;
  try {
    return {
      command,
      key: unprotect(args.key),
      value: unprotect(args.value),
      url: String(args.url),
      token: args.token === undefined ? undefined : String(args.token),
      tokenFile: args['token-file'] === undefined ? undefined : String(args['token-file']),
      metrics: String(args.metrics).replace(/\/+$/, ''),
      json: args.json === true,
      timeoutMs: parseDuration(String(args['timeout-ms']), '--timeout-ms'),
    };
  } catch (error) {
    io.stderr(`kvctl: ${(error as Error).message}\n`);
    return 2;
  }
}

function jsonValue(value: Buffer): { value: string; encoding: 'utf8' | 'base64' } {
  const text = value.toString('utf8');
  return Buffer.from(text, 'utf8').equals(value) ? { value: text, encoding: 'utf8' } : { value: value.toString('base64'), encoding: 'base64' };
}

async function withClient<T>(args: CtlArgs, run: (kv: KvClient) => Promise<T>): Promise<T> {
  if (args.token !== undefined && args.tokenFile !== undefined) throw new CtlUsageError('--token and --token-file exclude each other');
  let url: string;
  try {
    url = checkListenUrl(args.url);
  } catch (error) {
    throw new CtlUsageError((error as Error).message.replace(/^--listen/, '--url'));
  }
  const token = args.tokenFile !== undefined ? readTokenFile(args.tokenFile) : args.token;
  const kv = await KvClient.connect({ url, token, timeoutMs: args.timeoutMs, reconnect: false });
  try {
    return await run(kv);
  } finally {
    await kv.close();
  }
}

async function get(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const found = await withClient(args, (kv) => kv.getWithVersion(key));
  if (!found) throw new NotFound(`not found: ${key}`);
  if (args.json) {
    io.stdout(JSON.stringify({ key, ...jsonValue(found.value), version: found.version.toString() }) + '\n');
  } else {
    io.stdout(found.value);
    if (io.stdoutIsTTY) io.stdout('\n');
  }
}

async function put(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const value = args.value === '-' ? await io.stdin() : Buffer.from(args.value!, 'utf8');
  await withClient(args, (kv) => kv.put(key, value));
  if (args.json) io.stdout(JSON.stringify({ key, stored: true, bytes: value.length }) + '\n');
}

async function del(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key!;
  const deleted = await withClient(args, (kv) => kv.delete(key));
  if (!deleted) throw new NotFound(`not found: ${key}`);
  if (args.json) io.stdout(JSON.stringify({ key, deleted: true }) + '\n');
}

/** `a.b 12` lines, sizes in bytes also in human units. */
function statsTable(stats: Record<string, unknown>): string {
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

async function stats(args: CtlArgs, io: Io): Promise<void> {
  const url = `${args.metrics}/stats`;
  if (!/^https?:\/\//.test(url)) throw new CtlUsageError(`--metrics ${args.metrics}: expected http://host:port`);
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(args.timeoutMs) });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why =
      cause?.code === 'ECONNREFUSED' ? 'connection refused (is kv-server running with --metrics-port?)'
      : (error as Error).name === 'TimeoutError' ? `no answer within ${args.timeoutMs} ms`
      : cause?.code ?? cause?.message ?? (error as Error).message;
    throw new Error(`cannot reach ${url}: ${why}`);
  }
  const body = await response.text();
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${oneLine(body)}`);
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(body) as Record<string, unknown>;
  } catch {
    throw new Error(`${url}: the answer is not JSON (is this a kv-server metrics port?)`);
  }
  io.stdout(args.json ? JSON.stringify(parsed) + '\n' : statsTable(parsed));
}

const COMMANDS: Record<string, (args: CtlArgs, io: Io) => Promise<void>> = { get, put, del, stats };

function readStdin(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    process.stdin.on('data', (chunk: Buffer) => chunks.push(chunk));
    process.stdin.once('end', () => resolve(Buffer.concat(chunks)));
    process.stdin.once('error', reject);
  });
}

/** Runs kvctl; resolves to the process exit code. */
export async function main(argv: string[], io: Partial<Io> = {}): Promise<number> {
  const out: Io = {
    stdout: io.stdout ?? ((data) => void process.stdout.write(data)),
    stderr: io.stderr ?? ((text) => void process.stderr.write(text)),
    stdin: io.stdin ?? readStdin,
    stdoutIsTTY: io.stdoutIsTTY ?? process.stdout.isTTY === true,
  };
  const args = await parseArgs(argv, out);
  if (typeof args === 'number') return args;
  const command = COMMANDS[args.command];
  if (!command) {
    out.stderr(`kvctl: unknown command '${args.command}' (see kvctl --help)\n`);
    return 2;
  }
  try {
    await command(args, out);
    return 0;
  } catch (error) {
    if (error instanceof CtlUsageError) {
      out.stderr(`kvctl: ${error.message}\n`);
      return 2;
    }
    if (error instanceof NotFound || error instanceof StartupError) {
      out.stderr(`kvctl: ${error.message}\n`);
      return 1;
    }
    const code = (error as KvError).code;
    const message = oneLine((error as Error).message ?? String(error));
    out.stderr(`kvctl: ${message}${typeof code === 'string' && code.startsWith('KV_') && !message.includes(code) ? ` (${code})` : ''}\n`);
    return 1;
  }
}
