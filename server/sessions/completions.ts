// The server's completion queue, one per fabric, in event mode: every wake-up
// drains it in batches and routes each completion — a notice (a client's
// WRITE_WITH_IMM) to notices.ts, a control message to control.ts — then
// reposts the receive buffer. Any completion is a sign of life (keepalive.ts).
import type { Logger } from 'pino';

import { Opcode, readCompletion } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import type { Fabric } from '../fabric.js';
import type { Notices } from '../notices.js';
import type { ServerStats } from '../stats.js';
import { recvRequest } from './channel.js';
import type { Client, ClientTable } from './clients.js';
import type { ControlMessages } from './control.js';

export class Completions {
  constructor(
    private readonly clients: ClientTable,
    private readonly notices: Notices,
    private readonly control: ControlMessages,
    private readonly stats: ServerStats,
    private readonly log: Logger | undefined,
  ) {}

  /** One pass over the fabric's CQ: everything that arrived, in batches. */
  drain(fabric: Fabric): void {
    for (let round = 0; round < 2; round++) {
      for (;;) {
        const n = fabric.cq.pollRaw();
        if (n === 0) break;
        for (let i = 0; i < n; i++) this.onCompletion(fabric, readCompletion(fabric.cq.completions, i));
      }
      if (round === 0) fabric.cq.arm(); // then drain once more: completions that raced with arm() bring no event
    }
  }

  private onCompletion(fabric: Fabric, wc: ReturnType<typeof readCompletion>): void {
    const client = this.clients.onQp(fabric, wc.qpNum);
    if (client) client.lastSeen = performance.now();
    if (wc.statusName !== 'SUCCESS') {
      if (wc.statusName !== 'WR_FLUSH_ERR') {
        this.stats.rdmaError(wc.statusName);
        this.log?.warn({ clientId: client?.id, status: wc.statusName }, 'error completion');
      }
      return;
    }
    if (!client) return;
    if (wc.opcode === Opcode.RECV_RDMA_WITH_IMM) {
      this.notices.onNotice(client, wc.imm);
    } else if (wc.opcode === Opcode.RECV) {
      const offset = wc.wrId * KvLayout.SERVER_RECV_BYTES;
      this.control.onMessage(client, fabric.recv.bytes.subarray(offset, offset + wc.byteLen));
    } else {
      if (wc.opcode === Opcode.SEND) this.sendCompleted(client, wc.wrId);
      return;
    }
    client.connection.postRecv([recvRequest(fabric, wc.wrId)]);
  }

  /** One of our SENDs to `client` completed: its buffer is free, and messages waiting for one go out. */
  private sendCompleted(client: Client, buffer: number): void {
    try {
      client.sendBuffers.completed(buffer);
    } catch (error) {
      // Its connection broke (its departure follows) or it stopped draining its channel.
      this.log?.warn({ clientId: client.id, err: (error as Error).message }, 'cannot send a control message');
    }
  }
}
