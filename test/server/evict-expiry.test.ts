// The expiry sweep (issue 16, server side): items whose EXPIRY has passed are removed in the
// background and their memory reused; items not yet expired, never expiring, or whose header
// does not check out are kept. Until puts with a TTL exist, the test forges the EXPIRY of
// items clients wrote (and their checksum, which covers it).
import test from 'ava';

import type { KvClient, KvError } from '../../client/index.js';
import { itemChecksum } from '../../native/index.js';
import { ItemHeader, KvLayout } from '../../protocol/constants.js';
import { EMPTY_SLOT, IndexView, readItemHeader, slotBlock } from '../../protocol/index-format.js';
import type { KvServer } from '../../server/kv-server.js';
import { connect, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';

/** Region offsets of the items the index links, by key. */
function linkedItems(server: KvServer): Map<string, number> {
  const { layout, region } = server;
  const index = new IndexView(region, layout.indexOffset, layout.bucketCount);
  const items = new Map<string, number>();
  for (let bucket = 0; bucket < layout.bucketCount; bucket++) {
    for (let i = 0; i < KvLayout.SLOTS_PER_BUCKET; i++) {
      const slot = index.slot(bucket, i);
      if (slot === EMPTY_SLOT) continue;
      const at = layout.heapOffset + slotBlock(slot) * KvLayout.UNIT_BYTES;
      const { keyLength } = readItemHeader(region, at);
      items.set(region.toString('latin1', at + KvLayout.ITEM_HEADER_BYTES, at + KvLayout.ITEM_HEADER_BYTES + keyLength), at);
    }
  }
  return items;
}

/** Sets an item's EXPIRY and, unless `damage`, a checksum that covers it. */
function forgeExpiry(region: Buffer, at: number, expiry: number, damage = false): void {
  const { keyLength, valueLength } = readItemHeader(region, at);
  region.writeBigUInt64LE(BigInt(expiry), at + ItemHeader.EXPIRY);
  const item = region.subarray(at, at + KvLayout.ITEM_HEADER_BYTES + keyLength + valueLength);
  region.writeUInt32LE((itemChecksum(item) + (damage ? 1 : 0)) >>> 0, at + ItemHeader.CHECKSUM);
}

async function putAll(kv: KvClient, keys: string[], bytes: number): Promise<string[]> {
  const failed: string[] = [];
  for (let i = 0; i < keys.length; i += 64) {
    await Promise.all(
      keys.slice(i, i + 64).map(async (key) => {
        try {
          await kv.put(key, Buffer.alloc(bytes, 7));
        } catch (error) {
          failed.push((error as KvError).code ?? String(error));
        }
      }),
    );
  }
  return failed;
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: the sweep removes expired items only, and their memory is reused`, async (t) => {
    // expirySweepMs long: the test runs passes itself (sweepExpired), so it knows when one ran.
    const server = await startServer(scheme, { memoryBytes: 16 << 20, graceMs: 50, expirySweepMs: 3_600_000 });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const VALUE = 4000;
    // Fill the heap (no eviction: the last PUTs fail with KV_OUT_OF_MEMORY).
    const keys = Array.from({ length: Math.ceil(server.layout.heapBytes / VALUE) + 200 }, (_, i) => `e${i}`);
    const failed = await putAll(kv, keys, VALUE);
    t.true(failed.length > 0 && failed.every((code) => code === 'KV_OUT_OF_MEMORY'), failed.slice(0, 3).join());
    const items = linkedItems(server);
    const stored = keys.filter((key) => items.has(key));
    // Four kept: one never expires, one expires in an hour, one expired but damaged, one expired but a counter.
    const [never, later, damaged, ...expired] = stored;
    forgeExpiry(server.region, items.get(later!)!, Date.now() + 3_600_000);
    forgeExpiry(server.region, items.get(damaged!)!, Date.now() - 1, true);
    for (const key of expired) forgeExpiry(server.region, items.get(key)!, Date.now() - 1);
    await kv.incr('a-counter', 5);
    await eventually(() => linkedItems(server).has('a-counter'), 'the counter is linked');
    forgeExpiry(server.region, linkedItems(server).get('a-counter')!, Date.now() - 1);
    const usedBefore = server.stats().heapUsedBytes;
    await eventually(async () => (await server.sweepExpired()) === 0 && server.stats().expirations === expired.length, 'the sweep removed the expired items');
    t.is(server.stats().expirations, expired.length);
    t.true(server.stats().removedBytes.expired >= expired.length * VALUE);
    const after = linkedItems(server);
    t.true(after.has(never!) && after.has(later!) && after.has(damaged!));
    t.false(expired.some((key) => after.has(key)));
    t.is(await kv.get(expired[0]!), undefined);
    t.truthy(await kv.get(never!));
    // Counters never expire (docs/protocol.md, "Expiry"): the sweep leaves one alone even with an
    // EXPIRY forged into it, and clients read that EXPIRY as damage, not as an expiry.
    t.true(after.has('a-counter'), 'the sweep left the counter linked');
    await t.throwsAsync(kv.incr('a-counter', 0), { code: 'KV_CORRUPT' });
    // After the grace period the memory is the heap's again: as many fresh values fit as expired.
    await eventually(() => server.stats().heapUsedBytes < usedBefore - expired.length * VALUE * 0.9, 'their blocks are free after the grace period');
    const fresh = Array.from({ length: Math.floor(expired.length * 0.95) }, (_, i) => `n${i}`);
    t.deepEqual(await putAll(kv, fresh, VALUE), []);
  });
}
