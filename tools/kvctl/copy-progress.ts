// What kvctl rebalance --wait and drain --wait show of the copies a move makes,
// from the copiers' progress records (<prefix>/progress/NAME): bytes copied
// since kvctl began to follow (each member's total then is the baseline; a
// total below it means the member restarted and counts from 0), keys the
// copies under way have left, the rate over the last ten seconds and an ETA.
import type { Etcd3 } from 'etcd3';

import { type CopyProgress, readCopyProgress } from '../../protocol/registry.js';

/** The rate is measured over about this long. */
const RATE_WINDOW_MS = 10_000;

export interface CopySnapshot {
  /** Bytes copied since kvctl began to follow. */
  copiedBytes: number;
  /** Keys the copies under way have found and not copied yet. */
  keysLeft: number;
  /** '3.1 MB copied, 900 keys left to copy, 1.2 MB/s, ETA 4 s' (the rate once measured). */
  text: string;
}

export class CopyWatch {
  private readonly samples: Array<{ at: number; bytes: number }> = [];

  private constructor(
    private readonly etcd: Etcd3,
    private readonly prefix: string,
    private readonly baseline: ReadonlyMap<string, CopyProgress>,
  ) {}

  static async start(etcd: Etcd3, prefix: string): Promise<CopyWatch> {
    return new CopyWatch(etcd, prefix, await readCopyProgress(etcd, prefix));
  }

  async read(): Promise<CopySnapshot> {
    let copiedBytes = 0;
    const live = { keys: 0, done: 0, bytes: 0 };
    for (const [name, progress] of await readCopyProgress(this.etcd, this.prefix)) {
      const before = this.baseline.get(name)?.totalBytes ?? 0;
      copiedBytes += progress.totalBytes >= before ? progress.totalBytes - before : progress.totalBytes;
      if (!progress.running) continue;
      live.keys += progress.keys;
      live.done += progress.done;
      live.bytes += progress.bytes;
    }
    const keysLeft = live.keys - live.done;
    const at = performance.now();
    this.samples.push({ at, bytes: copiedBytes });
    while (this.samples.length > 2 && at - this.samples[0]!.at > RATE_WINDOW_MS) this.samples.shift();
    let text = `${(copiedBytes / 1e6).toFixed(1)} MB copied`;
    if (keysLeft > 0) {
      text += `, ${keysLeft} keys left to copy`;
      const first = this.samples[0]!;
      const seconds = (at - first.at) / 1000;
      const bytesPerSecond = (copiedBytes - first.bytes) / Math.max(seconds, 1e-3);
      // Bytes left: the keys left at the mean size of those the copies under way wrote.
      if (seconds >= 1 && bytesPerSecond > 0 && live.done > 0) {
        const eta = Math.ceil((keysLeft * (live.bytes / live.done)) / bytesPerSecond);
        text += `, ${(bytesPerSecond / 1e6).toFixed(1)} MB/s, ETA ${eta} s`;
      }
    }
    return { copiedBytes, keysLeft, text };
  }
}
