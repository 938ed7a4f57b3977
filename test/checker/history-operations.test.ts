// Reading client histories (HistoryEvent lines) into checker operations: by
// default every sent operation must complete; with MAY_HAVE_TAKEN_EFFECT a
// timeout or a lost connection after sending, or a process that died, makes
// an operation indeterminate. Pure: hand-written events, no server.
import test from 'ava';

import { MAY_HAVE_TAKEN_EFFECT, type ProcessEvent, counterHistories, lockHistories, registerHistories } from '../helpers/history-operations.js';
import { isLinearizable } from '../helpers/linearizability.js';
import { counterModel, lockModel, registerModel } from '../helpers/linearizability-models.js';

let nextId = 0;
/** An invocation at `call` and, unless `done` is undefined, its completion at `ret`. */
function opEvents(process: number, f: ProcessEvent['f'], key: string, call: number, invoke: Partial<ProcessEvent>, ret?: number, done?: Partial<ProcessEvent>): ProcessEvent[] {
  const id = nextId++;
  const events: ProcessEvent[] = [{ process, id, f, key, type: 'invoke', time: String(call), ...invoke }];
  if (done) events.push({ process, id, f, key, type: 'ok', time: String(ret), ...done });
  return events;
}
const sorted = (events: ProcessEvent[]) => [...events].sort((a, b) => Number(BigInt(a.time) - BigInt(b.time)));

// p0 writes a, then b, whose put times out after it was sent; p1 reads a, then (much later) b.
const timedOut = sorted([
  ...opEvents(0, 'put', 'k', 0, { value: 'a' }, 1, { version: '11' }),
  ...opEvents(0, 'put', 'k', 2, { value: 'b' }, 3, { type: 'fail', error: 'KV_TIMEOUT' }),
  ...opEvents(1, 'get', 'k', 4, {}, 5, { value: 'a', version: '11' }),
  ...opEvents(1, 'get', 'k', 10, {}, 11, { value: 'b', version: '12' }),
]);

test('a sent request that failed throws by default, and is indeterminate with MAY_HAVE_TAKEN_EFFECT', (t) => {
  t.throws(() => registerHistories(timedOut), { message: /put k failed \(KV_TIMEOUT\)/ });
  const ops = registerHistories(timedOut, MAY_HAVE_TAKEN_EFFECT).get('k')!;
  t.is(ops.length, 4);
  t.is(ops.filter((op) => op.ret === undefined).length, 1);
  t.true(isLinearizable(ops, registerModel), 'the lost put took effect late');
  // A failure that is not listed still throws: a test must say what its faults may leave unknown.
  t.throws(() => registerHistories(timedOut, { indeterminateErrors: ['KV_DISCONNECTED'] }), { message: /KV_TIMEOUT/ });
});

test('a request that never left the client is dropped: a later read of its value is rejected', (t) => {
  const neverSent = timedOut.map((e) => (e.type === 'fail' ? { ...e, sent: false as const } : e));
  const ops = registerHistories(neverSent, MAY_HAVE_TAKEN_EFFECT).get('k')!;
  t.is(ops.length, 3);
  t.false(isLinearizable(ops, registerModel));
});

test('an invocation whose process died is an error by default, indeterminate when unfinished', (t) => {
  const died = sorted([...opEvents(0, 'incr', 'c', 0, { delta: '5' }), ...opEvents(1, 'incr', 'c', 3, { delta: '0' }, 4, { value: '5' })]);
  t.throws(() => counterHistories(died), { message: /1 operations never completed/ });
  const ops = counterHistories(died, { unfinished: true }).get('c')!;
  t.true(isLinearizable(ops, counterModel));
  // Counted once, not twice.
  const twice = sorted([...died, ...opEvents(1, 'incr', 'c', 5, { delta: '0' }, 6, { value: '10' })]);
  t.false(isLinearizable(counterHistories(twice, { unfinished: true }).get('c')!, counterModel));
});

test('lock histories: tokens from lock, KV_LOCK_CONTENDED as an answer, unlock with its token and outcome', (t) => {
  const events = sorted([
    ...opEvents(0, 'lock', 'm', 0, {}, 1, { version: '1' }),
    ...opEvents(1, 'lock', 'm', 2, {}, 3, { type: 'fail', error: 'KV_LOCK_CONTENDED' }),
    ...opEvents(0, 'unlock', 'm', 4, { token: '1' }, 5, { value: true }),
    ...opEvents(1, 'lock', 'm', 6, {}, 7, { version: '2' }),
  ]);
  const ops = lockHistories(events).get('m')!;
  t.deepEqual(ops.map((op) => (op.ret === undefined ? 'lost' : op.output)), [1n, null, true, 2n]);
  t.true(isLinearizable(ops, lockModel({ fencing: false })));
  // Token 1 again after it was released: rejected.
  const reused = events.map((e) => (e.version === '2' ? { ...e, version: '1' } : e));
  t.false(isLinearizable(lockHistories(reused).get('m')!, lockModel({ fencing: true })));
  // A history from a client that did not record unlock tokens cannot be checked.
  t.throws(() => lockHistories(events.map(({ token: _token, ...e }) => e)), { message: /unlock without its token/ });
  t.throws(() => counterHistories(events.slice(0, 2)), { message: /lock is not part of the counter model/ });
});
