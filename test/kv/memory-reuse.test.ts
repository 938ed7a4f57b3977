// Heap memory that does not calcify (issue 12, items 8 and 9): freed memory is usable by any
// size class again, and grants are sized by bytes and taken back under memory pressure.
import test from 'ava';

import { type KvClient, type KvError, isRetryable } from '../../client/index.js';
import type { KvServer } from '../../server/kv-server.js';
import { connect, startServer } from '../helpers/kv.js';
import { type Scheme, eventually, providersUnderTest, slow, testScale } from '../helpers/providers.js';

/** A small region: about 13.6 MB of heap. */
const SMALL = { memoryBytes: 16 << 20, graceMs: 50 };
/**
 * The region the fill-until-full cases fill: SMALL, or a smaller one (6 MiB, 8 clients, 16,384 buckets) where the suites run
 * shrunk (RKV_TEST_SCALE < 1, the emulated Soft-RoCE guest). Each fill is tens of thousands
 * of PUTs, and rxe in the guest's kernel (6.1) now and then stalls a queue pair for good
 * after a spurious retransmit; fewer packets, fewer stalls. The ratios asserted are the same.
 */
const FILLED = testScale() < 1 ? { ...SMALL, memoryBytes: 6 << 20, maxClients: 8, buckets: 16384 } : SMALL;

/** A deterministic generator (the test is the same on every run). */
function random(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0; // imul: a plain product loses its low bits past 2^53
    return x / 2 ** 32;
  };
}

/**
 * Runs `op` again while it fails retryably, for up to slow(30 s), as an application
 * would (the client reconnects by itself). Memory reuse is what these cases check, and in the
 * Soft-RoCE guest rxe now and then stalls a queue pair for good (docs/softroce-vm.md): the
 * server rightly fences that client, which reconnects (its ops in flight fail with KV_DISCONNECTED,
 * or RDMA_REM_ACCESS_ERR where the fence invalidated its memory window first). Any other error,
 * and KV_OUT_OF_MEMORY (the end of a fill), is thrown at once.
 */
