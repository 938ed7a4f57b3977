// Repair's rate limit (--repair-rate): the copier asks how long to wait before
// its next key so that the bytes it has written since it started stay at or
// below the rate. A token bucket holding one second of bytes: a pause of the
// copier (a slow target) is not made up for later by a burst above the rate.
export class Pacer {
  private allowance: number;
  private last: number;

  /** `bytesPerSecond` 0: no limit. `now()`: ms (performance.now by default; tests give their own clock). */
  constructor(
    private bytesPerSecond: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.allowance = bytesPerSecond;
    this.last = now();
  }

  /**
   * From now on at most `bytesPerSecond` (0: no limit): an allowance above one second of it is taken
   * back; a debt is dropped (the wait it caused was already asked for, at the old rate).
   */
  setRate(bytesPerSecond: number): void {
    if (bytesPerSecond === this.bytesPerSecond) return;
    this.bytesPerSecond = bytesPerSecond;
    this.allowance = Math.min(Math.max(this.allowance, 0), bytesPerSecond);
    this.last = this.now();
  }

  /** `bytes` were just written: the ms to wait before the next write (0: none). */
  spent(bytes: number): number {
    if (this.bytesPerSecond === 0) return 0;
    const now = this.now();
    this.allowance = Math.min(this.bytesPerSecond, this.allowance + ((now - this.last) * this.bytesPerSecond) / 1000);
    this.last = now;
    this.allowance -= bytes;
    return this.allowance >= 0 ? 0 : (-this.allowance * 1000) / this.bytesPerSecond;
  }
}
