// A damaged index fails only the operations that meet the damage: a slot that
// points outside the heap is answered with KV_CORRUPT for its key, and every
// other operation on the same connection, in flight at the same time, goes on.
// (Before, the READ of that slot failed at the device and broke the queue pair:
// everything in flight failed with KV_DISCONNECTED.)
import test from 'ava';

import { KvLayout } from '../../protocol/constants.js';
import type { KvError } from '../../client/index.js';
import { hashKey } from '../../native/index.js';
import { readSuperblock } from '../../server/store/layout.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a slot pointing outside the heap fails only its key's operations, with KV_CORRUPT`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const others = Array.from({ length: 40 }, (_, i) => `other-${i}`);
    await Promise.all(others.map((key) => kv.put(key, `value of ${key}`)));

    // Damage: a slot with the key's fingerprint whose block lies past the end of the heap,
    // in an empty slot of the key's first bucket (a test may write the region directly).
    const { layout, region } = server;
    const { b1, fingerprint } = hashKey(Buffer.from('damaged'), readSuperblock(region).seed, layout.bucketCount);
    const bucket = layout.indexOffset + b1 * KvLayout.BUCKET_BYTES;
    const empty = [1, 2, 3, 4, 5, 6, 7].find((i) => region.readBigUInt64LE(bucket + 8 * i) === 0n)!;
    const pastHeap = BigInt(layout.heapBytes / KvLayout.UNIT_BYTES + 1000);
    region.writeBigUInt64LE((BigInt(fingerprint) << 48n) | (2n << 32n) | pastHeap, bucket + 8 * empty);

    const [get, put, del, ...rest] = await Promise.allSettled([
      kv.get('damaged'),
      kv.put('damaged', 'x'),
      kv.delete('damaged'),
      ...others.map((key) => kv.get(key)),
    ]);
    for (const outcome of [get, put, del]) {
      t.is(outcome!.status, 'rejected');
      t.is(((outcome as PromiseRejectedResult).reason as KvError).code, 'KV_CORRUPT');
    }
    rest.forEach((outcome, i) => {
      t.is(outcome.status, 'fulfilled', `${others[i]}: ${String((outcome as PromiseRejectedResult).reason)}`);
      t.is((outcome as PromiseFulfilledResult<Buffer | undefined>).value?.toString(), `value of ${others[i]}`);
    });
    // The connection is whole: new work succeeds.
    await kv.put('after', 'fine');
    t.is((await kv.get('after'))?.toString(), 'fine');
    t.is(kv.status, 'ready');
  });
}
