// Lock words owned by a client id that is not connected (a leak, or a word
// corrupted to a random owner) are released by the server's periodic orphan
// scan, through RDMA CMP_AND_SWP on its loopback connection, and counted
// (rdmakv_orphan_locks_released_total); the keys behind them work again.
import test from 'ava';

import { ItemHeader, KvLayout } from '../../protocol/constants.js';
import { Opcode, hashKey } from '../../native/index.js';
import { createRegistry } from '../../server/metrics.js';
import { readSuperblock } from '../../server/store/layout.js';
import { connect, serverLog, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest, testTimeoutMs } from '../helpers/providers.js';
import { rawClient } from '../helpers/raw-client.js';
import { slotOfKeyIn } from '../helpers/region-file.js';

// An owner id no client of this server has (below 2^31: a lock item owner with bit 31 set is a
// DELETE's seal, which the server never undoes; see docs/protocol.md, INCR).
const NOBODY = 0x5eadbeef;

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a bucket lock and a lock item held by an id that is not connected are released, counted, and the keys work again`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await (await kv.lock('orphaned-lock')).release(); // the lock item exists, free

    // A raw connection, as a client that knows the token: it may change any word with atomics.
    const raw = await rawClient(t, scheme, server);
    const region = server.region;
    const casToNobody = async (at: number) => {
      const word = region.readBigUInt64LE(at);
      t.is(word & 0xffffffffn, 0n, 'the word is free before the test takes it');
      const cas = await raw.post({
        opcode: Opcode.CMP_AND_SWP, length: 8, remoteAddr: raw.hello.region.addr + BigInt(at), compareAdd: word, swap: (word & ~0xffffffffn) | BigInt(NOBODY),
      });
      t.is(cas, 'SUCCESS');
      t.is(region.readBigUInt64LE(at) & 0xffffffffn, BigInt(NOBODY));
    };
    // The first bucket of 'orphaned-key', and the lock item of 'orphaned-lock'.
    const { seed, bucketCount, indexOffset } = readSuperblock(region);
    const { b1 } = hashKey(Buffer.from('orphaned-key'), seed, bucketCount);
    await casToNobody(indexOffset + b1 * KvLayout.BUCKET_BYTES);
    await casToNobody(slotOfKeyIn(region, 'orphaned-lock').itemAt + ItemHeader.ATOMIC_WORD);

    await eventually(() => server.stats().orphanLocksReleased === 2, 'the server released both orphaned locks');
    await kv.put('orphaned-key', 'writable again'); // KV_LOCK_CONTENDED while the orphan stays
    t.is((await kv.get('orphaned-key'))?.toString(), 'writable again');
    const lock = await kv.lock('orphaned-lock', { timeoutMs: testTimeoutMs() });
    await lock.release();
    // Only the orphans: the raw connection and the client are live, nothing of theirs was touched.
    t.is(server.stats().orphanLocksReleased, 2);
    t.is(server.stats().lockRecoveries, 0);
    const metrics = await createRegistry(() => server.stats(), { defaultMetrics: false }).metrics();
    t.regex(metrics, /^rdmakv_orphan_locks_released_total 2$/m);
  });

  test(`${scheme}: locks of live clients are never taken for orphans`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const other = await connect(server);
    t.teardown(() => other.close());
    const held = await kv.lock('held-lock');
    // Three scans (one per keepalive interval) pass while the lock is held and PUTs take bucket locks all along.
    let scans = 0;
    server.on('orphanScan', () => scans++);
    try {
      for (let i = 0; scans < 3; i++) await kv.put(`k${i % 50}`, `v${i}`);
    } catch (error) {
      t.log(`the server's last log lines:\n${serverLog(server).join('\n')}`); // why the connection went (CI shows no more)
      throw error;
    }
    const contended = await other.lock('held-lock', { timeoutMs: 200 }).then(() => 'acquired', (error: { code: string }) => error.code);
    t.not(contended, 'acquired');
    await held.release();
    t.is(server.stats().orphanLocksReleased, 0);
  });
}
