// kvctl: rdma-kv from a shell. get/put/del/incr/expire/persist/ttl go through KvClient, which
// routes each key to its member; stats and watch read each server's /stats
// over HTTP (kv-server --metrics-port); layout shows the hash slot map; forget
// removes an etcd member for good. The target is one server (--url), a static
// cluster (--servers) or an etcd cluster (--etcd). Output is for people by
// default and JSON with --json. Exit codes: 0 done, 1 failed (including a key
// that does not exist), 2 bad command line.
//
// This file dispatches; the command line is parser.ts and args.ts, each
// command group is in commands/, output is format.ts, failures are io.ts.
// kvctl is a client tool: it imports protocol/ and client/, never server/.
import type { CtlArgs } from './args.js';
import { parseArgs } from './args.js';
import { drain } from './commands/drain.js';
import { rebalance } from './commands/rebalance.js';
import { forget } from './commands/forget.js';
import { del, get, incr, put } from './commands/keys.js';
import { layout } from './commands/layout.js';
import { stats } from './commands/stats.js';
import { expire, persist, ttl } from './commands/ttl.js';
import { watch } from './commands/watch.js';
import { type Io, processIo, reportFailure } from './io.js';

const COMMANDS: Record<string, (args: CtlArgs, io: Io) => Promise<void>> = { get, put, del, incr, expire, persist, ttl, stats, layout, watch, forget, drain, rebalance };

/** Runs kvctl; resolves to the process exit code. */
export async function main(argv: string[], io: Partial<Io> = {}): Promise<number> {
  const out = processIo(io);
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
    return reportFailure(error, out);
  }
}
