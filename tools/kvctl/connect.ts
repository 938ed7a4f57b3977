// Connecting KvClient to the target of the command line. One-shot commands
// (get, put, layout, ...) connect without reconnecting and close when done;
// watch keeps its client and lets it reconnect (commands/watch.ts).
import { KvClient, type KvClientOptions } from '../../client/index.js';
import { UsageError } from '../../protocol/operator-input.js';
import { clientToken } from '../../protocol/tokens.js';
import type { CtlArgs } from './args.js';
import { oneLine } from './format.js';
import type { Io } from './io.js';

/**
 * The target and credentials of the command line, plus how this command connects. A token file
 * others can read gets the server's warning for it on stderr.
 */
export function clientOptions(args: CtlArgs, io: Io, connecting: Pick<KvClientOptions, 'reconnect' | 'requireReady'>): KvClientOptions {
  if (args.token !== undefined && args.tokenFile !== undefined) throw new UsageError('--token and --token-file exclude each other');
  let token = args.token;
  if (args.tokenFile !== undefined) {
    const file = clientToken(args.tokenFile, args.namespace);
    if (file.warning !== undefined) io.stderr(`kvctl: warning: ${file.warning}\n`);
    token = file.token;
  }
  const { target } = args;
  const where: KvClientOptions =
    target.kind === 'url' ? { url: target.url }
    : target.kind === 'servers' ? { servers: target.urls }
    : { etcd: { hosts: target.hosts, prefix: target.prefix } };
  return { ...where, token, ...(args.namespace !== undefined ? { namespace: args.namespace } : {}), timeoutMs: args.timeoutMs, ...connecting };
}

/** Client warnings (a bad etcd record, say) go to stderr as they come. */
export function warnOnErrors(kv: KvClient, io: Io): void {
  kv.on('error', (error) => io.stderr(`kvctl: warning: ${oneLine(error.message)}\n`));
}

/**
 * One-shot commands: connect, run, close.
 * requireReady: false for commands that make sense with every member down (layout).
 */
export async function withClient<T>(args: CtlArgs, io: Io, run: (kv: KvClient) => Promise<T>, requireReady = true): Promise<T> {
  const kv = await KvClient.connect(clientOptions(args, io, { reconnect: false, requireReady }));
  warnOnErrors(kv, io);
  try {
    return await run(kv);
  } finally {
    await kv.close();
  }
}
