/**
 * V8's inlining budget for processes that run kv-bench client threads. One operation is a
 * chain of small calls (operation choice, key choice, DBWrapper, the binding, the latency
 * recorder) whose bytecode exceeds TurboFan's default cumulative inlining budget (920 bytes),
 * so part of the chain stayed real calls. With a larger budget the basic binding's workload a
 * went from ~390 to ~340 CPU ns per operation on the reference machine (docs/benchmarks.md).
 * V8 flags are per process, worker threads included, and are read when a function is
 * optimised, so setting them before the threads start is enough.
 */
import { setFlagsFromString } from 'node:v8';

let tuned = false;

export function tuneJitForClientThreads(): void {
  if (tuned) return;
  tuned = true;
  setFlagsFromString('--max-inlined-bytecode-size=1000'); // default 460: one function's bytecode
  setFlagsFromString('--max-inlined-bytecode-size-cumulative=4000'); // default 920: per optimised function
}
