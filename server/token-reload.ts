// SIGHUP: kv-server rereads its --token-file and replaces its tokens without a
// restart (KvServer.setTokens: new tokens work for new connections; clients of
// removed or re-roled tokens are fenced; the others are not touched). A file
// that does not parse leaves the old tokens in force, and says why in the log.
// A file readable by others is warned about on every reload, as at start.
import type { Logger } from 'pino';

import { type TokenFile, loadTokenFile } from '../protocol/tokens.js';
import type { KvServer } from './kv-server.js';

/** Starts listening for SIGHUP (without a token file, it is logged and ignored); returns the function that stops it. */
export function watchTokenFile(path: string | undefined, server: KvServer, logger: Logger): () => void {
  const reload = () => (path === undefined ? logger.info('SIGHUP: no --token-file to reload') : reloadTokens(path, server, logger));
  process.on('SIGHUP', reload);
  return () => process.off('SIGHUP', reload);
}

/** One reload; true if the new tokens are in force. */
export function reloadTokens(path: string, server: KvServer, logger: Logger): boolean {
  let file: TokenFile;
  try {
    file = loadTokenFile(path);
  } catch (error) {
    logger.error({ err: (error as Error).message }, 'token file not reloaded: the old tokens stay in force');
    return false;
  }
  if (file.warning) logger.warn(file.warning);
  const read = file.entries.filter((e) => e.role === 'read').length;
  let fenced: number;
  try {
    fenced = server.setTokens(file.entries);
  } catch (error) {
    // The device refused the READ-only registration the first read token needs (ulimit -l?).
    logger.error({ err: (error as Error).message }, 'token file not reloaded: the old tokens stay in force');
    return false;
  }
  logger.info({ path, write: file.entries.length - read, read, fenced }, 'token file reloaded');
  return true;
}
