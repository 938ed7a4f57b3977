// A server's /stats over HTTP (kv-server --metrics-port), for stats and watch:
// where each member's is when the command line says (--url, --servers with
// --metrics; etcd's registrations are etcd.ts), and reading it.
import type { CtlArgs } from './args.js';
import { oneLine } from './format.js';
import { KVCTL_DEFAULTS } from './parser.js';

/** The metrics base URL of each member, by member name (undefined: none known). */
export function staticMetrics(args: CtlArgs): Map<string, string | undefined> {
  const { target } = args;
  if (target.kind === 'url') return new Map([[target.url, args.metrics?.[0] ?? KVCTL_DEFAULTS.metrics]]);
  if (target.kind === 'servers') return new Map(target.urls.map((url, i) => [url, args.metrics?.[i]]));
  throw new Error('etcd members\' metrics come from etcd');
}

/** GET <metrics>/stats (namespace `namespace`'s, if given) as an object; errors say why in a way a person can act on. */
export async function readStats(metrics: string, timeoutMs: number, namespace?: string): Promise<Record<string, unknown>> {
  const url = `${metrics}/stats${namespace === undefined ? '' : `?namespace=${encodeURIComponent(namespace)}`}`;
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const why =
      cause?.code === 'ECONNREFUSED' ? 'connection refused (is kv-server running with --metrics-port?)'
      : (error as Error).name === 'TimeoutError' ? `no answer within ${timeoutMs} ms`
      : cause?.code ?? cause?.message ?? (error as Error).message;
    throw new Error(`cannot reach ${url}: ${why}`);
  }
  const body = await response.text();
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${oneLine(body)}`);
  try {
    return JSON.parse(body) as Record<string, unknown>;
  } catch {
    throw new Error(`${url}: the answer is not JSON (is this a kv-server metrics port?)`);
  }
}
