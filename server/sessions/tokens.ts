// The tokens the acceptor takes (KvServerOptions.token or .tokens, replaced
// whole by KvServer.setTokens on a token file's reload) and the role each one
// gives. A client's connect data carries sha256(token); it is compared with
// every known digest by crypto.timingSafeEqual, all of them every time, so the
// answer's timing says nothing about which one (nearly) matched.
import { timingSafeEqual } from 'node:crypto';

import { type Role, type TokenEntry, type TokenKey, tokenKeys } from '../../protocol/tokens.js';

export class TokenTable {
  private keys: TokenKey[];

  /** `entries` undefined: no authentication (every client may write). */
  constructor(entries: readonly TokenEntry[] | undefined) {
    this.keys = entries === undefined ? [] : tokenKeys(entries);
    this.open = entries === undefined;
  }

  /** No token is asked for (until the first replace). */
  private open: boolean;

  replace(entries: readonly TokenEntry[]): void {
    this.keys = tokenKeys(entries);
    this.open = false;
  }

  /** The role a presented digest gives, or undefined (refused). */
  roleOf(digest: Buffer | undefined): Role | undefined {
    if (this.open) return 'write';
    if (digest === undefined || digest.length !== 32) return undefined;
    let role: Role | undefined;
    for (const key of this.keys) {
      // No early exit: every digest is compared.
      if (timingSafeEqual(key.digest, digest) && role === undefined) role = key.role;
    }
    return role;
  }
}
