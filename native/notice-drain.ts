// The server's notice path (native/server/notice_drain.h) over one fabric's
// completion queue: poll() takes up to NoticeOut.CAPACITY completions in one
// crossing, handles every notice of an attached client in native code (record
// checks, the heap bitmap, the ring's consumed counter, the receive reposted)
// and leaves flat results in `out` (NoticeOut words) and the other completions
// in `others` (WcLayout words, read with readCompletion).
import { type NativeNoticeDrain, type NoticeDrainLayout, addon } from './addon.js';
import type { CompletionQueue } from './completion-queue.js';
import type { Connection } from './connection.js';
import { NoticeOut } from './constants.generated.js';
import type { MemoryRegion } from './memory.js';
import type { Provider } from './provider.js';

export { NoticeOut, NoticeProblem } from './constants.generated.js';
export type { NoticeDrainLayout } from './addon.js';

export class NoticeDrain {
  private readonly native: NativeNoticeDrain;
  /** The last poll's results: NoticeOut header words, then its sections. */
  readonly out: Uint32Array;
  /** The last poll's other completions (out[NoticeOut.OTHERS] of them), WcLayout words. */
  readonly others: Uint32Array;

  /**
   * Over `region` (the whole region's bytes) laid out as `layout`, with the heap's size
   * `classes` (units); `recv` holds the fabric's receive buffers of `recvBytes` each, and the
   * connections attached are `provider`'s, their completions on `cq`.
   */
  constructor(provider: Provider, cq: CompletionQueue, region: Buffer, layout: NoticeDrainLayout, classes: readonly number[], recv: MemoryRegion, recvBytes: number) {
    this.native = new addon.NoticeDrain(region, layout, classes, recv.bytes, recv.lkey, recvBytes, provider.native, cq.native);
    this.out = this.native.out;
    this.others = this.native.others;
  }

  /** The notices on `connection` are client ring `ring`'s from now on. */
  attach(connection: Connection, ring: number): void {
    this.native.attach(connection.native, ring);
  }

  /** Its completions reach JS untouched from now on. */
  detach(qpNum: number): void {
    this.native.detach(qpNum);
  }

  /** Up to `max` completions from the CQ, checked against the heap's bitmaps; returns how many were taken. */
  poll(chunkStart: Uint32Array, granted: Uint32Array, max: number = NoticeOut.CAPACITY): number {
    return this.native.poll(max, chunkStart, granted);
  }
}
