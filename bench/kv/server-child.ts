/**
 * A KvServer in a process of its own, for benchmarks that measure the server's CPU time
 * (/proc/<pid>/stat) separately from the client's:
 *
 *   node dist/bench/kv/server-child.js [--listen shm:///path/kv.sock] [--memory-mib 512] [--token T]
 *
 * Prints the URL it listens on as the first line of stdout once it serves (without --listen:
 * a socket in a fresh temporary directory). Stops on SIGTERM or SIGINT, and, when stdin is a
 * pipe, when that pipe closes: it never outlives a parent that spawned it with a pipe on stdin.
 */
import { fstatSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

import { KvServer } from '../../server/kv-server.js';

const { values } = parseArgs({
  options: {
    listen: { type: 'string' },
    'memory-mib': { type: 'string', default: '512' },
    token: { type: 'string' },
  },
  strict: true,
});
const memoryMiB = Number(values['memory-mib']);
if (!Number.isInteger(memoryMiB) || memoryMiB < 1) {
  process.stderr.write(`server-child: --memory-mib expects a positive integer, got "${values['memory-mib']}"\n`);
  process.exit(2);
}
let dir: string | undefined;
let url = values.listen;
if (url === undefined) {
  dir = mkdtempSync(join(tmpdir(), 'rdma-kv-child-'));
  url = `shm://${join(dir, 'kv.sock')}`;
}

const server = await KvServer.start({ listen: [url], memoryBytes: memoryMiB * 2 ** 20, ...(values.token !== undefined ? { token: values.token } : {}) });
process.stdout.write(`${server.urls[0]}\n`);

let stopping = false;
async function stop(code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  try {
    await server.close();
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
    process.exit(code);
  }
}
process.once('SIGTERM', () => void stop(0));
process.once('SIGINT', () => void stop(0));
const stdin = fstatSync(0);
if (stdin.isFIFO() || stdin.isSocket()) {
  // a pipe (node's spawn makes a socket pair): the parent holds the other end, its exit closes it
  process.stdin.on('end', () => void stop(0));
  process.stdin.on('error', () => void stop(0));
  process.stdin.resume();
}
