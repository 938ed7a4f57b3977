// Large values (docs/api.md, "Large values"; docs/protocol.md, "Large values"):
// values up to --max-value (64 MiB here) through put, get and getInto; a
// registered buffer's value moves without a copy through the core's scratch or
// arena; lengths on both sides of the slot's switch from 64 B units to 4 KiB
// granules; a damaged or reused large item is never returned; large items
// survive a restart on a region file; bad input is a typed rejection.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import test from 'ava';

import { KvBadBufferError, KvBufferTooSmallError, type KvClient, type KvError } from '../../client/index.js';
import { crc32c } from '../../native/index.js';
import { IndexWord, KvLayout } from '../../protocol/constants.js';
import { grantBatch } from '../../protocol/control.js';
import { readItemHeader, slotUnits } from '../../protocol/index-format.js';
import { connect, runKvChild, startServer } from '../helpers/kv.js';
import { slotOfKeyIn } from '../helpers/region-file.js';
import { eventually, providersUnderTest, testTimeoutMs } from '../helpers/providers.js';

const MiB = 1 << 20;
const LARGE = { maxValueBytes: 64 * MiB, memoryBytes: 320 * MiB };

/** A value whose every 4 KiB page differs (a torn or shifted read shows); cheap to make (the suite shares the CPU). */
function pattern(bytes: number, seed: number): Buffer {
  const page = Buffer.allocUnsafe(4096);
  for (let at = 0; at < 4096; at += 4) page.writeUInt32LE((Math.imul(at >>> 2, 2654435761) + seed) >>> 0, at);
  const v = Buffer.allocUnsafe(bytes + 4);
  for (let at = 0; at < bytes; at += 4096) {
    page.copy(v, at);
    v.writeUInt32LE((at / 4096) ^ seed, at); // the page's number
  }
  return v.subarray(0, bytes);
}

/** What the test reaches into: the one server's core (not a public API). */
function coreOf(kv: KvClient): { scratch: Buffer; arena: Buffer; itemLimit: number } {
  const servers = (kv as unknown as { servers: Map<string, { session: { core: { scratch: Buffer; arena: Buffer; itemLimit: number } } }> }).servers;
  return [...servers.values()][0]!.session.core;
}

