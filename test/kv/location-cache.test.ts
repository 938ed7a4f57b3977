// GET in one round trip on a location-cache hit (docs/protocol.md, "GET on a cache hit"): a
// client that read or wrote a key READs its item directly, and answers with it only if the
// READ proves it is the key's current item. Deterministic cases: client A caches a key's
// address; client B rewrites it, deletes it, displaces it, or its block comes back holding a
// write that never committed; A's next GET returns the current value or a miss, and A's
// counters show the path it took. With a check switched off (the core's test hook,
// RKV_TEST_UNCHECKED_LOCATIONS, read when a client connects) the same steps return the stale
// value: the checks are what the cases test. The cases of a stale or reused address run for
// getInto (a registered buffer: header and key into the core's area, the value into the buffer)
// as for get: its hit is a path of its own in the core.
import test, { type ExecutionContext } from 'ava';
import { Registry } from 'prom-client';

import { type ClientStats, type KvClient } from '../../client/index.js';
import { hashKey } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { itemKey, itemStateOffset, readItemHeader } from '../../protocol/index-format.js';
import type { KvServer } from '../../server/kv-server.js';
import { readSuperblock } from '../../server/store/layout.js';
import { connect, forkKvChild, processStopped, startServer } from '../helpers/kv.js';
import { findSlotIn, slotOfKeyIn } from '../helpers/region-file.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';

/** Blocks are not reused within a case, unless it wants reuse. */
const LONG_GRACE = { graceMs: 60_000 };

/** A client whose core skips the named checks of a hit (the hook is read when the core is made). */
async function connectUnchecked(server: KvServer, checks: string): Promise<KvClient> {
  process.env.RKV_TEST_UNCHECKED_LOCATIONS = checks;
  try {
    return await connect(server);
  } finally {
    delete process.env.RKV_TEST_UNCHECKED_LOCATIONS;
  }
}

async function clients(t: ExecutionContext, server: KvServer, unchecked?: string): Promise<[KvClient, KvClient]> {
  const pair = await Promise.all([unchecked ? connectUnchecked(server, unchecked) : connect(server), connect(server)]);
  t.teardown(() => Promise.all(pair.map((c) => c.close())));
  return pair;
}

/** A's counters since `before`. */
function delta(kv: KvClient, before: ClientStats): { hits: number; misses: number; failures: number } {
  const now = kv.stats().locationCache;
  return { hits: now.hits - before.locationCache.hits, misses: now.misses - before.locationCache.misses, failures: now.validationFailures - before.locationCache.validationFailures };
}

/** post_send calls of the client's one server connection. */
function doorbells(kv: KvClient): number {
  const [server] = (kv as unknown as { servers: Map<string, { doorbells: number }> }).servers.values();
  return server!.doorbells;
}

type Via = 'get' | 'getInto';
const VIAS: readonly Via[] = ['get', 'getInto'];
const buffers = new WeakMap<KvClient, Buffer>();

/** `key`'s value as a string, read by `via`: get, or getInto a registered buffer of the client's. */
async function read(kv: KvClient, key: string, via: Via): Promise<string | undefined> {
  if (via === 'get') return (await kv.get(key))?.toString();
  let buffer = buffers.get(kv);
  if (!buffer) buffers.set(kv, (buffer = kv.allocBuffer(64 << 10)));
  const length = await kv.getInto(key, buffer);
  return length === undefined ? undefined : buffer.subarray(0, length).toString();
}

/** The key and value of the item in a heap block (whatever it holds now). */
function blockHolds(server: KvServer, block: number): { key: string; value: string } {
  const { layout, region } = server;
  const at = layout.heapOffset + block * KvLayout.UNIT_BYTES;
  const h = readItemHeader(region, at);
  const key = itemKey(region, at, h.keyLength);
  const valueAt = at + KvLayout.ITEM_HEADER_BYTES + h.keyLength;
  return { key: key.toString(), value: region.subarray(valueAt, valueAt + h.valueLength).toString() };
}

