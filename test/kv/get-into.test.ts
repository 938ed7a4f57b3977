// getInto of a plain Buffer (docs/architecture.md, "Large values"): a value that scratch
// holds is copied out of scratch into the caller's buffer, as get()'s into a new
// Buffer, in the same hand-out as other ops' values. The buffer's own offset
// counts (a view into a larger buffer, or a slice of Node's pool); bytes past
// the value stay as they were; a longer value is KV_BUFFER_TOO_SMALL with the
// length it needs; a missing key is undefined.
import { Buffer } from 'node:buffer';

import test from 'ava';

import { KvBufferTooSmallError } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

/** `bytes` bytes of `seed` (each byte differs from its neighbours'). */
function valueOf(bytes: number, seed: number): Buffer {
  const v = Buffer.allocUnsafe(bytes);
  for (let i = 0; i < bytes; i++) v[i] = (i * 31 + seed) & 0xff;
  return v;
}

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: getInto a plain Buffer copies the value into it, at its own offset, and leaves the bytes past the value alone`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    for (const [key, bytes] of [['empty', 0], ['short', 7], ['kib', 1024], ['full', 4096]] as const) await kv.put(key, valueOf(bytes, bytes));

    const whole = Buffer.alloc(3 * 4096, 0xee);
    const buffer = whole.subarray(4096, 2 * 4096); // a view at an offset: the copy must land at its start, not the ArrayBuffer's
    for (const [key, bytes] of [['kib', 1024], ['short', 7], ['full', 4096], ['empty', 0]] as const) {
      buffer.fill(0xee);
      t.is(await kv.getInto(key, buffer), bytes, `${key}: its length`);
      t.true(buffer.subarray(0, bytes).equals(valueOf(bytes, bytes)), `${key}: its bytes`);
      t.true(buffer.subarray(bytes).every((b) => b === 0xee), `${key}: the bytes past the value are untouched`);
      t.true(whole.subarray(0, 4096).every((b) => b === 0xee) && whole.subarray(2 * 4096).every((b) => b === 0xee), `${key}: nothing outside the view is written`);
    }
    const pooled = Buffer.allocUnsafe(1024); // a slice of Node's pool (a non-zero byteOffset, most of the time)
    t.is(await kv.getInto('kib', pooled), 1024);
    t.true(pooled.equals(valueOf(1024, 1024)));

    const small = Buffer.alloc(100, 0xee);
    const error = await t.throwsAsync(kv.getInto('kib', small));
    t.true(error instanceof KvBufferTooSmallError, 'a value longer than the buffer: KV_BUFFER_TOO_SMALL');
    t.is((error as KvBufferTooSmallError).needed, 1024);
    t.true(small.every((b) => b === 0xee), 'nothing is written into a buffer too small');
    t.is(await kv.getInto('missing', small), undefined);
    t.is(await kv.getInto('short', small), 7, 'the client serves on after the refusal');
  });

  test.serial(`${scheme}: gets and getIntos issued in one tick each get their own value`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const N = 48;
    await kv.putMany(Array.from({ length: N }, (_, i) => [`k${i}`, valueOf(100 + i * 13, i)] as [string, Buffer]));
    const targets = Array.from({ length: N }, () => Buffer.alloc(1024, 0xee));
    // Alternating, so one hand-out holds both: the gets' values share Node's pool, each getInto has its own target.
    const answers = await Promise.all(Array.from({ length: N }, (_, i) => (i % 2 === 0 ? kv.get(`k${i}`) : kv.getInto(`k${i}`, targets[i]!))));
    for (let i = 0; i < N; i++) {
      const expected = valueOf(100 + i * 13, i);
      if (i % 2 === 0) t.true((answers[i] as Buffer).equals(expected), `get k${i}`);
      else {
        t.is(answers[i], expected.length, `getInto k${i}: its length`);
        t.true(targets[i]!.subarray(0, expected.length).equals(expected), `getInto k${i}: its bytes`);
        t.true(targets[i]!.subarray(expected.length).every((b) => b === 0xee), `getInto k${i}: nothing past its value`);
      }
    }
    for (let i = 0; i < N; i += 2) t.true(targets[i]!.every((b) => b === 0xee), `no get's value landed in a getInto's buffer (k${i})`);
  });
}