/** This process's open memfds (every Memory is one: regions, scratch, registered buffers). */
function memfds(): number {
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).startsWith('/memfd:rdma-kv')) n++;
    } catch {
      // closed meanwhile
    }
  }
  return n;
}

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: a 64 MiB value round-trips through put, get and getInto, checksum intact`, async (t) => {
    const server = await startServer(scheme, LARGE);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const value = pattern(64 * MiB, 1);
    const sum = crc32c(value);
    await kv.put('plain', value); // a plain Buffer: through a registered bounce buffer
    t.is(crc32c((await kv.get('plain'))!), sum);
    const buffer = kv.allocBuffer(64 * MiB);
    t.is(await kv.getInto('plain', buffer), 64 * MiB);
    t.is(crc32c(buffer), sum);
    // From a registered buffer, and back into another.
    const other = kv.allocBuffer(64 * MiB + 4096);
    buffer.writeUInt32LE(0xfeedface, 12345);
    const changed = crc32c(buffer);
    await kv.put('registered', buffer);
    t.is(await kv.getInto('registered', other), 64 * MiB);
    t.is(crc32c(other.subarray(0, 64 * MiB)), changed);
    t.is(crc32c((await kv.get('registered'))!), changed);
    t.is(await kv.getInto('missing', other), undefined);
    // Large blocks are granted one at a time: the heap holds the two items and at most one
    // spare 64 MiB block for this client's next PUT (plus its small classes' grants, 1 MiB at most each).
    t.is(grantBatch(64 * MiB + 4096, server.layout.heapBytes), 1);
    t.true(server.stats().heapUsedBytes <= 3 * (64 * MiB + 4096) + 8 * MiB, String(server.stats().heapUsedBytes));
    // One byte over the limit is a typed rejection, from a registered buffer too.
    t.is(((await t.throwsAsync(kv.put('over', other.subarray(0, 64 * MiB + 1)))) as KvError).code, 'KV_VALUE_TOO_LARGE');
    kv.freeBuffer(buffer);
    kv.freeBuffer(other);
  });

  test.serial(`${scheme}: getInto a registered buffer and put from one move a 1 MiB value without a copy through scratch or the arena`, async (t) => {
    const server = await startServer(scheme, LARGE);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const { scratch, arena } = coreOf(kv);
    const value = randomBytes(MiB);
    const probe = value.subarray(MiB / 2, MiB / 2 + 256); // random bytes: found only where the value was copied
    const seen = () => ({ scratch: scratch.includes(probe), arena: arena.includes(probe) });
    const source = kv.allocBuffer(MiB);
    value.copy(source);
    await kv.put('k', source);
    t.deepEqual(seen(), { scratch: false, arena: false }, 'a PUT from a registered buffer copied the value');
    const into = kv.allocBuffer(MiB);
    t.is(await kv.getInto('k', into), MiB);
    t.true(into.equals(value));
    t.deepEqual(seen(), { scratch: false, arena: false }, 'a getInto a registered buffer copied the value');
    // The check sees copies: a plain get() reads the item into scratch, a plain put() copies into the arena.
    t.true((await kv.get('k'))!.equals(value));
    t.true(seen().scratch);
    await kv.put('k2', value);
    t.true(seen().arena);
  });

  test.serial(`${scheme}: lengths around the slot's switch to 4 KiB granules (2 MiB - 64 B) and around the core's scratch round-trip`, async (t) => {
    const server = await startServer(scheme, LARGE);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const key = 'b';
    const fineMax = IndexWord.SLOT_FINE_MAX_UNITS * KvLayout.UNIT_BYTES - KvLayout.ITEM_HEADER_BYTES - key.length; // the last exact length
    const limit = coreOf(kv).itemLimit - KvLayout.ITEM_HEADER_BYTES - key.length; // the largest value scratch holds
    const sizes = [fineMax - 64, fineMax - 1, fineMax, fineMax + 1, fineMax + 63, fineMax + 64, fineMax + 65, 2 * MiB, 2 * MiB + 4096, limit, limit + 1, 3 * MiB + 1];
    const buffer = kv.allocBuffer(4 * MiB);
    let seed = 10;
    for (const size of sizes) {
      const value = pattern(size, ++seed);
      await kv.put(key, value);
      const { slot, itemAt: at } = slotOfKeyIn(server.region, key);
      const exactUnits = Math.ceil((KvLayout.ITEM_HEADER_BYTES + key.length + size) / KvLayout.UNIT_BYTES);
      const coarse = exactUnits > IndexWord.SLOT_FINE_MAX_UNITS;
      t.is(slotUnits(slot), coarse ? Math.ceil(exactUnits / 64) * 64 : exactUnits, `${size}: the slot's length`);
      t.is(readItemHeader(server.region, at).valueLength, size, `${size}: the header's exact length`);
      t.true((await kv.get(key))!.equals(value), `${size}: get`);
      t.is(await kv.getInto(key, buffer), size);
      t.true(buffer.subarray(0, size).equals(value), `${size}: getInto`);
      value.copy(buffer);
      await kv.put(key, buffer.subarray(0, size)); // from the registered buffer
      t.true((await kv.get(key))!.equals(value), `${size}: put from a registered buffer`);
    }
    // Every block went back: no retired block was refused (a class that did not match the slot's length would leak).
    t.true(await kv.delete(key));
    await kv.close();
    // Freed once the grace period (200 ms) has passed and the server has swept: when, depends on the machine.
    await eventually(() => server.stats().heapUsedBytes === 0, `every block went back (${server.stats().heapUsedBytes} bytes still used)`);
  });

  test.serial(`${scheme}: a damaged large item is never returned, nor another key's item in its block`, async (t) => {
    const server = await startServer(scheme, LARGE);
    t.teardown(() => server.close());
    // KV_CORRUPT comes after 64 reads of the item: 192 MiB, which takes seconds in the Soft-RoCE guest.
    const kv = await connect(server, { timeoutMs: Math.max(60_000, testTimeoutMs()) });
    t.teardown(() => kv.close());
    const bytes = 3 * MiB; // a coarse slot
    const value = pattern(bytes, 3);
    await kv.put('big', value);
    await kv.put('other', pattern(bytes, 4));
    const buffer = kv.allocBuffer(bytes);
    const at = slotOfKeyIn(server.region, 'big').itemAt;
    const valueAt = at + KvLayout.ITEM_HEADER_BYTES + 3;
    server.region[valueAt + 2.5 * MiB]! ^= 1; // one bit, deep in the value
    t.is(((await t.throwsAsync(kv.getInto('big', buffer))) as KvError).code, 'KV_CORRUPT');
    t.is(((await t.throwsAsync(kv.get('big'))) as KvError).code, 'KV_CORRUPT');
    server.region[valueAt + 2.5 * MiB]! ^= 1;
    t.is(await kv.getInto('big', buffer), bytes);
    t.true(buffer.equals(value));
    // Its block reused for another key's item (what a reuse after the grace period leaves): not 'big's value.
    const other = slotOfKeyIn(server.region, 'other');
    server.region.copy(server.region, at, other.itemAt, other.itemAt + KvLayout.ITEM_HEADER_BYTES + 5 + bytes);
    t.is(await kv.getInto('big', buffer), undefined);
    t.is(await kv.get('big'), undefined);
  });

  test.serial(`${scheme}: a large READ slower than half the grace period is answered once its item is confirmed live, and rewrites under it are never torn`, async (t) => {
    // A 2 ms grace: no 32 MiB READ ends within 1 ms, so every item READ is late and the timing
    // rule proves nothing. Before the live check, such a GET restarted until KV_TIMEOUT.
    const server = await startServer(scheme, { ...LARGE, graceMs: 2 });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const bytes = 32 * MiB;
    const value = pattern(bytes, 7);
    await kv.put('slow', value);
    const buffer = kv.allocBuffer(bytes);
    t.is(await kv.getInto('slow', buffer), bytes);
    t.true(buffer.equals(value));
    t.is(crc32c((await kv.get('slow'))!), crc32c(value)); // a plain get: through a bounce buffer
    // Another process rewrites it 5 ms apart; the 2 ms grace lets its blocks be reused under
    // our reads: each read is one whole write or is read again.
    const writer = runKvChild(t, ['large', server.urls[0]!, 'slow', String(bytes), '2000']);
    let done = false;
    void writer.finally(() => (done = true));
    let reads = 0;
    while (!done) {
      const n = await kv.getInto('slow', buffer);
      t.is(n, bytes);
      const stamp = buffer.readUInt32LE(0);
      if (stamp === value.readUInt32LE(0) && buffer.equals(value)) continue; // the first value
      for (let at = 4096; at < bytes; at += 4096) if (buffer.readUInt32LE(at) !== stamp) t.fail(`read ${reads}: page ${at / 4096} of write ${buffer.readUInt32LE(at)} in write ${stamp}`);
      reads++;
    }
    await writer;
    t.log(`${reads} reads of rewritten values, each whole`);
  });

  test.serial(`${scheme}: a large key rewritten by another process while this one reads it: every read is one whole write`, async (t) => {
    const server = await startServer(scheme, LARGE);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const bytes = 3 * MiB; // a coarse slot; both sides through registered buffers
    const writer = runKvChild(t, ['large', server.urls[0]!, 'hot', String(bytes), '3000']);
    const buffer = kv.allocBuffer(bytes);
    let reads = 0;
    const seen = new Set<number>();
    let done = false;
    void writer.finally(() => (done = true));
    while (!done) {
      const n = await kv.getInto('hot', buffer);
      if (n === undefined) continue;
      t.is(n, bytes);
      const stamp = buffer.readUInt32LE(0);
      for (let at = 4096; at < bytes; at += 4096) if (buffer.readUInt32LE(at) !== stamp) t.fail(`read ${reads}: page ${at / 4096} of write ${buffer.readUInt32LE(at)} in write ${stamp}`);
      seen.add(stamp);
      reads++;
    }
    const { writes } = await writer;
    t.log(`${reads} reads saw ${seen.size} of ${String(writes)} writes`);
    t.true(reads > 0 && seen.size > 1);
  });

  test.serial(`${scheme}: buffers allocated, used and freed over and over do not stay registered`, async (t) => {
    const server = await startServer(scheme, LARGE);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await kv.put('k', pattern(MiB, 9));
    const cycle = async (): Promise<void> => {
      const buffer = kv.allocBuffer(MiB);
      t.is(await kv.getInto('k', buffer), MiB); // the core registers it with its provider
      kv.freeBuffer(buffer);
    };
    await cycle();
    gc();
    const before = memfds();
    for (let i = 0; i < 20; i++) await cycle();
    for (let i = 0; i < 3; i++) {
      gc();
      await new Promise((resolve) => setImmediate(resolve));
    }
    // The core keeps the registration of the last buffer it registered at most (until its next new one).
    t.true(memfds() <= before + 1, `${memfds() - before} more memfds open after 20 buffers were freed`);
  });

  test.serial(`${scheme}: large items survive a restart on a region file`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'rkv-large-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const regionFile = join(dir, 'region');
    const values = [pattern(64 * MiB, 5), pattern(2 * MiB + 1, 6), pattern(1000, 7)];
    const first = await startServer(scheme, { ...LARGE, regionFile });
    const kv = await connect(first);
    for (const [i, v] of values.entries()) await kv.put(`k${i}`, v);
    await kv.close();
    await first.close();
    const second = await startServer(scheme, { ...LARGE, regionFile });
    t.teardown(() => second.close());
    t.is(second.stats().recoveredSlotsSkipped, 0);
    const again = await connect(second);
    t.teardown(() => again.close());
    const buffer = again.allocBuffer(64 * MiB);
    for (const [i, v] of values.entries()) {
      t.is(await again.getInto(`k${i}`, buffer), v.length);
      t.true(buffer.subarray(0, v.length).equals(v), `k${i}`);
    }
    await again.put('k0', values[1]!); // the restarted heap hands out and retires large blocks
    t.true((await again.get('k0'))!.equals(values[1]!));
  });

  test.serial(`${scheme}: bad input to the large-value API is a typed rejection`, async (t) => {
    const server = await startServer(scheme, LARGE);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await kv.put('k', pattern(3 * MiB, 8));
    const small = kv.allocBuffer(MiB);
    const tooSmall = await t.throwsAsync(kv.getInto('k', small));
    t.true(tooSmall instanceof KvBufferTooSmallError);
    t.is((tooSmall as KvBufferTooSmallError).needed, 3 * MiB);
    t.regex(tooSmall!.message, /needs a buffer of at least 3145728 bytes/);
    t.is(((await t.throwsAsync(kv.getInto('k', Buffer.alloc(10)))) as KvBufferTooSmallError).needed, 3 * MiB); // a plain Buffer too
    kv.freeBuffer(small);
    t.true((await t.throwsAsync(kv.getInto('k', small))) instanceof KvBadBufferError);
    t.true((await t.throwsAsync(kv.put('k', small))) instanceof KvBadBufferError);
    t.is(((await t.throwsAsync(kv.getInto('k', 'not a buffer' as unknown as Buffer))) as KvError).code, 'KV_INVALID_ARGUMENT');
    t.throws(() => kv.allocBuffer(0), { code: 'KV_INVALID_ARGUMENT' } as never);
    // A plain Buffer works, with one copy; the client still serves.
    const plain = Buffer.alloc(4 * MiB);
    t.is(await kv.getInto('k', plain), 3 * MiB);
    t.true(plain.subarray(0, 3 * MiB).equals(pattern(3 * MiB, 8)));
    t.is(((await t.throwsAsync(kv.putMany([['a', pattern(8 * MiB, 1)]]))) as KvError).code, 'KV_VALUE_TOO_LARGE');
  });
}
