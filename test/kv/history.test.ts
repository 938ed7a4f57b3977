// KV conformance: a recorded history carries what an independent checker
// needs: the version each put and cas wrote, incr's delta, the token an
// unlock gave back and whether it released, and whether a failed request
// ever left the client.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import type { HistoryEvent } from '../../client/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, slow } from '../helpers/providers.js';

/** The completion of the last invocation of `f` on `key`. */
function completion(events: HistoryEvent[], f: HistoryEvent['f'], key: string): { invoke: HistoryEvent; done: HistoryEvent } {
  const invoke = events.filter((e) => e.type === 'invoke' && e.f === f && e.key === key).at(-1);
  if (!invoke) throw new Error(`no ${f} of ${key} in the history`);
  const done = events.find((e) => e.id === invoke.id && e.type !== 'invoke');
  if (!done) throw new Error(`${f} of ${key} (id ${invoke.id}) never completed`);
  return { invoke, done };
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: the history records the versions put and cas wrote, incr's delta, and unlock's token and outcome`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const dir = mkdtempSync(join(tmpdir(), 'rkv-history-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'h.jsonl');
    const kv = await connect(server, { history: file });
    t.teardown(() => kv.close());

    await kv.put('k', 'one');
    const afterPut = (await kv.getWithVersion('k'))!;
    t.is(completion(read(file), 'put', 'k').done.version, afterPut.version.toString());

    t.true(await kv.cas('k', afterPut.version, 'two'));
    const afterCas = (await kv.getWithVersion('k'))!;
    const cas = completion(read(file), 'cas', 'k');
    t.is(cas.invoke.expected, afterPut.version.toString());
    t.is(cas.done.value, true);
    t.is(cas.done.version, afterCas.version.toString());
    // A cas that did not write wrote no version.
    t.false(await kv.cas('k', afterPut.version, 'stale'));
    t.is(completion(read(file), 'cas', 'k').done.version, undefined);
    t.true(await kv.cas('new', 0n, 'created'));
    t.is(completion(read(file), 'cas', 'new').done.version, (await kv.getWithVersion('new'))!.version.toString());

    t.is(await kv.incr('c', 5), 5n);
    const incr = completion(read(file), 'incr', 'c');
    t.is(incr.invoke.delta, '5');
    t.is(incr.done.value, '5');
    // Counters wrap at 2^64: a negative delta is recorded as the unsigned word that is added.
    t.is(await kv.incr('c', -2n), 3n);
    t.is(completion(read(file), 'incr', 'c').invoke.delta, (2n ** 64n - 2n).toString());

    const lock = await kv.lock('m');
    t.is(completion(read(file), 'lock', 'm').done.version, lock.token.toString());
    await lock.release();
    const unlock = completion(read(file), 'unlock', 'm');
    t.is(unlock.invoke.token, lock.token.toString());
    t.is(unlock.done.value, true);
    // A release that finds the lock no longer held with its token (here: deleted) records false.
    const lost = await kv.lock('m2');
    t.true(await kv.delete('m2'));
    await t.throwsAsync(lost.release(), { code: 'KV_LOCK_CONTENDED' });
    t.is(completion(read(file), 'unlock', 'm2').done.value, false);
    // Every line is one JSON event; a version is a decimal string.
    for (const e of read(file)) if (e.version !== undefined) t.regex(e.version, /^\d+$/);
  });

  test(`${scheme}: a request that timed out before it was sent is recorded sent: false; one that failed in flight is not`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const holder = await connect(server);
    t.teardown(() => holder.close());
    const held = await holder.lock('busy');
    const events: HistoryEvent[] = [];
    const kv = await connect(server, { history: (e) => events.push(e), timeoutMs: slow(300) }); // the connect's guard too
    t.teardown(() => kv.close());
    // Fill every in-flight slot with a lock that waits (no timeout) for the held one.
    // An incr of a key of the same length needs a block of the same size, so it
    // queues behind them in order: it can only wait there until its deadline passes.
    const waiting = Array.from({ length: KvLayout.MAX_INFLIGHT }, () => kv.lock('busy', { timeoutMs: Infinity }));
    const settled = Promise.allSettled(waiting);
    const error = await t.throwsAsync(kv.incr('ctr4'));
    t.is((error as { code?: string }).code, 'KV_TIMEOUT');
    const incr = completion(events, 'incr', 'ctr4');
    t.is(incr.done.type, 'fail');
    t.is(incr.done.error, 'KV_TIMEOUT');
    t.is(incr.done.sent, false);
    // Closing fails the locks in flight: they were sent, so they may have taken effect.
    await kv.close();
    for (const s of await settled) t.is(s.status, 'rejected');
    const lockFails = events.filter((e) => e.f === 'lock' && e.type === 'fail');
    t.is(lockFails.length, KvLayout.MAX_INFLIGHT);
    const inFlight = lockFails.filter((e) => e.sent === undefined);
    t.true(inFlight.length > 0, 'some locks were in flight');
    await held.release();
  });
}

function read(file: string): HistoryEvent[] {
  return readFileSync(file, 'utf8').trim().split('\n').map((line) => JSON.parse(line) as HistoryEvent);
}
