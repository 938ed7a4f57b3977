// The tokens the server takes (KvServerOptions.token or .tokens, replaced
// whole by KvServer.setTokens on a token file's reload), the role each one
// gives and the namespace it opens. A client's connect data carries
// sha256(token); it is compared with every known digest by
// crypto.timingSafeEqual, all of them every time, so the answer's timing says
// nothing about which one (nearly) matched.
import { timingSafeEqual } from 'node:crypto';

import { DEFAULT_NAMESPACE, type Role, type TokenEntry, type TokenKey, tokenKeys } from '../../protocol/tokens.js';

/** What a token gives: its role, in one namespace. */
export interface Grant {
  role: Role;
  namespace: string;
}

export class TokenTable {
  private keys: TokenKey[];

  /** `entries` undefined: no authentication (every client may write, in the namespace it names). */
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

  /**
   * What a presented digest gives, or undefined (refused). Without authentication, write in
   * `named` (the namespace the client names; none: the default one).
   */
  grantOf(digest: Buffer | undefined, named?: string): Grant | undefined {
    if (this.open) return { role: 'write', namespace: named ?? DEFAULT_NAMESPACE };
    if (digest === undefined || digest.length !== 32) return undefined;
    let grant: Grant | undefined;
    for (const key of this.keys) {
      // No early exit: every digest is compared.
      if (timingSafeEqual(key.digest, digest) && grant === undefined) grant = { role: key.role, namespace: key.namespace };
    }
    return grant;
  }
}
