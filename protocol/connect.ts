// The connect private data a client sends with its connection request, and
// the reason byte of a rejection. Layout:
//   [protocol version u8][flags u8][sha256(token) or the loopback secret, 32 bytes]
// The server reads the version first, so a client of another version is
// refused by name (docs/protocol.md, "Connecting").
import { createHash } from 'node:crypto';

import { KvLayout } from './constants.js';

const TOKEN_FLAG = 1;
const LOOPBACK_FLAG = 2;

export function connectData(token: string | undefined): Buffer {
  const data = Buffer.alloc(34);
  data[0] = KvLayout.PROTOCOL_VERSION;
  if (token !== undefined) {
    data[1] = TOKEN_FLAG;
    tokenDigest(token).copy(data, 2);
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

export function parseConnectData(data: Buffer): { version: number; digest?: Buffer; loopback?: Buffer } {
  if (data.length < 2) return { version: -1 };
  const out: { version: number; digest?: Buffer; loopback?: Buffer } = { version: data[0]! };
  if (data.length >= 34 && (data[1]! & TOKEN_FLAG) !== 0) out.digest = data.subarray(2, 34);
  if (data.length >= 34 && (data[1]! & LOOPBACK_FLAG) !== 0) out.loopback = data.subarray(2, 34);
  return out;
}

/** Why the server rejected a connection: the first byte of the reject private data. */
export const RejectReason = { AUTH: 1, VERSION: 2, FULL: 3 } as const;
