// A process that stalls (a blocked event loop, a long GC, a starved VM) does not take its peer for
// dead for its own pause: the server and the client count keepalive silence only over time they
// ran (protocol/stall-clock.ts). The Soft-RoCE guest's tests, whose server and clients share one
// starved process, lost connections this way (evict.test.ts: "keepalive timeout", silent 23 s).
import test from 'ava';

import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, slow } from '../helpers/providers.js';

/** Blocks this process — the server and the client in it — as a stall would. */
function stall(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // busy: no timer, no completion is handled meanwhile
  }
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a stall of the whole process for six keepalive intervals fences nobody`, async (t) => {
    const keepaliveMs = slow(100);
    const server = await startServer(scheme, { keepaliveMs });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await kv.put('before', 'written before the stall');
    await new Promise((resolve) => setTimeout(resolve, 3 * keepaliveMs)); // a few sweeps and pings on time
    // Both keepalive timers come due during the stall and fire first after it, before any ping
    // or pong of the two is drained: the bad interleaving, every time. Nothing is sent right
    // after the stall (a PUT's notice would be a sign of life drained first).
    stall(6 * keepaliveMs);
    await new Promise((resolve) => setTimeout(resolve, 2 * keepaliveMs));
    await kv.put('after', 'written after the stall');
    t.is((await kv.get('after'))?.toString(), 'written after the stall');
    t.is((await kv.get('before'))?.toString(), 'written before the stall');
    const stats = server.stats();
    t.is(stats.keepaliveFailures, 0);
    t.is(stats.fencedClients, 0);
    t.is(stats.clients, 1);
  });
}
