// The linearizability checker (test/helpers/linearizability.ts) and its
// models: hand-made histories that must be rejected (and good ones that must
// not), including ones that hinge on an indeterminate operation. Pure: no
// server. Random histories against a brute-force search are in
// linearizability-random.test.ts.
import test from 'ava';

import { type Operation, isLinearizable } from '../helpers/linearizability.js';
import { counterModel, lockModel, registerModel } from '../helpers/linearizability-models.js';

/** A completed operation over [call, ret]. */
const op = <I, O>(call: number, ret: number, input: I, output: O): Operation<I, O> => ({ call: BigInt(call), ret: BigInt(ret), input, output });
/** An indeterminate operation called at `call`: no return, no output. */
const lost = <I, O>(call: number, input: I): Operation<I, O> => ({ call: BigInt(call), ret: undefined, input });

const get = { f: 'get' } as const;
const put = (value: string) => ({ f: 'put', value }) as const;
const cas = (expected: string | null, value: string) => ({ f: 'cas', expected, value }) as const;
const incr = (delta: bigint | number) => ({ f: 'incr', delta: BigInt.asUintN(64, BigInt(delta)) }) as const;
const lock = { f: 'lock' } as const;
const unlock = (token: number) => ({ f: 'unlock', token: BigInt(token) }) as const;
const locks = lockModel({ fencing: false });
const fenced = lockModel({ fencing: true });

test('register: a stale read, a lost acknowledged write and a value back after an overwrite are rejected', (t) => {
  const writes = [op(0, 10, put('a'), undefined), op(20, 30, put('b'), undefined)];
  t.true(isLinearizable([...writes, op(31, 40, get, 'b')], registerModel));
  t.false(isLinearizable([...writes, op(31, 40, get, 'a')], registerModel), 'stale read');
  t.false(isLinearizable([op(0, 1, put('a'), undefined), op(2, 3, get, null)], registerModel), 'lost acknowledged write');
  // Two concurrent puts may land in either order, but once b is read, a cannot come back.
  const racing = [op(0, 10, put('a'), undefined), op(0, 10, put('b'), undefined)];
  t.true(isLinearizable([...racing, op(11, 12, get, 'a'), op(13, 14, get, 'a')], registerModel));
  t.false(isLinearizable([...racing, op(11, 12, get, 'b'), op(13, 14, get, 'a')], registerModel), 'value back after an overwrite');
  t.false(isLinearizable([op(0, 1, put('x'), undefined), op(2, 3, cas('y', 'z'), true)], registerModel), 'cas on a value never current');
  t.false(isLinearizable([op(0, 1, put('x'), undefined), op(2, 5, { f: 'delete' }, true), op(3, 6, { f: 'delete' }, true)], registerModel), 'two deletes found it');
});

test('register: an indeterminate write may take effect after it would have returned, or never, but not before its call nor twice', (t) => {
  const base = [op(0, 1, put('a'), undefined), op(4, 5, get, 'a')];
  // Read b long after the write of b timed out (at 3): only a late effect explains it.
  t.true(isLinearizable([...base, lost(2, put('b')), op(10, 11, get, 'b')], registerModel), 'late effect');
  t.false(isLinearizable([...base, op(2, 3, put('b'), undefined), op(10, 11, get, 'b')], registerModel), 'the same write acknowledged at 3');
  t.true(isLinearizable([...base, lost(2, put('b')), op(10, 11, get, 'a')], registerModel), 'no effect');
  t.false(isLinearizable([op(0, 1, get, 'b'), lost(2, put('b'))], registerModel), 'read before its call');
  t.false(isLinearizable([op(0, 1, put('a'), undefined), lost(2, put('b')), op(3, 4, get, 'b'), op(5, 6, get, 'a')], registerModel), 'read, then undone');
  // An indeterminate cas takes effect as the state says: here it must fail.
  t.false(isLinearizable([op(0, 1, put('a'), undefined), lost(2, cas('z', 'c')), op(3, 4, get, 'c')], registerModel));
  t.true(isLinearizable([op(0, 1, put('a'), undefined), lost(2, cas('a', 'c')), op(3, 4, get, 'c')], registerModel));
});

test('counter: every delta counts once, reads see the sum, and it wraps modulo 2^63', (t) => {
  const both = [op(0, 10, incr(1), 1n), op(0, 10, incr(2), 3n)];
  t.true(isLinearizable([...both, op(11, 12, incr(0), 3n)], counterModel));
  t.false(isLinearizable([op(0, 1, incr(5), 5n), op(2, 3, incr(0), 10n)], counterModel), 'a delta counted twice');
  t.false(isLinearizable([op(0, 1, incr(1), 1n), op(2, 3, incr(1), 2n), op(4, 5, incr(0), 1n)], counterModel), 'a lost increment');
  t.false(isLinearizable([op(0, 1, incr(1), 1n), op(2, 3, incr(0), 0n)], counterModel), 'a stale read');
  t.false(isLinearizable([op(0, 10, incr(1), 1n), op(0, 10, incr(1), 1n)], counterModel), 'two increments saw the same sum');
  t.true(isLinearizable([op(0, 1, incr(5), 5n), op(2, 3, incr(-2), 3n), op(4, 5, incr(-4), (1n << 63n) - 1n)], counterModel), 'negative deltas wrap');
  t.true(isLinearizable([op(0, 1, incr(3), 3n), op(2, 3, { f: 'delete' }, true), op(4, 5, incr(1), 1n)], counterModel), 'a deleted counter starts over');
  t.false(isLinearizable([op(0, 1, incr(3), 3n), op(2, 3, { f: 'delete' }, true), op(4, 5, incr(1), 4n)], counterModel), 'a deleted counter kept its value');
});

