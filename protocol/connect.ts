// The connect private data a client sends with its connection request, and
// the reason byte of a rejection. Layout:
//   [protocol version u8][flags u8][sha256(token) or the loopback secret, 32 bytes]
//   then, with the namespace flag: [name length u8][the namespace's name, UTF-8]
// The server reads the version first, so a client of another version is
// refused by name (docs/protocol.md, "Connecting").
import { createHash } from 'node:crypto';

import { KvLayout } from './constants.js';

const TOKEN_FLAG = 1;
const LOOPBACK_FLAG = 2;
/** The client names the namespace it means to open (its token must be one of that namespace's). */
const NAMESPACE_FLAG = 4;

/** `namespace`: a valid name (protocol/tokens.ts, checkNamespaceName), or undefined: the token's. */
export function connectData(token: string | undefined, namespace?: string): Buffer {
  const name = namespace === undefined ? undefined : Buffer.from(namespace, 'utf8');
  const data = Buffer.alloc(34 + (name ? 1 + name.length : 0));
  data[0] = KvLayout.PROTOCOL_VERSION;
  if (token !== undefined) {
    data[1] = TOKEN_FLAG;
    tokenDigest(token).copy(data, 2);
  }
  if (name) {
    data[1]! |= NAMESPACE_FLAG;
    data[34] = name.length;
    name.copy(data, 35);
  }
  return data;
}

/** The server's connection to itself, for atomics it must not do with its CPU. */
export function loopbackData(secret: Buffer): Buffer {
  const data = Buffer.alloc(34);
  data[0] = KvLayout.PROTOCOL_VERSION;
  data[1] = LOOPBACK_FLAG;
  secret.copy(data, 2, 0, 32);
  return data;
}

export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

export interface ConnectData {
  version: number;
  digest?: Buffer;
  loopback?: Buffer;
  /** the namespace the client names ('' when its bytes run past the data: no namespace is called that) */
  namespace?: string;
}

export function parseConnectData(data: Buffer): ConnectData {
  if (data.length < 2) return { version: -1 };
  const out: ConnectData = { version: data[0]! };
  if (data.length >= 34 && (data[1]! & TOKEN_FLAG) !== 0) out.digest = data.subarray(2, 34);
  if (data.length >= 34 && (data[1]! & LOOPBACK_FLAG) !== 0) out.loopback = data.subarray(2, 34);
  if ((data[1]! & NAMESPACE_FLAG) !== 0) {
    // The transport may pad private data with zeros: the length byte says where the name ends.
    const length = data[34] ?? 0;
    out.namespace = length > 0 && data.length >= 35 + length ? data.toString('utf8', 35, 35 + length) : '';
  }
  return out;
}

/**
 * Why the server rejected a connection: the first byte of the reject private data. NAMESPACE:
 * the client named a namespace this server does not host.
 */
export const RejectReason = { AUTH: 1, VERSION: 2, FULL: 3, NAMESPACE: 4 } as const;
