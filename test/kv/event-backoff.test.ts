// An event-mode client's op that backs off (a bucket lock held by another
// client) has nothing posted, so no completion will wake the client: the op
// queue must retry it on its own, not wait for the next keepalive tick or an
// unrelated completion. Reached deterministically: another live client holds
// the key's bucket lock (a raw CAS), the PUT starts and backs off, the lock is
// released, and nothing else happens on the connection. The keepalive interval
// (which also polls) is ten minutes, so only the op queue's own retry finishes it.
import test from 'ava';

import { KvLayout } from '../../protocol/constants.js';
import { Opcode, hashKey } from '../../native/index.js';
import { readSuperblock } from '../../server/store/layout.js';
import { connect, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';
import { rawClient } from '../helpers/raw-client.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme} (event): an op backing off from a held bucket lock is retried without any other completion to wake the client`, async (t) => {
    const server = await startServer(scheme, { keepaliveMs: 600_000 });
    t.teardown(() => server.close());
    const kv = await connect(server, { pollMode: 'event', timeoutMs: 30_000 });
    t.teardown(() => kv.close());
    await kv.put('held-key', 'before');

    // A raw connection: a live client, so the orphan scan leaves its lock alone.
    const raw = await rawClient(t, scheme, server);
    const region = server.region;
    const { seed, bucketCount, indexOffset } = readSuperblock(region);
    const { b1, b2 } = hashKey(Buffer.from('held-key'), seed, bucketCount);
    // A PUT locks both of its buckets, the lower index first: hold that one.
    const at = indexOffset + Math.min(b1, b2) * KvLayout.BUCKET_BYTES;
    const cas = async (expect: bigint, swap: bigint) => {
      t.is(await raw.post({ opcode: Opcode.CMP_AND_SWP, length: 8, remoteAddr: raw.hello.region.addr + BigInt(at), compareAdd: expect, swap }), 'SUCCESS');
      t.is(raw.scratch.readBigUInt64LE(0), expect, 'the CAS found the word it expected');
    };
    const free = region.readBigUInt64LE(at);
    t.is(free & 0xffffffffn, 0n, 'the bucket is not locked before the test takes it');
    const held = (free & ~0xffffffffn) | BigInt(raw.hello.clientId);
    await cas(free, held);

    const put = kv.put('held-key', 'after');
    // The PUT has read the buckets, found the lock held and is backing off.
    const servers = (kv as unknown as { servers: Map<string, { backoffs: number }> }).servers;
    await eventually(() => [...servers.values()].some((s) => s.backoffs > 0), 'the PUT backs off from the held lock');
    await cas(held, free);
    // Nothing else happens on the client's connection now: the retry must come from the client
    // itself. Without it the PUT waits for the keepalive's poll, ten minutes away (its own timeout
    // is only checked when it is retried).
    t.timeout(120_000);
    const stuck = new Promise<string>((resolve) => setTimeout(resolve, 60_000, 'stuck')).catch(() => 'stuck');
    t.is(await Promise.race([put.then(() => 'done'), stuck]), 'done', 'the PUT was retried once the lock was free');
    t.is((await kv.get('held-key'))?.toString(), 'after');
  });
}
