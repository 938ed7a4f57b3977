// Every client core a session opens is closed when the session ends: on
// close(), on losing the server, before a reconnect replaces it; and only
// after what it had in flight has failed. None is left to the GC.
import test from 'ava';

import { KvClient, type KvError } from '../../client/index.js';
import { ClientCore } from '../../native/index.js';
import { startServer } from '../helpers/kv.js';
import { providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';

// The typed face, watched: the cores that took ops, and each close() with the ops the core still held.
type Event = { what: 'used' | 'closed'; core: ClientCore; inflight: number };
const events: Event[] = [];
const { submit, close } = ClientCore.prototype;
ClientCore.prototype.submit = function (this: ClientCore, count: number) {
  if (!events.some((e) => e.core === this)) events.push({ what: 'used', core: this, inflight: 0 });
  return submit.call(this, count);
};
ClientCore.prototype.close = function (this: ClientCore, waitMs?: number) {
  events.push({ what: 'closed', core: this, inflight: this.inflight });
  return close.call(this, waitMs);
};

const closesOf = (core: ClientCore) => events.filter((e) => e.core === core && e.what === 'closed');

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: a lost server's core closes once its ops have failed, before the reconnect's core; close() closes the rest`, async (t) => {
    events.length = 0;
    const first = await startServer(scheme);
    const url = first.urls[0]!;
    const holder = await KvClient.connect({ url, timeoutMs: testTimeoutMs() });
    const kv = await KvClient.connect({ url, timeoutMs: testTimeoutMs() });
    t.teardown(() => kv.close());
    await holder.lock('L');
    // In flight in kv's core when the server goes: a LOCK waiting for the holder (backing off and retrying).
    const waiting = kv.lock('L', { timeoutMs: slow(60_000) });
    await kv.put('before', 'restart');
    const [lostCore] = events.filter((e) => e.what === 'used').map((e) => e.core).slice(-1);
    t.is(lostCore!.inflight, 1, 'the LOCK is in the core');
    await first.close();
    t.is(((await t.throwsAsync(waiting)) as KvError).code, 'KV_DISCONNECTED');
    await holder.close();
    // The LOCK may fail from the core's own error completion before the session hears of the
    // disconnect (which closes the core): wait for that close, then check there was one, holding nothing.
    const closeBy = Date.now() + slow(10_000);
    while (closesOf(lostCore!).length === 0 && Date.now() < closeBy) await new Promise((r) => setTimeout(r, 5));
    t.deepEqual(closesOf(lostCore!).map((e) => e.inflight), [0], 'closed once, after its LOCK failed');

    const second = await startServer(scheme, { listen: [url] });
    t.teardown(() => second.close());
    const deadline = Date.now() + slow(10_000);
    while (kv.status !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await kv.put('after', 'restart');
    const cores = [...new Set(events.filter((e) => e.what === 'used').map((e) => e.core))];
    const newCore = cores.at(-1)!;
    t.not(newCore, lostCore);
    t.true(events.findIndex((e) => e.core === lostCore && e.what === 'closed') < events.findIndex((e) => e.core === newCore), 'the lost core closed before its successor took an op');
    t.deepEqual(closesOf(newCore), []);
    await kv.close();
    // Every core that took an op (the holder's too) was closed exactly once, holding nothing.
    for (const core of cores) t.deepEqual(closesOf(core).map((e) => e.inflight), [0]);
  });
}
