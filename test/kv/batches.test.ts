// The data path's batches and turns: getMany and putMany as one batch each
// (order, missing keys, more keys than the core has slots, typed errors,
// values that stay correct after later operations), and the event loop: a
// GET that finishes inside its submit must not starve timers, in either poll
// mode, and an idle event-mode client still answers.
import test from 'ava';

import { KvInvalidArgumentError, KvKeyTooLargeError, KvTypeMismatchError, KvValueTooLargeError } from '../../client/index.js';
import { CompletionQueue } from '../../native/completion-queue.js';
import { KvLayout } from '../../protocol/constants.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

const modes = ['busy', 'event'] as const;

for (const scheme of providersUnderTest()) {
  for (const pollMode of modes) {
    test(`${scheme} (${pollMode}): getMany keeps the order over ${3 * KvLayout.MAX_INFLIGHT + 5} keys, missing keys are undefined, and its values survive later operations`, async (t) => {
      const server = await startServer(scheme);
      t.teardown(() => server.close());
      const kv = await connect(server, { pollMode });
      t.teardown(() => kv.close());
      const n = 3 * KvLayout.MAX_INFLIGHT + 5;
      const keys = Array.from({ length: n }, (_, i) => (i % 2 ? `b${i}` : Buffer.from(`b${i}`)));
      const present = (i: number) => i % 7 !== 3;
      const value = (i: number) => `value ${i} `.repeat(1 + (i % 13));
      await kv.putMany(keys.flatMap((k, i) => (present(i) ? [[k, i % 3 ? value(i) : Buffer.from(value(i))] as [string | Buffer, string | Buffer]] : [])));
      const got = await kv.getMany(keys);
      t.is(got.length, n);
      for (let i = 0; i < n; i++) t.is(got[i]?.toString(), present(i) ? value(i) : undefined, `key ${i}`);
      // The values of one batch are views of one Buffer.
      t.is(got[0]!.buffer, got[1]!.buffer);
      // Later reads and writes (of the same keys) leave the values handed out alone.
      const copies = got.map((v) => (v ? Buffer.from(v) : undefined));
      await kv.putMany(keys.map((k): [string | Buffer, string] => [k, 'overwritten']));
      for (let round = 0; round < 3; round++) await Promise.all([kv.getMany(keys), ...keys.map((k) => kv.get(k))]);
      t.deepEqual(got, copies);
      t.true((await kv.getMany(keys)).every((v) => v?.toString() === 'overwritten'));
      t.deepEqual(await kv.getMany([]), []);
      await kv.putMany([]);
    });

    test(`${scheme} (${pollMode}): getMany calls and gets of one tick, whose answers share a hand-out, each get their own values`, async (t) => {
      const server = await startServer(scheme);
      t.teardown(() => server.close());
      const kv = await connect(server, { pollMode });
      t.teardown(() => kv.close());
      const value = (i: number) => `v${i}-`.repeat(1 + (i % 5));
      const keys = Array.from({ length: 40 }, (_, i) => `k${i}`);
      await kv.putMany(keys.map((k, i): [string, string] => [k, value(i)]));
      for (let round = 0; round < 5; round++) {
        const parts = [keys.slice(0, 10), keys.slice(10, 11), [], keys.slice(11, 30).reverse(), ['absent', ...keys.slice(30)]];
        const [many, singles] = await Promise.all([Promise.all(parts.map((part) => kv.getMany(part))), Promise.all(keys.map((k) => kv.get(k)))]);
        many.forEach((got, p) => t.deepEqual(got.map((v) => v?.toString()), parts[p]!.map((k) => (k === 'absent' ? undefined : value(Number(k.slice(1))))), `round ${round}, part ${p}`));
        t.deepEqual(singles.map((v) => v?.toString()), keys.map((_, i) => value(i)));
      }
    });

    test(`${scheme} (${pollMode}): getMany of empty values, alone and beside other values, gives empty Buffers`, async (t) => {
      const server = await startServer(scheme);
      t.teardown(() => server.close());
      const kv = await connect(server, { pollMode });
      t.teardown(() => kv.close());
      await kv.putMany([['e0', ''], ['e1', Buffer.alloc(0)], ['full', 'value']]);
      t.deepEqual((await kv.getMany(['e0', 'e1'])).map((v) => v?.toString()), ['', '']);
      const [many, single] = await Promise.all([kv.getMany(['e1', 'full', 'absent', 'e0']), kv.get('e0')]);
      t.deepEqual(many.map((v) => v?.toString()), ['', 'value', undefined, '']);
      t.is(single?.length, 0);
      t.is((await kv.get('full'))?.toString(), 'value', 'the client goes on');
    });

    test(`${scheme} (${pollMode}): a bad key or value rejects the whole batch before anything is sent; a failed read rejects with its typed error`, async (t) => {
      const server = await startServer(scheme, { maxValueBytes: 4096 });
      t.teardown(() => server.close());
      const kv = await connect(server, { pollMode });
      t.teardown(() => kv.close());
      const tooLong = 'k'.repeat(KvLayout.MAX_KEY_BYTES + 1);
      await t.throwsAsync(kv.putMany([['x1', 'a'], [tooLong, 'b'], ['x2', 'c']]), { instanceOf: KvKeyTooLargeError });
      await t.throwsAsync(kv.putMany([['x1', 'a'], ['x2', Buffer.alloc(4097)]]), { instanceOf: KvValueTooLargeError });
      await t.throwsAsync(kv.putMany([['x1', 'a'], ['x2', 5 as unknown as string]]), { instanceOf: KvInvalidArgumentError });
      t.deepEqual(await kv.getMany(['x1', 'x2']), [undefined, undefined], 'nothing of the refused batches was written');
      await t.throwsAsync(kv.getMany(['x1', tooLong]), { instanceOf: KvKeyTooLargeError });
      await t.throwsAsync(kv.getMany(['x1', {} as unknown as string]), { instanceOf: KvInvalidArgumentError });
      // A counter read as bytes: that key's GET fails, and so does the batch, with its error.
      await kv.put('plain', 'p');
      await kv.incr('counter', 5);
      const keys = Array.from({ length: 2 * KvLayout.MAX_INFLIGHT }, (_, i) => (i === 70 ? 'counter' : 'plain'));
      await t.throwsAsync(kv.getMany(keys), { instanceOf: KvTypeMismatchError });
      // The client goes on: the failed batch's other reads were answered and dropped.
      t.is((await kv.getMany(['plain', 'none']))[0]?.toString(), 'p');
      t.is((await kv.get('plain'))?.toString(), 'p');
    });

    test(`${scheme} (${pollMode}): a timer fires during a tight loop of awaited gets and puts`, async (t) => {
      const server = await startServer(scheme);
      t.teardown(() => server.close());
      const kv = await connect(server, { pollMode });
      t.teardown(() => kv.close());
      await kv.put('hot', 'value');
      // Each GET may finish inside its own submit: without a per-turn budget the
      // microtask chain never ends and the timer never runs (the loop would
      // stop at its bound with fired still false).
      let fired = 0;
      setTimeout(() => fired++, 0);
      for (let i = 0; i < 200_000 && fired === 0; i++) await kv.get('hot');
      t.is(fired, 1);
      setTimeout(() => fired++, 0);
      for (let i = 0; i < 200_000 && fired === 1; i++) await kv.put('hot', 'value');
      t.is(fired, 2);
    });
  }

  test(`${scheme}: an idle event-mode client answers when used again`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server, { pollMode: 'event' });
    t.teardown(() => kv.close());
    await kv.put('a', '1');
    for (let i = 0; i < 3; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50)); // idle: nothing in flight, the CQ armed
      t.is((await kv.get('a'))?.toString(), String(i + 1));
      await kv.put('a', String(i + 2));
      t.deepEqual((await kv.getMany(['a', 'none'])).map((v) => v?.toString()), [String(i + 2), undefined]);
    }
  });

  if (scheme === 'shm') {
    test('shm: event mode wakes no thread for completions that arrive inside the post', async (t) => {
      // Counts the watcher's calls into JS: before the core disarmed the CQ around its
      // own posts, every awaited GET on shm cost one (its READ completed inside the post).
      let wakeups = 0;
      const watch = CompletionQueue.prototype.watch;
      CompletionQueue.prototype.watch = function (this: CompletionQueue, onReady: () => void) {
        watch.call(this, () => {
          wakeups++;
          onReady();
        });
      };
      t.teardown(() => {
        CompletionQueue.prototype.watch = watch;
      });
      const server = await startServer(scheme);
      t.teardown(() => server.close());
      const kv = await connect(server, { pollMode: 'event' });
      t.teardown(() => kv.close());
      await kv.put('a', 'value');
      const before = wakeups;
      for (let i = 0; i < 1000; i++) await kv.get('a');
      // Control messages (a keepalive pong) may still wake it: a few, not one per GET.
      t.true(wakeups - before < 100, `${wakeups - before} wake-ups for 1000 GETs`);
    });
  }
}