for (const scheme of providersUnderTest()) {
  for (const via of VIAS) test.serial(`${scheme}: a GET (${via}) of a key the client read or wrote takes one READ; a cold one two round trips`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    const [a, b] = await clients(t, server);
    await a.put('hot', 'value 1');
    let before = a.stats();
    let bells = doorbells(a);
    for (let i = 0; i < 20; i++) t.is(await read(a, 'hot', via), 'value 1');
    t.deepEqual(delta(a, before), { hits: 20, misses: 0, failures: 0 }, 'its own PUT told A where the item is');
    t.is(doorbells(a) - bells, 20, 'one doorbell (one READ round trip) per GET');
    t.is(a.stats().oneRoundTripGets - before.oneRoundTripGets, 20);

    before = b.stats();
    bells = doorbells(b);
    t.is(await read(b, 'hot', via), 'value 1');
    t.deepEqual(delta(b, before), { hits: 0, misses: 1, failures: 0 });
    t.is(doorbells(b) - bells, 2, 'a miss: buckets, then item');
    bells = doorbells(b);
    t.is(await read(b, 'hot', via), 'value 1');
    t.deepEqual(delta(b, before), { hits: 1, misses: 1, failures: 0 }, 'the GET taught B the address');
    t.is(doorbells(b) - bells, 1);
    t.is(await read(b, 'absent', via), undefined);
    t.is(await read(b, 'absent', via), undefined);
    t.deepEqual(delta(b, before), { hits: 1, misses: 3, failures: 0 }, 'a missing key is never cached');
  });

  // A hit is trusted only if its READ took less than half the grace period (a block is reused
  // no sooner than a grace period after its item was unlinked). The client core times it from
  // its submit's clock to its poll's: a READ held up between the two (the shm provider's test
  // hook stops the process right before it executes) must count as long. A get's late hit is
  // not trusted (the full path answers); a getInto's is confirmed as a late large READ is, by
  // reading the header again once the value has landed (same version, still live): a hit.
  if (scheme === 'shm') {
    for (const [via, held] of [['get', false], ['get', true], ['getInto', false], ['getInto', true]] as const) {
      const late = via === 'get' ? 'is not trusted: the full path answers' : 'is confirmed by a second READ of its header (a miss in the counts)';
      test.serial(`${scheme}: a hit (${via}) whose READ was ${held ? `held past half the grace period ${late}` : 'not held is trusted'}`, async (t) => {
        const server = await startServer(scheme, { graceMs: 200 });
        t.teardown(() => server.close());
        const value = 'v'.repeat(100);
        const itemBytes = Math.ceil((KvLayout.ITEM_HEADER_BYTES + 'late'.length + value.length) / KvLayout.UNIT_BYTES) * KvLayout.UNIT_BYTES;
        // getInto's hit READs the header and key (then the value into the buffer): the first READ of that length.
        const readBytes = via === 'get' ? itemBytes : KvLayout.ITEM_HEADER_BYTES + 'late'.length;
        const env = held ? { RKV_SHM_TEST_STOP_BEFORE: `READ:${readBytes}` } : {};
        const child = forkKvChild(t, [via === 'get' ? 'putget' : 'putgetinto', server.urls[0]!, 'late', value], { env });
        const report = new Promise<Record<string, unknown>>((resolve) => child.on('message', resolve));
        if (held) {
          await eventually(() => processStopped(child.pid!), 'the client stopped itself right before the READ of its hit');
          await new Promise((resolve) => setTimeout(resolve, 300)); // past half the grace period (100 ms)
          child.kill('SIGCONT');
        }
        const { value: read, locationCache } = (await report) as { value: string; locationCache: { hits: number; validationFailures: number } };
        t.is(read, value);
        t.deepEqual([locationCache.hits, locationCache.validationFailures], !held ? [1, 0] : via === 'get' ? [0, 1] : [0, 0]);
      });
    }
  }

  test.serial(`${scheme}: a getInto whose buffer is too short for a cached key's value answers KV_BUFFER_TOO_SMALL and keeps the entry`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await kv.put('k', 'v'.repeat(100));
    const before = kv.stats();
    const error = await t.throwsAsync(kv.getInto('k', kv.allocBuffer(64).subarray(0, 10)));
    t.is((error as { code?: string }).code, 'KV_BUFFER_TOO_SMALL');
    t.deepEqual(delta(kv, before), { hits: 0, misses: 1, failures: 0 }, 'not a failed check: nothing stale was read');
    t.is(await read(kv, 'k', 'getInto'), 'v'.repeat(100));
    t.deepEqual(delta(kv, before), { hits: 1, misses: 1, failures: 0 }, 'the entry was kept');
  });

  test.serial(`${scheme}: a client's metrics count GETs by the path they took`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    const registry = new Registry();
    const kv = await connect(server, { metrics: registry });
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    await kv.get('k');
    await kv.get('k');
    await kv.get('other');
    const counted = (await registry.getSingleMetric('rdmakv_client_get_location_cache_total')!.get()).values;
    const by = (result: string) => counted.find((v) => v.labels.result === result)?.value;
    t.is(by('hit'), 2);
    t.is(by('miss'), 1);
    t.is(by('validation_failure'), 0);
  });

  test.serial(`${scheme}: locationCacheEntries 0 turns the cache off: every GET takes two round trips`, async (t) => {
    const server = await startServer(scheme, LONG_GRACE);
    t.teardown(() => server.close());
    const kv = await connect(server, { locationCacheEntries: 0 });
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    const bells = doorbells(kv);
    for (let i = 0; i < 5; i++) t.is((await kv.get('k'))?.toString(), 'v');
    t.is(doorbells(kv) - bells, 10);
    t.deepEqual(kv.stats().locationCache, { hits: 0, misses: 5, validationFailures: 0 });
    const error = await t.throwsAsync(connect(server, { locationCacheEntries: -1 }));
    t.is((error as { code?: string }).code, 'KV_INVALID_ARGUMENT');
  });

  test.serial(`${scheme}: an entry older than the grace period is still tried, and hits: STATE binds the item to its own version`, async (t) => {
    const server = await startServer(scheme, { graceMs: 40 });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const before = kv.stats();
    const bells = doorbells(kv);
    t.is((await kv.get('k'))?.toString(), 'v');
    t.deepEqual(delta(kv, before), { hits: 1, misses: 0, failures: 0 }, 'no age bound: the checks alone prove the item current');
    t.is(doorbells(kv) - bells, 1);
  });

  for (const via of VIAS) for (const unchecked of [undefined, 'state']) {
    const how = unchecked ? ' (STATE check off: stale, as it must be without it)' : '';
    test.serial(`${scheme}: a key rewritten behind A's cached address (${via})${how}`, async (t) => {
      const server = await startServer(scheme, LONG_GRACE);
      t.teardown(() => server.close());
      const [a, b] = await clients(t, server, unchecked);
      await b.put('k', 'old value');
      t.is(await read(a, 'k', via), 'old value'); // A learns the address
      await b.put('k', 'new value');
      const before = a.stats();
      if (unchecked) {
        t.is(await read(a, 'k', via), 'old value', 'without the STATE check the superseded item passes every other check');
        return;
      }
      t.is(await read(a, 'k', via), 'new value');
      t.deepEqual(delta(a, before), { hits: 0, misses: 0, failures: 1 }, 'the hit failed its check and fell back');
      t.is(await read(a, 'k', via), 'new value');
      t.deepEqual(delta(a, before), { hits: 1, misses: 0, failures: 1 }, 'the fallback taught A the new address');
    });

    test.serial(`${scheme}: a key deleted behind A's cached address (${via})${how}`, async (t) => {
      const server = await startServer(scheme, LONG_GRACE);
      t.teardown(() => server.close());
      const [a, b] = await clients(t, server, unchecked);
      await b.put('k', 'deleted value');
      t.is(await read(a, 'k', via), 'deleted value');
      t.true(await b.delete('k'));
      const before = a.stats();
      if (unchecked) {
        t.is(await read(a, 'k', via), 'deleted value');
        return;
      }
      t.is(await read(a, 'k', via), undefined);
      t.deepEqual(delta(a, before), { hits: 0, misses: 0, failures: 1 });
      t.is(await read(a, 'k', via), undefined);
      t.deepEqual(delta(a, before), { hits: 0, misses: 1, failures: 1 }, 'the entry was forgotten');
    });
  }

  // A READ torn across a block's reuse can pair the old item's header, key and value (checksum and
  // version intact) with the STATE word the reused block's new item wrote: live for that item, i.e.
  // its own version. The test puts exactly that word into the cached item (a CPU store on the
  // server's region: no atomic touches STATE) and shows the hit refuses it, and that without the
  // STATE check it would have been taken.
  for (const via of VIAS) for (const unchecked of [undefined, 'state']) {
    const how = unchecked ? ' (STATE check off: taken, as it must be without it)' : '';
    test.serial(`${scheme}: a STATE word that is another item's (a READ torn across reuse) fails the hit (${via})${how}`, async (t) => {
      const server = await startServer(scheme, LONG_GRACE);
      t.teardown(() => server.close());
      const [a, b] = await clients(t, server, unchecked);
      await b.put('k', 'value');
      t.is(await read(a, 'k', via), 'value'); // A learns the address
      const at = server.layout.heapOffset + slotOfKeyIn(server.region, 'k').block * KvLayout.UNIT_BYTES;
      const { version } = readItemHeader(server.region, at);
      server.region.writeBigUInt64LE(version + 1n, itemStateOffset(at)); // a later write's version: another item's live STATE
      const before = a.stats();
      t.is(await read(a, 'k', via), 'value', 'the item is still linked: the value is right either way');
      if (unchecked) {
        t.deepEqual(delta(a, before), { hits: 1, misses: 0, failures: 0 });
        return;
      }
      t.deepEqual(delta(a, before), { hits: 0, misses: 0, failures: 1 }, 'the hit failed its check and fell back');
      t.is(await read(a, 'k', via), 'value');
      t.deepEqual(delta(a, before), { hits: 0, misses: 1, failures: 1 }, 'an item whose STATE is not its own is not cached again');
    });
  }

  test.serial(`${scheme}: a key displaced to its other bucket is still found through the cache, and its rewrite is not missed`, async (t) => {
    // Whether an insert moves k (and not another resident) depends on the region's random hash
    // seed: a region whose fill ends in KV_TABLE_FULL before k moves is set aside for a fresh one
    // (a new seed). A first try filled up in 3 of 13 runs here: eight in a row, about 1 in 10^5.
    for (let attempt = 1; attempt <= 8; attempt++) {
      const buckets = 16;
      const server = await startServer(scheme, { ...LONG_GRACE, buckets, memoryBytes: 16 << 20 });
      t.teardown(() => server.close());
      const [a, b] = await clients(t, server);
      await b.put('k', 'moved value');
      t.is((await a.get('k'))?.toString(), 'moved value');
      const home = slotOfKeyIn(server.region, 'k');
      // B fills k's bucket with keys that hash to it, until an insert moves k to its other bucket.
      const seed = readSuperblock(server.region).seed;
      let moved = false;
      let full = false;
      for (let i = 0, puts = 0; !moved && !full && puts < buckets * KvLayout.SLOTS_PER_BUCKET; i++) {
        const { b1, b2 } = hashKey(Buffer.from(`f${i}`), seed, buckets);
        if (b1 !== home.bucket && b2 !== home.bucket) continue;
        full = await b.put(`f${i}`, 'filler').then(
          () => false,
          (error: unknown) => {
            if ((error as { code?: string }).code !== 'KV_TABLE_FULL') throw error;
            return true;
          },
        );
        puts++;
        moved = findSlotIn(server.region, 'k')?.bucket !== home.bucket;
      }
      if (!moved && attempt < 8) {
        t.log(`try ${attempt}: the table filled before k moved; a fresh region`);
        continue;
      }
      t.true(moved, 'k was displaced');
      t.is(findSlotIn(server.region, 'k')?.block, home.block, 'a displacement moves the slot, not the item');
      let before = a.stats();
      t.is((await a.get('k'))?.toString(), 'moved value');
      t.deepEqual(delta(a, before), { hits: 1, misses: 0, failures: 0 }, 'the item is unchanged and current: a hit is right');
      await b.put('k', 'rewritten after the move');
      before = a.stats();
      t.is((await a.get('k'))?.toString(), 'rewritten after the move');
      t.deepEqual(delta(a, before), { hits: 0, misses: 0, failures: 1 });
      return;
    }
  });

  // The block A cached comes back (small heap, short grace) holding B's item of the same key
  // from a CAS that failed: intact, live (its STATE is its own version), of A's key, never
  // committed. Only the version check tells it from the current item.
  for (const via of VIAS) for (const unchecked of [undefined, 'version']) {
    const how = unchecked === undefined ? '' : ' (version check off: a value never written comes back, as it must without it)';
    test.serial(`${scheme}: A's cached block reused for an uncommitted write of the key (${via})${how}`, async (t) => {
      const server = await startServer(scheme, { memoryBytes: 4 << 20, maxClients: 4, maxValueBytes: 4096, buckets: 1024, graceMs: 5 });
      t.teardown(() => server.close());
      const [a, b] = await clients(t, server, unchecked);
      // 'committed' and 'neverdone': one length, so one size class, so the CAS's block is one a PUT of k could use
      const value = (tag: 'committed' | 'neverdone', i: number) => `${tag}-${String(i).padStart(6, '0')}`;
      await b.put('k', value('committed', 0));
      t.is(await read(a, 'k', via), value('committed', 0));
      const cached = slotOfKeyIn(server.region, 'k').block;
      let last = 0;
      let phantom: string | undefined;
      for (let i = 1; i <= 4000 && phantom === undefined; i++) {
        await b.put('k', value('committed', i));
        last = i;
        t.false(await b.cas('k', 1n, value('neverdone', i)), 'the CAS expects a version k never had');
        const held = blockHolds(server, cached);
        if (held.key === 'k' && held.value === value('neverdone', i)) phantom = held.value;
        if (i % 50 === 0) await new Promise((resolve) => setTimeout(resolve, 10)); // let retired blocks through their grace
      }
      t.truthy(phantom, "A's block came back holding an uncommitted write of k");
      t.not(slotOfKeyIn(server.region, 'k').block, cached, 'and no slot names it');
      const before = a.stats();
      const got = await read(a, 'k', via);
      if (unchecked === 'version') {
        t.is(got, phantom);
        return;
      }
      t.is(got, value('committed', last));
      t.deepEqual(delta(a, before), { hits: 0, misses: 0, failures: 1 });
    });
  }
}
