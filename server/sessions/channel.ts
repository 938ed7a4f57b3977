// A client's control channel, two-sided: the receive buffers its client ring
// owns (notices' WRITE_WITH_IMM and its control messages land there) and the
// send buffers the server's messages go out from.
import type { Logger } from 'pino';

import { type Connection, Opcode, SendFlag } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { type ControlMessage, encode } from '../../protocol/control.js';
import { SendBuffers } from '../../protocol/send-buffers.js';
import { type Fabric, SEND_BUFFERS } from '../fabric.js';
import type { Client } from './clients.js';

/** Receive buffer `index` of the fabric (a client ring's are recvBase to recvBase + RECVS_PER_CLIENT - 1). */
export function recvRequest(fabric: Fabric, index: number) {
  return { wrId: index, local: fabric.recv, localOffset: index * KvLayout.SERVER_RECV_BYTES, length: KvLayout.SERVER_RECV_BYTES };
}

/**
 * The send buffers of client ring `ring` on `connection`: SEND_BUFFERS of the fabric's,
 * each SEND signaled with its buffer's number as wr_id so that its completion frees it
 * (completions.ts calls sendBuffers.completed).
 */
export function sendBuffersFor(fabric: Fabric, ring: number, connection: Connection): SendBuffers {
  const { send: buffers } = fabric;
  return new SendBuffers(SEND_BUFFERS, (buffer, bytes) => {
    const offset = (ring * SEND_BUFFERS + buffer) * KvLayout.CONTROL_RECV_BYTES;
    bytes.copy(buffers.bytes, offset);
    connection.postSend([{ wrId: buffer, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: buffers, localOffset: offset, length: bytes.length }]);
  });
}

/** Sends a control message now, or once a send buffer is free; throws if the connection cannot post. */
export function send(client: Client, message: ControlMessage): void {
  const bytes = encode(message);
  if (bytes.length > KvLayout.CONTROL_RECV_BYTES) throw new Error(`control message of ${bytes.length} bytes is too large`);
  client.sendBuffers.send(bytes);
}

/** Logs a bad message from a client once per connection and kind; the connection keeps serving. */
export function complain(log: Logger | undefined, client: Client, kind: string, why: string): void {
  if (client.rejectedOnce.has(kind)) return;
  client.rejectedOnce.add(kind);
  log?.warn({ clientId: client.id, why }, 'control message rejected');
}
