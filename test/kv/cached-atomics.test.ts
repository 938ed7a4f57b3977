// Counters and locks reached through a client's cached item address stay
// linearizable when another client deletes (and re-creates) the key: the
// DELETE seals the item's word before unlinking it, and an atomic through a
// stale address sees the seal in its own result and starts over. The grace
// period is long here so the caches are certainly still trusted.
import test from 'ava';

import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, slow } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme}: incr through a cached address after another client deleted the counter counts on the live one`, async (t) => {
    const server = await startServer(scheme, { graceMs: 20_000 });
    t.teardown(() => server.close());
    const [a, b] = await Promise.all([connect(server), connect(server)]);
    t.teardown(() => Promise.all([a.close(), b.close()]));
    t.is(await a.incr('c'), 1n);
    t.is(await a.incr('c'), 2n); // a's address of 'c' is cached now
    t.true(await b.delete('c'));
    t.is(await a.incr('c'), 1n, 'after the delete the counter starts again');
    t.is(await b.incr('c'), 2n, 'and b sees the increment a made');
    // Deleted and re-created by the other client.
    t.true(await a.delete('c'));
    t.is(await a.incr('c', 10), 10n); // a caches the new item
    t.true(await b.delete('c'));
    t.is(await b.incr('c', 100), 100n);
    t.is(await a.incr('c'), 101n, 'a counts on the counter b re-created, not the one it cached');
    t.is(await b.incr('c', 0), 101n);
  });

  test(`${scheme}: lock through a cached address after another client deleted and re-took the lock does not also succeed`, async (t) => {
    const server = await startServer(scheme, { graceMs: 20_000 });
    t.teardown(() => server.close());
    const [a, b] = await Promise.all([connect(server), connect(server)]);
    t.teardown(() => Promise.all([a.close(), b.close()]));
    const first = await a.lock('L');
    await first.release(); // a's address of 'L' is cached now
    t.true(await b.delete('L'));
    const held = await b.lock('L'); // a new lock item, held by b
    const error = await t.throwsAsync(a.lock('L', { timeoutMs: 300 }));
    t.regex(String((error as { code?: string }).code), /KV_LOCK_CONTENDED|KV_TIMEOUT/, 'b holds it: a must not acquire it too');
    await held.release();
    const later = await a.lock('L', { timeoutMs: slow(2000) });
    t.true(later.token > held.token, 'tokens grow on the live lock');
    await later.release();
  });
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a cached lock address does not serve incr, nor a cached counter address lock`, async (t) => {
    const server = await startServer(scheme, { graceMs: 20_000 });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const lock = await kv.lock('L');
    await lock.release(); // 'L' cached as a lock
    t.is(((await t.throwsAsync(kv.incr('L'))) as { code?: string }).code, 'KV_TYPE_MISMATCH');
    await kv.incr('c'); // 'c' cached as a counter
    t.is(((await t.throwsAsync(kv.lock('c', { timeoutMs: slow(2000) }))) as { code?: string }).code, 'KV_TYPE_MISMATCH');
    const again = await kv.lock('L', { timeoutMs: slow(2000) });
    t.true(again.token > lock.token, 'the lock word was not touched by the incr');
    await again.release();
  });
}
