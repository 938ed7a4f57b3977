// The location cache's sets (native/kv/location_cache.h): 4-way sets, so keys that share a set
// all stay cached, a key rewritten by its own client keeps one way (its newest item), and a way
// evicted and reused by another key never makes a GET answer with anything but the key's current
// value. A cache of 4 entries is one set: every key falls in it.
import test from 'ava';

import type { KvClient } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

/** Blocks are not reused within a case. */
const LONG_GRACE = { graceMs: 60_000 };

function counts(kv: KvClient): { hits: number; misses: number; failures: number } {
  const s = kv.stats().locationCache;
  return { hits: s.hits, misses: s.misses, failures: s.validationFailures };
}

function since(kv: KvClient, before: ReturnType<typeof counts>): ReturnType<typeof counts> {
  const now = counts(kv);
  return { hits: now.hits - before.hits, misses: now.misses - before.misses, failures: now.failures - before.failures };
}

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: four keys in a cache of four entries (one set) all stay cached`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    // Three rounds, three fresh clients: a direct-mapped table of 4 would keep 4 keys apart in
    // under 10 % of rounds (4!/4^4).
    for (let round = 0; round < 3; round++) {
      const kv = await connect(server, { locationCacheEntries: 4 });
      t.teardown(() => kv.close());
      const keys = [0, 1, 2, 3].map((i) => `round ${round} key ${i}`);
      for (const key of keys) await kv.put(key, `${key} value`);
      const before = counts(kv);
      for (let pass = 0; pass < 3; pass++) for (const key of keys) t.is((await kv.get(key))?.toString(), `${key} value`);
      t.deepEqual(since(kv, before), { hits: 12, misses: 0, failures: 0 }, `round ${round}: every key in its own way`);
    }
  });

  test.serial(`${scheme}: a key its client rewrites keeps one way, with its newest item`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    const kv = await connect(server, { locationCacheEntries: 4 });
    t.teardown(() => kv.close());
    for (let i = 0; i < 6; i++) await kv.put('k', `value ${i}`);
    const before = counts(kv);
    t.is((await kv.get('k'))?.toString(), 'value 5');
    t.deepEqual(since(kv, before), { hits: 1, misses: 0, failures: 0 }, 'no older way of the key was found first');
  });

  test.serial(`${scheme}: a fifth key evicts a way; the evicted key misses, and no GET answers stale`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    const a = await connect(server, { locationCacheEntries: 4 });
    const b = await connect(server);
    t.teardown(() => Promise.all([a.close(), b.close()]));
    const keys = [0, 1, 2, 3, 4].map((i) => `key ${i}`);
    for (const key of keys) await a.put(key, `${key} v0`);
    let before = counts(a);
    for (const key of keys) t.is((await a.get(key))?.toString(), `${key} v0`);
    const first = since(a, before);
    t.is(first.failures, 0);
    t.true(first.misses >= 1, 'five keys do not fit in four ways');
    t.is(first.hits + first.misses, 5);

    // B rewrites every key behind A's cached ways: A answers each with B's value.
    for (const key of keys) await b.put(key, `${key} v1`);
    before = counts(a);
    for (const key of keys) t.is((await a.get(key))?.toString(), `${key} v1`);
    t.is(since(a, before).hits, 0, 'no cached way still names a current item');
  });

  test.serial(`${scheme}: ways evicted and reused under churn never answer stale (12 keys, 4 ways, a writer beside)`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    const a = await connect(server, { locationCacheEntries: 4 });
    const b = await connect(server);
    t.teardown(() => Promise.all([a.close(), b.close()]));
    const latest = new Map<string, string>();
    let state = 12345;
    const next = (n: number) => {
      state = (Math.imul(state, 1103515245) + 12345) >>> 0;
      return (state >>> 8) % n;
    };
    for (let i = 0; i < 12; i++) {
      latest.set(`key ${i}`, `key ${i} w0`);
      await a.put(`key ${i}`, `key ${i} w0`);
    }
    for (let step = 1; step <= 300; step++) {
      const key = `key ${next(12)}`;
      const action = next(4);
      if (action === 0) {
        latest.set(key, `${key} w${step}`);
        await b.put(key, `${key} w${step}`);
      } else if (action === 1) {
        latest.set(key, `${key} a${step}`);
        await a.put(key, `${key} a${step}`);
      } else {
        t.is((await a.get(key))?.toString(), latest.get(key), `step ${step}: ${key}`);
      }
    }
    t.true(counts(a).hits > 0, 'the cache was used');
  });
}
