// Repair's rate limit (server/replication/pacer.ts), on a clock the test moves.
import test from 'ava';

import { Pacer } from '../../server/replication/pacer.js';

test('the copier may burst one second of bytes, then waits so that the bytes stay at the rate; a pause is not made up for', (t) => {
  let now = 0;
  const pacer = new Pacer(1000, () => now); // 1000 bytes a second
  t.is(pacer.spent(600), 0);
  t.is(pacer.spent(400), 0, 'one second of bytes at once');
  t.is(pacer.spent(500), 500, '500 bytes over: half a second');
  now += 500;
  t.is(pacer.spent(100), 100);
  now += 10_000; // a long pause: the bucket holds one second, not ten
  t.is(pacer.spent(1000), 0);
  t.is(pacer.spent(1000), 1000);
});

test('rate 0: no limit', (t) => {
  const pacer = new Pacer(0, () => 0);
  t.is(pacer.spent(1e12), 0);
});

test('a new rate holds from its setting: an allowance above it is taken back, 0 lifts the limit, a limit set after none starts with nothing saved', (t) => {
  let now = 0;
  const pacer = new Pacer(10_000, () => now);
  pacer.setRate(1000);
  t.is(pacer.spent(1000), 0, 'one second at the new rate');
  t.is(pacer.spent(1000), 1000);
  pacer.setRate(0);
  t.is(pacer.spent(1e9), 0);
  pacer.setRate(500);
  t.is(pacer.spent(250), 500, 'nothing saved while unlimited: 250 bytes at 500 a second');
});
