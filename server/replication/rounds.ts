// One round at a time, and never a poke lost: the controller, the epoch
// follower and the copier each react to etcd by running a round of work, and a
// poke during a round runs one more after it (a round may also ask for one).
// A round that throws is reported and run again after retryMs.
export interface RoundsOptions {
  /** Closing: no new round starts, a pending retry is dropped. */
  closed: () => boolean;
  retryMs: number;
  /** A round threw (not while closing); another runs retryMs later. */
  failed: (error: unknown) => void;
}

export class SerialRounds {
  private running: Promise<void> | undefined;
  private again = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(
    private readonly round: () => Promise<void>,
    private readonly options: RoundsOptions,
  ) {}

  /** Runs a round now, or once more after the one running; resolves when no round runs. */
  poke(): Promise<void> {
    if (this.options.closed()) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        try {
          await this.round();
        } catch (error) {
          if (this.options.closed()) break;
          this.options.failed(error);
          this.retry ??= setTimeout(() => {
            this.retry = undefined;
            void this.poke();
          }, this.options.retryMs);
        }
      } while (this.again && !this.options.closed());
      this.running = undefined;
    })();
    return this.running;
  }

  /** From inside a round: run another after it. */
  runAgain(): void {
    this.again = true;
  }

  /** Whether a round is running now. */
  get busy(): boolean {
    return this.running !== undefined;
  }

  /** Drops a pending retry; resolves when the round running (if any) ends. */
  async stop(): Promise<void> {
    clearTimeout(this.retry);
    this.retry = undefined;
    await this.running;
  }
}
