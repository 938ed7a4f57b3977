// A grant short of memory with eviction on waits while eviction can still free memory, however
// late the server's reclaim ticks come. It used to give up (KV_OUT_OF_MEMORY) when a tick found no
// run going and nothing in the grace period: a run had ended, and the tick after it came later
// than the grace period (the Soft-RoCE guest: "big0: the server has no free block of 271232 bytes"
// with a heap full of small, evictable items).
import test from 'ava';

import type { KvError } from '../../client/index.js';
import { ReconnectingClient, connect, selfValidating, startServer, validate } from '../helpers/kv.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';

const GRACE_MS = 50;

/** Blocks this process (the server in it) as a stall would. */
function stall(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // busy: no timer runs meanwhile
  }
}

/** The default namespace's grant queue and evictor (reached into, as failures.test.ts reaches its client table). */
interface Inner {
  main: { grants: { waiting: unknown[]; evictor: { running: Promise<void> | undefined } } };
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a large grant waits while eviction can free memory, even after a tick later than the grace period`, async (t) => {
    const server = await startServer(scheme, { memoryBytes: 16 << 20, graceMs: GRACE_MS, eviction: 'lru' });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const small = Math.ceil((2 * server.layout.heapBytes) / 1000);
    // The fill is a long flood: on Soft-RoCE it may meet the emulator's queue-pair stall (docs/softroce-vm.md).
    const fill = new ReconnectingClient(kv, server);
    for (let i = 0; i < small; i += 64) await Promise.all(Array.from({ length: 64 }, (_, k) => fill.put(`s${i + k}`, Buffer.alloc(1000, k))));
    for (const note of fill.notes) t.log(note);
    const { grants } = (server as unknown as Inner).main;
    // Freed small blocks are scattered: a 256 KiB block needs many runs' worth of neighbours freed.
    const big = kv.put('big', selfValidating(2, 0, 256 << 10)).then(
      () => 'stored',
      (error: KvError) => error.code ?? String(error),
    );
    await eventually(() => grants.waiting.length > 0, 'the grant waits');
    // The interleaving: the run going on ends, and no tick runs before the grace period is over.
    await grants.evictor.running;
    stall(4 * GRACE_MS);
    t.is(await big, 'stored');
    t.deepEqual(validate((await kv.get('big'))!), { writer: 2, seq: 0 });
  });
}
