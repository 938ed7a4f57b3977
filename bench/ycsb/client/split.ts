/**
 * How YCSB's Client.initDb divides the operation count: never more threads than operations
 * (when the count is bounded), then opcount / threads each, the first opcount % threads threads
 * taking one more.
 */
export interface OperationSplit {
  threadCount: number;
  perThread: number[];
  /** YCSB prints a warning when it lowers the thread count */
  lowered: boolean;
}

export function splitOperationCount(opCount: number, threadCount: number): OperationSplit {
  let threads = threadCount;
  let lowered = false;
  if (threads > opCount && opCount > 0) {
    threads = opCount;
    lowered = true;
  }
  const perThread: number[] = [];
  for (let id = 0; id < threads; id++) {
    let n = Math.trunc(opCount / threads);
    if (id < opCount % threads) n++;
    perThread.push(n);
  }
  return { threadCount: threads, perThread, lowered };
}