test('counter: an indeterminate increment counts once or never', (t) => {
  const base = [op(0, 1, incr(1), 1n), op(4, 5, incr(0), 1n)];
  t.true(isLinearizable([...base, lost(2, incr(5)), op(10, 11, incr(0), 6n)], counterModel), 'late effect');
  t.false(isLinearizable([...base, op(2, 3, incr(5), 6n), op(10, 11, incr(0), 6n)], counterModel), 'the same increment acknowledged at 3');
  t.true(isLinearizable([...base, lost(2, incr(5)), op(10, 11, incr(0), 1n)], counterModel), 'no effect');
  t.false(isLinearizable([...base, lost(2, incr(5)), op(10, 11, incr(0), 6n), op(12, 13, incr(0), 11n)], counterModel), 'counted twice');
});

test('lock: holders never overlap, tokens only grow', (t) => {
  const turn = [op(0, 1, lock, 1n), op(2, 3, unlock(1), true), op(4, 5, lock, 2n), op(6, 7, unlock(2), true)];
  t.true(isLinearizable(turn, locks));
  t.true(isLinearizable(turn, fenced));
  t.true(isLinearizable([...turn, op(8, 9, lock, 5n)], locks), 'a gap: acquisitions nobody saw');
  t.false(isLinearizable([op(0, 1, lock, 1n), op(2, 3, lock, 2n)], locks), 'two holders at once');
  t.false(isLinearizable([op(0, 1, lock, 1n), op(2, 3, lock, 2n), op(4, 5, unlock(1), true)], fenced), 'two holders, the first still released it');
  t.false(isLinearizable([op(0, 10, lock, 1n), op(0, 10, lock, 2n), op(11, 12, unlock(1), true), op(11, 12, unlock(2), true)], fenced), 'concurrent acquisitions both released');
  t.false(isLinearizable([...turn.slice(0, 2), op(4, 5, lock, 1n)], locks), 'a reused token');
  t.false(isLinearizable([op(0, 1, lock, 5n), op(2, 3, unlock(5), true), op(4, 5, lock, 3n)], fenced), 'a shrinking token');
  t.false(isLinearizable([op(0, 1, lock, 1n), op(2, 3, unlock(1), false)], locks), 'its holder could not release it');
  t.false(isLinearizable([op(0, 1, lock, 1n), op(2, 3, unlock(1), true), op(4, 5, unlock(1), true)], locks), 'released twice');
  t.true(isLinearizable([op(0, 1, lock, 1n), op(2, 3, lock, null)], locks), 'contended while held');
  t.false(isLinearizable([op(0, 1, lock, 1n), op(2, 3, unlock(1), true), op(4, 5, lock, null)], locks), 'contended while free');
});

test('lock: with fencing a holder may lose the lock, and then its unlock answers false', (t) => {
  const taken = [op(0, 1, lock, 1n), op(2, 3, lock, 2n), op(4, 5, unlock(1), false)];
  t.true(isLinearizable(taken, fenced));
  t.false(isLinearizable(taken, locks), 'without fencing the lock was never free');
  t.true(isLinearizable([...taken, op(6, 7, unlock(2), true)], fenced));
});

test('lock: an indeterminate lock may never take effect, and an indeterminate unlock may take effect late', (t) => {
  // Held by 1 forever: the lost lock cannot have taken it at any point.
  t.true(isLinearizable([op(0, 1, lock, 1n), lost(2, lock), op(3, 4, lock, null)], locks), 'no effect');
  t.false(isLinearizable([op(0, 1, lock, 1n), op(2, 3, lock, 2n)], locks));
  // The unlock timed out at 2; a lock gave up at [3, 4], so the lock was still held then; token 2 came at [5, 6].
  const late = [op(0, 1, lock, 1n), op(3, 4, lock, null), op(5, 6, lock, 2n)];
  t.true(isLinearizable([late[0]!, lost(2, unlock(1)), ...late.slice(1)], locks), 'late release');
  t.false(isLinearizable([late[0]!, op(2, 2, unlock(1), true), ...late.slice(1)], locks), 'released at 2: free at [3, 4]');
  // A lost lock that took effect: its token (unseen, at least 2) makes token 2 impossible after it.
  t.false(isLinearizable([op(0, 1, lock, 1n), op(2, 3, unlock(1), true), lost(4, lock), op(5, 6, lock, null), op(7, 8, lock, 2n)], fenced));
  t.true(isLinearizable([op(0, 1, lock, 1n), op(2, 3, unlock(1), true), lost(4, lock), op(5, 6, lock, null), op(7, 8, lock, 3n)], fenced));
});
