// A chain of asynchronous tasks run one at a time, in the order added. The
// loopback queue pair and its scratch buffer serve one task at a time
// (departed clients' locks, the orphan scan), and blocks are taken back one
// departed client at a time.
export class Chain {
  private tail: Promise<void> = Promise.resolve();

  /** Runs `task` once every task added before it has ended; its failure goes to `onError`; `after` runs either way. */
  add(task: () => Promise<void> | void, onError: (error: Error) => void, after?: () => void): void {
    this.tail = this.tail.then(task).catch(onError).finally(after);
  }

  /** Resolves when every task added so far has ended. */
  settled(): Promise<void> {
    return this.tail;
  }
}
