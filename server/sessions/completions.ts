// The server's completion queue, one per fabric, in event mode: every wake-up
// drains it in batches through notices.ts, whose native drain handles the
// notices (a client's WRITE_WITH_IMM) itself, one crossing per batch; the
// other completions come back here and are routed — a control message to
// control.ts, its receive buffer reposted. Any completion is a sign of life
// (keepalive.ts).
import type { Logger } from 'pino';

import { NoticeOut, Opcode, readCompletion } from '../../native/index.js';
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

  /**
   * One pass over the fabric's CQ: everything that arrived, in batches. Returns how many
   * completions it took; the CQ's watch (moderated) arms the CQ after a pass that found none.
   */
  drain(fabric: Fabric): number {
    let polled = 0;
    for (;;) {
      const drain = this.notices.poll(fabric);
      for (let i = 0, n = drain.out[NoticeOut.OTHERS]!; i < n; i++) this.onCompletion(fabric, readCompletion(drain.others, i));
      polled += drain.out[NoticeOut.POLLED]!;
      if (drain.out[NoticeOut.POLLED]! < NoticeOut.CAPACITY) return polled; // the CQ was empty
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
    // A notice reaches JS only when its client is not attached to the drain (notices.ts): its buffer goes back.
    if (wc.opcode === Opcode.RECV) {
      const offset = wc.wrId * KvLayout.SERVER_RECV_BYTES;
      this.control.onMessage(client, fabric.recv.bytes.subarray(offset, offset + wc.byteLen));
    } else if (wc.opcode !== Opcode.RECV_RDMA_WITH_IMM) {
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
