// The directory of an shm:// socket path, made before listening, with every
// failure one line for the operator (test/server/listen-path.test.ts).
import { mkdirSync, realpathSync, statSync } from 'node:fs';
import { dirname, parse, sep } from 'node:path';

import { KvConfigError } from './options.js';

/**
 * Makes the directory of an shm:// socket path, one level at a time. Node's recursive mkdir
 * loops forever where mkdir answers ENOENT under an existing parent (/proc), so it is not used;
 * kernel pseudo file systems are refused by name. Every failure is a KvConfigError of one line.
 */
export function makeSocketDirectory(url: string): void {
  const dir = dirname(url.slice('shm://'.length));
  const fail = (why: string) => new KvConfigError(`cannot listen on ${url}: ${why}`);
  let at = parse(dir).root;
  for (const part of dir.slice(at.length).split(sep).filter((p) => p !== '')) {
    at = at.endsWith(sep) ? at + part : at + sep + part;
    let stats;
    try {
      stats = statSync(at, { throwIfNoEntry: false });
    } catch (error) {
      throw fail(`${at}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    if (stats) {
      if (!stats.isDirectory()) throw fail(`${at} is not a directory`);
      const real = realpathSync(at);
      if (/^\/(proc|sys)(\/|$)/.test(real)) throw fail(`${real} is a kernel file system (/proc, /sys): choose a socket path elsewhere, e.g. /run/rdma-kv/kv.sock`);
      continue;
    }
    try {
      mkdirSync(at);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw fail(`cannot create the directory ${at} (${code === 'EACCES' || code === 'EPERM' ? 'permission denied' : (code ?? (error as Error).message)})`);
    }
  }
}
