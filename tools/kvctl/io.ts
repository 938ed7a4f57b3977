// Where kvctl's output goes, and what each failure becomes: one line on stderr
// and an exit code (0 done, 1 failed or not found, 2 bad command line). Tests
// call main() with their own Io; the launcher uses the process's streams.
import type { KvError } from '../../client/index.js';
import { StartupError, UsageError } from '../../protocol/operator-input.js';
import { oneLine } from './format.js';

export interface Io {
  stdout: (data: string | Buffer) => void;
  stderr: (text: string) => void;
  stdin: () => Promise<Buffer>;
  stdoutIsTTY: boolean;
}

/** Not a failure of kvctl, but exit code 1 all the same (a missing key). */
export class NotFound extends Error {}

function readStdin(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    process.stdin.on('data', (chunk: Buffer) => chunks.push(chunk));
    process.stdin.once('end', () => resolve(Buffer.concat(chunks)));
    process.stdin.once('error', reject);
  });
}

/** The process's streams, for whatever the caller did not give. */
export function processIo(io: Partial<Io>): Io {
  return {
    stdout: io.stdout ?? ((data) => void process.stdout.write(data)),
    stderr: io.stderr ?? ((text) => void process.stderr.write(text)),
    stdin: io.stdin ?? readStdin,
    stdoutIsTTY: io.stdoutIsTTY ?? process.stdout.isTTY === true,
  };
}

/** Prints a command's failure as one line and returns its exit code. */
export function reportFailure(error: unknown, io: Io): number {
  if (error instanceof UsageError) {
    io.stderr(`kvctl: ${error.message}\n`);
    return 2;
  }
  if (error instanceof NotFound || error instanceof StartupError) {
    io.stderr(`kvctl: ${error.message}\n`);
    return 1;
  }
  const code = (error as KvError).code;
  const message = oneLine((error as Error).message ?? String(error));
  io.stderr(`kvctl: ${message}${typeof code === 'string' && code.startsWith('KV_') && !message.includes(code) ? ` (${code})` : ''}\n`);
  return 1;
}
