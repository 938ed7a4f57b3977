// The self-fence's clock alone (server/replication/self-fence.ts; the cluster
// behaviour is test/cluster/self-fence.test.ts): with a lease of T, a member
// whose last acknowledged keepalive was sent at S fences at S + T/2 − 100 ms,
// grants read leases only until then, and lifts the fence when a keepalive
// sent before its new deadline comes back.
import test from 'ava';
import { pino } from 'pino';

import { SelfFence } from '../../server/replication/self-fence.js';
import { eventually } from '../helpers/providers.js';

function fence(ttlMs: number) {
  const calls: string[] = [];
  const self = new SelfFence({ ttlMs, keepaliveMs: 10_000, fence: () => calls.push('fence'), lift: () => calls.push('lift'), logger: pino({ level: 'silent' }) });
  return { self, calls };
}

test('no read lease before the first acknowledged keepalive; then one up to the deadline, never past it', (t) => {
  const { self, calls } = fence(60_000);
  t.is(self.leaseMs(), undefined);
  const sentAt = performance.now() - 1000;
  self.acknowledged(sentAt);
  const lease = self.leaseMs()!;
  // deadline = sentAt + 30 000 - 100: 28 900 ms from the call at most, capped at 2 × keepaliveMs (20 000)
  t.is(lease, 20_000);
  self.acknowledged(performance.now() - 25_000); // older than the one counted: moves nothing back
  t.is(self.leaseMs(), 20_000);
  t.deepEqual(calls, []);
  t.false(self.fenced);
  self.close();
});

test('fenced once the deadline passes without another keepalive: no lease; a keepalive sent before the new deadline lifts it', async (t) => {
  const { self, calls } = fence(400); // deadline: sent + 100 ms
  self.acknowledged(performance.now());
  t.true((self.leaseMs() ?? 0) > 0);
  await eventually(() => self.fenced, 'fenced at its deadline');
  t.deepEqual(calls, ['fence']);
  t.is(self.leaseMs(), undefined, 'a fenced member grants no read lease');
  self.acknowledged(performance.now() - 1000); // sent long before: its deadline passed already
  t.true(self.fenced, 'a keepalive whose deadline has passed lifts nothing');
  t.deepEqual(calls, ['fence']);
  self.acknowledged(performance.now());
  t.false(self.fenced);
  t.deepEqual(calls, ['fence', 'lift']);
  t.true((self.leaseMs() ?? 0) > 0);
  await eventually(() => self.fenced, 'fenced again at the next deadline');
  t.deepEqual(calls, ['fence', 'lift', 'fence']);
  self.close();
});

test('a lease is never granted past the deadline, even when the timer that fences comes late (a stalled process)', (t) => {
  const { self, calls } = fence(400);
  self.acknowledged(performance.now() - 150); // its deadline (sent + 100 ms) is already over; the timer has not run
  t.is(self.leaseMs(), undefined);
  t.deepEqual(calls, []);
  self.close();
});