async function persist<T>(op: () => Promise<T>): Promise<T> {
  const end = Date.now() + slow(30_000);
  for (;;) {
    try {
      return await op();
    } catch (error) {
      // KV_OUT_OF_MEMORY is retryable too, but here it is the answer fillUntilFull waits for.
      if (!isRetryable(error) || (error as KvError).code === 'KV_OUT_OF_MEMORY' || Date.now() > end) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

/**
 * PUTs values from `size(i)` under `${prefix}${i}`, 64 at a time, until the server answers
 * KV_OUT_OF_MEMORY; returns the keys stored. Any other error fails the test (a lost
 * connection is retried: persist).
 */
async function fillUntilFull(kv: KvClient, prefix: string, size: (i: number) => number): Promise<string[]> {
  const stored: string[] = [];
  let full = false;
  for (let i = 0; !full; i += 64) {
    await Promise.all(
      Array.from({ length: 64 }, async (_, k) => {
        const key = `${prefix}${i + k}`;
        try {
          await persist(() => kv.put(key, Buffer.alloc(size(i + k), 0x61 + ((i + k) % 26))));
          stored.push(key);
        } catch (error) {
          if ((error as KvError).code !== 'KV_OUT_OF_MEMORY') throw error;
          full = true;
        }
      }),
    );
  }
  return stored;
}

/** What the scenarios are measured against: 100-byte values a fresh server of the same size stores (counted once per provider). */
const freshCounts = new Map<Scheme, Promise<number>>();
function countOnFreshServer(scheme: Scheme): Promise<number> {
  let count = freshCounts.get(scheme);
  if (!count) {
    count = (async () => {
      const fresh = await startServer(scheme, FILLED);
      try {
        return await countHundredByteValues(fresh);
      } finally {
        await fresh.close();
      }
    })();
    freshCounts.set(scheme, count);
  }
  return count;
}

async function countHundredByteValues(server: KvServer): Promise<number> {
  const kv = await connect(server);
  try {
    return (await fillUntilFull(kv, 'small-', () => 100)).length;
  } finally {
    await kv.close();
  }
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: after a workload of random value sizes is deleted, 100-byte values fill the heap as on a fresh server`, async (t) => {
    const freshCount = await countOnFreshServer(scheme);

    const server = await startServer(scheme, FILLED);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close()); // after a failure too: a client left open reconnects forever and keeps the test file from exiting
    // sizes log-uniform from 16 B to 64 KiB: blocks of about 30 size classes
    const next = random(12);
    const keys = await fillUntilFull(kv, 'random-', () => Math.round(16 * 4096 ** next()));
    t.true(keys.length > 0);
    for (const key of keys) await persist(() => kv.delete(key));
    await kv.close(); // its unused blocks go back too
    await eventually(() => server.stats().heapUsedBytes === 0, 'every deleted block passes its grace period');

    const count = await countHundredByteValues(server);
    t.log(`100-byte values: ${freshCount} on a fresh server, ${count} after ${keys.length} values of random sizes were deleted`);
    t.true(count >= 0.8 * freshCount, `only ${count} of the ${freshCount} a fresh server stores`);
  });

  test(`${scheme}: one client: random value sizes until full, all deleted, then 100-byte values until full, as many as on a fresh server`, async (t) => {
    const freshCount = await countOnFreshServer(scheme);

    // The same client throughout: its pools of ~30 classes hold unused blocks the server must
    // reclaim from it, while 64 PUTs of assorted classes wait for grants.
    const server = await startServer(scheme, FILLED);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const next = random(3);
    const keys = await fillUntilFull(kv, 'random-', () => Math.round(16 * 4096 ** next()));
    const freedBefore = server.stats().blocksFreed;
    for (const key of keys) await persist(() => kv.delete(key));
    await eventually(() => server.stats().blocksFreed >= freedBefore + keys.length, 'every deleted block passes its grace period');
    const count = (await fillUntilFull(kv, 'small-', () => 100)).length;
    t.log(`100-byte values: ${freshCount} on a fresh server, ${count} from the client that wrote ${keys.length} values of random sizes`);
    t.true(count >= 0.8 * freshCount, `only ${count} of the ${freshCount} a fresh server stores`);
  });

  test(`${scheme}: a grant waits for blocks in their grace period: writes right after deletes that left no free block succeed, not KV_OUT_OF_MEMORY`, async (t) => {
    // A grace period long enough that the deleted values' blocks are surely still in it when the
    // next PUTs ask for blocks (the op timeout covers the wait: 2 keepalive intervals + 2 grace periods).
    const graceMs = slow(3000);
    const server = await startServer(scheme, { ...FILLED, graceMs });
    t.teardown(() => server.close());
    const kv = await connect(server, { timeoutMs: 4 * graceMs + 4 * slow(1000) });
    t.teardown(() => kv.close());
    const value = (i: number) => Buffer.alloc(4000, 0x61 + (i % 26));
    const keys = await fillUntilFull(kv, 'full-', () => 4000);
    const freedBefore = server.stats().blocksFreed;
    const deleted = keys.slice(0, 128);
    for (const key of deleted) await persist(() => kv.delete(key));
    t.is(server.stats().blocksFreed, freedBefore, 'the deleted values are still in their grace period');
    // The heap has no free block of this size; 128 are in their grace period.
    await Promise.all(Array.from({ length: 64 }, (_, i) => kv.put(`after-${i}`, value(i))));
    t.true(server.stats().blocksFreed > freedBefore, 'they were served from the deleted values, once their grace period passed');
    for (let i = 0; i < 64; i++) t.true((await kv.get(`after-${i}`))?.equals(value(i)), `after-${i}`);
  });

  test(`${scheme}: a client holding a 1 MiB value leaves room for another client's 1 MiB value`, async (t) => {
    const server = await startServer(scheme, SMALL);
    t.teardown(() => server.close());
    const a = await connect(server);
    t.teardown(() => a.close());
    const b = await connect(server);
    t.teardown(() => b.close());
    const mebibyte = Buffer.alloc(1 << 20, 0x41);
    await a.put('a', mebibyte);
    await b.put('b', mebibyte); // a stays connected, with whatever it was granted
    t.true((await b.get('a'))?.equals(mebibyte));
    t.true((await a.get('b'))?.equals(mebibyte));
  });

  test(`${scheme}: blocks a client was granted and does not use are taken back when another client needs the memory`, async (t) => {
    const freshCount = await countOnFreshServer(scheme);

    const server = await startServer(scheme, FILLED);
    t.teardown(() => server.close());
    // One value in each of many size classes, then deleted: what the grants of those classes
    // brought stays in the client's pools, unused, while it stays connected.
    const holder = await connect(server);
    t.teardown(() => holder.close());
    const sizes: number[] = [];
    for (let size = 100; size <= 100_000; size = Math.ceil(size * 1.25)) sizes.push(size);
    for (const size of sizes) await holder.put(`held-${size}`, Buffer.alloc(size));
    for (const size of sizes) await holder.delete(`held-${size}`);
    await eventually(() => server.stats().blocksFreed === sizes.length, 'the deleted values pass their grace period');

    const count = await countHundredByteValues(server);
    t.log(`100-byte values: ${freshCount} on a fresh server, ${count} while another client holds unused grants`);
    t.true(count >= 0.95 * freshCount, `only ${count} of the ${freshCount} a fresh server stores`);
  });
}
