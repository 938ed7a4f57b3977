// kv-server's logs: pino, JSON lines on stderr, one line per lifecycle event
// (starting, listening, client connected/disconnected, shutting down,
// stopped) and per anomaly (rejected connection, error completion, keepalive
// timeout); nothing per operation. stdout carries only the startup summary.
//
// Until the server has started, log lines are held back: if starting fails,
// the operator sees exactly one line (`kv-server: <reason>`), not a
// "listening" line for the first URL followed by the failure of the second.
import pino, { type Logger } from 'pino';

import type { LogLevel } from './config.js';

interface LineSink {
  write(line: string): void;
}

/** A pino destination that holds lines until release() (or drops them on discard()). */
export class HeldBackStream {
  private held: string[] | undefined = [];

  constructor(private readonly target: LineSink) {}

  write(line: string): void {
    if (this.held) this.held.push(line);
    else this.target.write(line);
  }

  /** From now on lines go straight through; the held ones first. */
  release(): void {
    const held = this.held ?? [];
    this.held = undefined;
    for (const line of held) this.target.write(line);
  }

  /** Forgets the held lines and passes later ones through. */
  discard(): void {
    this.held = undefined;
  }
}

export interface ServerLogging {
  logger: Logger;
  stream: HeldBackStream;
}

export function createLogging(level: LogLevel, target: LineSink = pino.destination({ fd: 2, sync: true })): ServerLogging {
  const stream = new HeldBackStream(target);
  const logger = pino(
    {
      name: 'kv-server',
      level,
      timestamp: pino.stdTimeFunctions.isoTime,
      base: { pid: process.pid },
    },
    stream,
  );
  return { logger, stream };
}
