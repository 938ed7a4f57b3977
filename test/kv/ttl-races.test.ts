// expire and persist racing writes, with the race held open deterministically:
// the hook between their read and their write (client/expiry.ts) runs the
// other client's write there. Their write is a CAS on the version they read, so
// the racing write is never undone: they read again and apply to what is there
// (or find the key gone, and leave it gone).
import test from 'ava';

import type { KvClient } from '../../client/index.js';
import { expiryHooks } from '../../client/expiry.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

const HOUR = 3_600_000;

/** Runs `race` once, at the first read of the next expire or persist. */
function raceOnce(race: () => Promise<unknown>): { ran: () => number } {
  let runs = 0;
  expiryHooks.afterRead = async () => {
    runs++;
    expiryHooks.afterRead = undefined;
    await race();
  };
  return { ran: () => runs };
}

// The hook is module state: these tests run one after another.
for (const scheme of providersUnderTest()) {
  async function clients(t: { teardown: (f: () => unknown) => void }): Promise<[KvClient, KvClient]> {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const a = await connect(server);
    t.teardown(() => a.close());
    const b = await connect(server);
    t.teardown(() => b.close());
    t.teardown(() => (expiryHooks.afterRead = undefined));
    return [a, b];
  }

  test.serial(`${scheme}: expire racing a put: the put's value stays, with the TTL`, async (t) => {
    const [a, b] = await clients(t);
    await a.put('k', 'A');
    const race = raceOnce(() => b.put('k', 'B'));
    t.true(await a.expire('k', HOUR));
    t.is(race.ran(), 1);
    t.is((await b.get('k'))?.toString(), 'B', 'the racing put was not undone');
    const left = await b.ttl('k');
    t.true(left !== undefined && left <= HOUR && left > HOUR - 60_000, `ttl ${left}`);
  });

  test.serial(`${scheme}: persist racing a put with a TTL: the put's value stays, without a TTL`, async (t) => {
    const [a, b] = await clients(t);
    await a.put('k', 'A', { ttlMs: HOUR });
    const race = raceOnce(() => b.put('k', 'B', { ttlMs: 2 * HOUR }));
    t.true(await a.persist('k'));
    t.is(race.ran(), 1);
    t.is((await b.get('k'))?.toString(), 'B');
    t.is(await b.ttl('k'), Infinity);
  });

  test.serial(`${scheme}: persist racing a put without a TTL: nothing left to persist, nothing written`, async (t) => {
    const [a, b] = await clients(t);
    await a.put('k', 'A', { ttlMs: HOUR });
    const race = raceOnce(() => b.put('k', 'B'));
    t.false(await a.persist('k'), 'the value now there has no TTL');
    const now = await b.getWithVersion('k');
    t.is(now?.value.toString(), 'B');
    t.is(await b.ttl('k'), Infinity);
    t.is(race.ran(), 1);
  });

  test.serial(`${scheme}: expire racing a delete: the key stays deleted (never resurrected)`, async (t) => {
    const [a, b] = await clients(t);
    await a.put('k', 'A');
    const race = raceOnce(() => b.delete('k'));
    t.false(await a.expire('k', HOUR));
    t.is(race.ran(), 1);
    t.is(await b.get('k'), undefined);
  });

  test.serial(`${scheme}: expire racing another expire: both apply, the last one's TTL wins`, async (t) => {
    const [a, b] = await clients(t);
    await a.put('k', 'A');
    const race = raceOnce(() => b.expire('k', 2 * HOUR));
    t.true(await a.expire('k', HOUR));
    t.is(race.ran(), 1);
    t.is((await b.get('k'))?.toString(), 'A');
    const left = await b.ttl('k');
    t.true(left !== undefined && left <= HOUR && left > HOUR - 60_000, `a's TTL, written last: ${left}`);
  });
}
