// A single op's record (PendingOp, client/op-records.ts) is kept once its promise has
// resolved and the queue and the core's slot let go of it, and the next request takes it:
// the promise a caller already has keeps its own answer, the next request starts clean, and
// a record someone may still read (a recorded op, a replicated write, one of a registered
// buffer) is never taken again.
import test from 'ava';

import { Answer, PendingOp } from '../../client/op-records.js';
import type { Session } from '../../client/session.js';
import { KvOp } from '../../protocol/constants.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

const get = (key: string, answer: Answer = Answer.VALUE): PendingOp =>
  PendingOp.of(KvOp.GET, key, key.length, undefined, 0, 0n, -1, false, undefined, undefined, 0, 0, false, answer, undefined);

test('a resolved op is taken by the next request: the first promise keeps its answer, the next starts clean', async (t) => {
  const first = get('one');
  first.session = {} as Session;
  first.deadline = 5;
  first.sent = true;
  const answer = Buffer.from('the first answer');
  const firstResult = first.result as Promise<unknown>;
  first.resolve(answer);
  first.recycle();
  t.is(first.key, '', 'the key is let go of');
  t.true(first.session === undefined);

  const second = get('two');
  t.is(second, first, 'the same record');
  t.not(second.result, firstResult, 'with a promise of its own');
  t.is(second.key, 'two');
  t.is(second.sent, false);
  t.is(second.deadline, 0);
  t.true(second.session === undefined);
  t.is(await firstResult, answer);
  second.resolve(undefined);
  t.is(await (second.result as Promise<unknown>), undefined);
  t.is(await firstResult, answer, 'still the first answer');
  second.recycle();
});

test('a recorded op, a replicated write and an op of a registered buffer are never taken again', (t) => {
  const recordedOp = get('recorded', Answer.FULL); // the history reads its `sent` after it settles
  recordedOp.resolve({});
  recordedOp.recycle();
  t.not(get('next'), recordedOp);

  const replicated = PendingOp.of(KvOp.PUT, 'k', 1, 'v', 1, 0n, 0, false, undefined, undefined, 0, 0, false, Answer.NONE, undefined);
  replicated.backups = [];
  replicated.resolve(undefined);
  replicated.recycle();
  t.not(get('next'), replicated);

  const ext = { id: 1, offset: 0, length: 1, entry: { id: 1, freed: false, uses: 0 } };
  const registered = PendingOp.of(KvOp.GET, 'k', 1, undefined, 0, 0n, -1, false, ext, undefined, 0, 0, false, Answer.LENGTH, undefined);
  registered.resolve(1);
  registered.recycle();
  t.not(get('next'), registered);
});

for (const scheme of providersUnderTest()) {
  test(`${scheme}: ops whose records were taken again each answer with their own value`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    // One at a time (each record goes back before the next request), then in flight together.
    const gets: Array<Promise<Buffer | undefined>> = [];
    for (let i = 0; i < 300; i++) {
      await kv.put(`k${i}`, `value ${i}`);
      gets.push(kv.get(`k${i}`));
      await gets[i];
    }
    for (let i = 0; i < 300; i++) gets.push(kv.get(`k${i}`));
    const values = await Promise.all(gets);
    for (let i = 0; i < values.length; i++) t.is(values[i]?.toString(), `value ${i % 300}`);
    // A cas that does not apply answers false (its record goes back too), and the next ops answer.
    const { version } = (await kv.getWithVersion('k7'))!;
    t.false(await kv.cas('k7', version + 1n, 'never'));
    t.true(await kv.cas('k7', version, 'value 7, again'));
    t.is((await kv.get('k7'))?.toString(), 'value 7, again');
  });
}
