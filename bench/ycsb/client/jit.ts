/**
 * V8 settings for processes that run kv-bench client threads. The inlining budget: one operation is a
 * chain of small calls (operation choice, key choice, DBWrapper, the binding, the latency
 * recorder) whose bytecode exceeds TurboFan's default cumulative inlining budget (920 bytes),
 * so part of the chain stayed real calls. With a larger budget the basic binding's workload a
 * went from ~390 to ~340 CPU ns per operation on the reference machine (docs/benchmarks.md).
 * V8 flags are per process, worker threads included, and are read when a function is
 * optimised, so setting them before the threads start is enough.
 */
import { availableParallelism } from 'node:os';
import { setFlagsFromString } from 'node:v8';

let tuned = false;

export function tuneJitForClientThreads(): void {
  if (tuned) return;
  tuned = true;
  setFlagsFromString('--max-inlined-bytecode-size=1000'); // default 460: one function's bytecode
  setFlagsFromString('--max-inlined-bytecode-size-cumulative=4000'); // default 920: per optimised function
}

/**
 * V8 scavenges with helper threads. When the client threads alone fill every core (as busy
 * polling ones do), a helper waits for a core and the scavenge's pause grows: the main job on
 * 2 vCPUs (2 busy client threads, the server thread beside them) spent 4.0–4.8 % of its run in
 * collections with helpers and 3.1–3.8 % without, and ran 10 % more operations per second
 * (docs/benchmarks.md). With a core to spare the helpers stay. Process-wide, like the flags above.
 */
export function tuneGcForClientThreads(threads: number): void {
  if (threads >= availableParallelism()) setFlagsFromString('--no-parallel-scavenge');
}
