// A client's control channel, two-sided: the receive buffers its client ring
// owns (notices' WRITE_WITH_IMM and its control messages land there) and the
// send buffers the server's messages go out from.
import type { Logger } from 'pino';

import { Opcode, SendFlag } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { type ControlMessage, encode } from '../../protocol/control.js';
import { type Fabric, SEND_BUFFERS } from '../fabric.js';
import type { Client } from './clients.js';

/** Receive buffer `index` of the fabric (a client ring's are recvBase to recvBase + RECVS_PER_CLIENT - 1). */
export function recvRequest(fabric: Fabric, index: number) {
  return { wrId: index, local: fabric.recv, localOffset: index * KvLayout.SERVER_RECV_BYTES, length: KvLayout.SERVER_RECV_BYTES };
}

/** Sends a control message from the client ring's next send buffer; throws if the connection cannot post. */
export function send(client: Client, message: ControlMessage): void {
  const bytes = encode(message);
  if (bytes.length > KvLayout.CONTROL_RECV_BYTES) throw new Error(`control message of ${bytes.length} bytes is too large`);
  const buffer = client.ring * SEND_BUFFERS + (client.sends++ % SEND_BUFFERS);
  const offset = buffer * KvLayout.CONTROL_RECV_BYTES;
  const { send: buffers } = client.fabric;
  bytes.copy(buffers.bytes, offset);
  // Signaled so that the send queue drains; the completion is ignored.
  client.connection.postSend([{ wrId: 0, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: buffers, localOffset: offset, length: bytes.length }]);
}

/** Logs a bad message from a client once per connection and kind; the connection keeps serving. */
export function complain(log: Logger | undefined, client: Client, kind: string, why: string): void {
  if (client.rejectedOnce.has(kind)) return;
  client.rejectedOnce.add(kind);
  log?.warn({ clientId: client.id, why }, 'control message rejected');
}
