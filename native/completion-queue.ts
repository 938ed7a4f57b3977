// A completion queue: polled in batches (pollRaw, the hot path), or as
// objects (poll, next, take: tests and control paths); busy or event mode.
import type { NativeCq } from './addon.js';
import { Limit } from './constants.generated.js';
import { TransportError } from './errors.js';
import { type Completion, readCompletion } from './work-requests.js';

export type PollMode = 'busy' | 'event';

export class CompletionQueue {
  /** The completions of the last pollRaw(), WcLayout words; read with readCompletion(). */
  readonly completions: Uint32Array;
  constructor(/** @internal */ readonly native: NativeCq) {
    this.completions = native.completions;
  }
  get depth(): number {
    return this.native.depth;
  }
  /** Polls up to max (≤ Limit.MAX_POLL_BATCH) completions into `completions`; returns the count. */
  pollRaw(max: number = Limit.MAX_POLL_BATCH): number {
    return this.native.poll(max);
  }
  poll(max: number = Limit.MAX_POLL_BATCH): Completion[] {
    const n = this.native.poll(max);
    const out: Completion[] = [];
    for (let i = 0; i < n; i++) out.push(readCompletion(this.completions, i));
    return out;
  }
  /** Requests a wake-up for the next completion. Poll again after arming. */
  arm(): void {
    this.native.arm();
  }
  /**
   * Event mode: the event loop of this thread polls the CQ's event fd (no thread of its own)
   * and calls `onReady` once per event. Without `moderationUs` the callback drains with
   * poll(), arms, and polls once more (completions that raced with arm() bring no event).
   * With `moderationUs` (a NIC's interrupt moderation) the callback only drains and returns
   * how many completions it took: after an event it is called again every moderationUs while
   * it finds some, the CQ left unarmed; when it finds none the CQ is armed and it is called
   * once more. A steady stream costs one timer wake-up per moderationUs and no events.
   * Should the event fd fail (POLLERR: an RDMA device that went away, as in a NIC's reset), a
   * timer calls `onReady` every millisecond from then on, and `onEventsFailed` is told why, once
   * (by default a process warning, code RKV_CQ_EVENTS_FAILED).
   */
  watch(onReady: () => number | void, moderationUs?: number, onEventsFailed: (reason: string) => void = warnEventsFailed): void {
    this.native.watch(onReady, moderationUs, onEventsFailed);
  }
  unwatch(): void {
    this.native.unwatch();
  }
  /**
   * Resolves with the first completions that arrive, polling on setImmediate
   * (busy) or waiting for the CQ's event (event). For tests and control paths.
   */
  async next(options: { timeoutMs?: number; mode?: PollMode } = {}): Promise<Completion[]> {
    const deadline = Date.now() + (options.timeoutMs ?? 5000);
    if (options.mode === 'event') {
      const ready = this.poll();
      if (ready.length > 0) return ready;
      return new Promise<Completion[]>((resolve, reject) => {
        const timer = setTimeout(() => {
          this.unwatch();
          reject(new TransportError('ETIMEDOUT', 'no completion in time'));
        }, Math.max(0, deadline - Date.now()));
        const check = (): void => {
          const got = this.poll();
          if (got.length === 0) {
            this.arm();
            const raced = this.poll();
            if (raced.length === 0) return;
            got.push(...raced);
          }
          clearTimeout(timer);
          this.unwatch();
          resolve(got);
        };
        this.watch(check);
        this.arm();
        check();
      });
    }
    for (;;) {
      const got = this.poll();
      if (got.length > 0) return got;
      if (Date.now() > deadline) throw new TransportError('ETIMEDOUT', 'no completion in time');
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  /** Collects completions until `count` have arrived. */
  async take(count: number, options: { timeoutMs?: number; mode?: PollMode } = {}): Promise<Completion[]> {
    const out: Completion[] = [];
    const deadline = Date.now() + (options.timeoutMs ?? 5000);
    while (out.length < count) {
      out.push(...(await this.next({ ...options, timeoutMs: Math.max(1, deadline - Date.now()) })));
    }
    return out;
  }
}

function warnEventsFailed(reason: string): void {
  process.emitWarning(reason, { code: 'RKV_CQ_EVENTS_FAILED' });
}
