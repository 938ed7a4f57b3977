// Eviction's guarantees (issue 16, server side): readers racing evictions see a whole value or
// a miss, never a torn, reused or never-written one; counters and locks survive; items written
// in the last grace period are kept; under lru, keys that are read survive more than keys that
// are not (access hints: native/kv/access.cc).
import test from 'ava';

import { ReconnectingClient, connect, selfValidating, startServer, validate } from '../helpers/kv.js';
import { eventually, providersUnderTest, slow } from '../helpers/providers.js';

const SMALL = { memoryBytes: 16 << 20, graceMs: 50 };
const VALUE = 4000;

/**
 * PUTs `count` fresh keys `${prefix}${i}` of VALUE bytes, 64 at a time (any failure but a lost
 * connection, retried after the reconnect, fails the test: docs/softroce-vm.md, Pitfalls).
 */
async function writeFresh(kv: ReconnectingClient, prefix: string, count: number, onWritten?: (i: number) => void): Promise<void> {
  for (let i = 0; i < count; i += 64) {
    await Promise.all(
      Array.from({ length: Math.min(64, count - i) }, async (_, k) => {
        await kv.put(`${prefix}${i + k}`, selfValidating(0, i + k, VALUE));
        onWritten?.(i + k);
      }),
    );
  }
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: readers racing eviction see whole values of their key or a miss`, async (t) => {
    const server = await startServer(scheme, { ...SMALL, eviction: 'lru' });
    t.teardown(() => server.close());
    const writerClient = await connect(server);
    const readerClient = await connect(server);
    t.teardown(() => Promise.all([writerClient.close(), readerClient.close()]));
    const writer = new ReconnectingClient(writerClient, server);
    const reader = new ReconnectingClient(readerClient, server);
    const keys = 2000; // about 8 MB of values: rewritten, they and the fresh keys below overflow the heap
    const issued = new Int32Array(keys).fill(-1);
    const problems: string[] = [];
    let done = false;
    let reads = 0;
    let hits = 0;
    const readers = Array.from({ length: 4 }, async () => {
      while (!done) {
        const key = Math.random() < 0.5 ? Math.floor(Math.random() * 20) : Math.floor(Math.random() * keys); // hot and cold
        const value = await reader.get(`r${key}`);
        reads++;
        if (value === undefined) continue;
        hits++;
        const seen = validate(value);
        if (typeof seen === 'string') problems.push(`r${key}: ${seen}`);
        else if (seen.writer !== key) problems.push(`r${key}: holds key ${seen.writer}'s value`);
        else if (seen.seq > issued[key]!) problems.push(`r${key}: sequence ${seen.seq} was never written`);
      }
    });
    const heapValues = Math.ceil(server.layout.heapBytes / VALUE);
    for (let round = 0, n = 0; n < 4 * heapValues; round++) {
      await Promise.all(
        Array.from({ length: 64 }, async () => {
          const key = Math.floor(Math.random() * keys);
          const seq = ++issued[key]!;
          n++;
          await writer.put(`r${key}`, selfValidating(key, seq, VALUE));
        }),
      );
      if (round % 4 === 0) await writeFresh(writer, `f${round}-`, 64);
    }
    done = true;
    await Promise.all(readers);
    t.deepEqual(problems.slice(0, 10), []);
    t.true(server.stats().evictions.watermark + server.stats().evictions.grant > 0, 'items were evicted');
    t.log(`${reads} reads, ${hits} hits, ${server.stats().evictions.watermark + server.stats().evictions.grant} evictions`);
    for (const note of [...writer.notes, ...reader.notes]) t.log(note);
  });

  test(`${scheme}: counters and locks survive eviction; items of the last grace period are kept`, async (t) => {
    const graceMs = 400;
    const server = await startServer(scheme, { ...SMALL, graceMs, eviction: 'lru' });
    t.teardown(() => server.close());
    const kv = await connect(server);
    // The locks' holder is not the flooding client: a flood's lost connection (retried) would give its locks back.
    const holder = await connect(server);
    t.teardown(() => Promise.all([kv.close(), holder.close()]));
    for (let i = 0; i < 50; i++) await kv.incr(`counter${i}`, i + 1);
    const held = await holder.lock('held-lock');
    const free = await holder.lock('free-lock');
    await free.release();
    const flood = new ReconnectingClient(kv, server);
    const writtenAt: number[] = [];
    const count = Math.ceil((4 * server.layout.heapBytes) / VALUE);
    await writeFresh(flood, 'k', count, (i) => {
      writtenAt[i] = performance.now();
    });
    const end = performance.now();
    t.true(server.stats().evictions.watermark + server.stats().evictions.grant > 0, 'items were evicted');
    // Everything acknowledged within half the grace period before the end is still there, whole.
    const recent = writtenAt.flatMap((at, i) => (end - at < graceMs / 2 ? [i] : []));
    t.true(recent.length > 0);
    for (const note of flood.notes) t.log(note);
    const values = await kv.getMany(recent.map((i) => `k${i}`));
    t.deepEqual(values.flatMap((v, k) => (v === undefined ? [recent[k]] : [])), [], 'recent items evicted');
    for (const [k, v] of values.entries()) t.deepEqual(validate(v!), { writer: 0, seq: recent[k] });
    for (let i = 0; i < 50; i++) t.is(await kv.incr(`counter${i}`, 0), BigInt(i + 1));
    // The held lock is still held (a second taker times out), its holder releases it; the free one is taken.
    const other = await connect(server);
    t.teardown(() => other.close());
    await t.throwsAsync(other.lock('held-lock', { timeoutMs: 200 }), { code: 'KV_LOCK_CONTENDED' } as never);
    await held.release();
    await (await other.lock('held-lock', { timeoutMs: slow(2000) })).release();
    await (await other.lock('free-lock', { timeoutMs: slow(2000) })).release();
  });

  for (const eviction of ['lru', 'lfu'] as const) {
    test(`${scheme}: under ${eviction}, keys that are read survive more than keys that are not`, async (t) => {
      const server = await startServer(scheme, { ...SMALL, eviction });
      t.teardown(() => server.close());
      const kv = await connect(server);
      t.teardown(() => kv.close());
      const flood = new ReconnectingClient(kv, server);
      // 200 hot and 200 cold keys, written together; then the hot ones are read while 3 heaps of fresh keys go in.
      await writeFresh(flood, 'hot', 200);
      await writeFresh(flood, 'cold', 200);
      let done = false;
      const readers = (async () => {
        while (!done) await Promise.all(Array.from({ length: 200 }, (_, i) => flood.get(`hot${i}`)));
      })();
      await writeFresh(flood, 'fresh', Math.ceil((3 * server.layout.heapBytes) / VALUE));
      done = true;
      await readers;
      const count = async (prefix: string) => (await kv.getMany(Array.from({ length: 200 }, (_, i) => `${prefix}${i}`))).filter((v) => v !== undefined).length;
      const hot = await count('hot');
      const cold = await count('cold');
      t.log(`survivors: hot ${hot} of 200, cold ${cold} of 200`);
      for (const note of flood.notes) t.log(note);
      t.true(hot >= 150, `hot keys survived: ${hot}`);
      t.true(hot >= cold + 100, `hot ${hot} against cold ${cold}`);
    });
  }

  // A round evicts the worst of what it and earlier rounds sampled (the eviction pool), not the
  // worse half of one sample: with 30 % of the heap's items unread and 25 % more written, the unread ones go and the read
  // ones stay. (Before the pool, a round of 64 took its worse 32: as many read keys as unread went.)
  for (const eviction of ['lru', 'lfu'] as const) {
    test(`${scheme}: under ${eviction}, unread keys are evicted before keys that were read`, async (t) => {
      const graceMs = 50;
      const server = await startServer(scheme, { ...SMALL, graceMs, eviction });
      t.teardown(() => server.close());
      const kv = await connect(server);
      t.teardown(() => kv.close());
      const flood = new ReconnectingClient(kv, server);
      const item = server.layout.classes.find((units) => units * 64 >= 48 + 8 + VALUE)! * 64;
      const capacity = Math.floor(server.layout.heapBytes / item);
      const [cold, warm, fresh] = [Math.floor(0.3 * capacity), Math.floor(0.5 * capacity), Math.floor(0.25 * capacity)];
      await writeFresh(flood, 'c', cold);
      await writeFresh(flood, 'w', warm); // 80 % of the heap: under the high watermark, nothing evicted yet
      const names = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
      for (let pass = 0; pass < 3; pass++) {
        // Read in separate reclaim ticks (lfu counts one read per tick), then all of it ages past the grace period.
        for (let i = 0; i < warm; i += 256) await kv.getMany(names('w', warm).slice(i, i + 256));
        await new Promise((resolve) => setTimeout(resolve, 2 * graceMs));
      }
      t.is(server.stats().evictions.watermark + server.stats().evictions.grant, 0, 'nothing evicted before the fresh keys');
      await writeFresh(flood, 'f', fresh);
      // Until the run is over (down to the low watermark, its grace period past): the reads below refresh what they read.
      const done = () => server.stats().heapUsedBytes <= server.stats().heapLowWatermarkBytes;
      await eventually(done, 'eviction brought the heap down to its low watermark');
      const lost = async (prefix: string, n: number) => (await kv.getMany(names(prefix, n))).filter((v) => v === undefined).length;
      const lostCold = await lost('c', cold);
      const lostWarm = await lost('w', warm);
      t.log(`evicted: ${lostCold} of ${cold} unread keys, ${lostWarm} of ${warm} read ones`);
      for (const note of flood.notes) t.log(note);
      t.true(lostCold > cold / 2, `unread keys evicted: ${lostCold} of ${cold}`);
      // lfu: the read keys count 4 reads against the others' 1 and stay (measured: 0-6 of them go; before the pool
      // 141-277 against 396-536 unread). lru: once the unread keys grow scarce in a sample, the read ones are the
      // next oldest (the fresh keys are newer): 117-252 against 468-778 unread; before the pool 322-383 against 407-435.
      // Compared as shares of each kind (there are 1.67 times as many read keys): an unread key is at least twice
      // (lru) or ten times (lfu) as likely to go. Counts compared as counts failed a loaded CI run at 252 against 468
      // (shares 18 % and 56 %).
      const ratio = eviction === 'lfu' ? 10 : 2;
      t.true(ratio * (lostWarm / warm) < lostCold / cold, `read keys evicted: ${lostWarm} of ${warm}, unread: ${lostCold} of ${cold}`);
    });
  }
}
