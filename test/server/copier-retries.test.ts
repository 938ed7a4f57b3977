// What the copier does when one key's copy fails (server/replication/copier.ts, withRetries): an error
// that may pass is tried again for that key; anything else ends the run. In the Soft-RoCE guest a member
// self-fenced for a moment lapsed the copier's read lease of its own region at every run's first GET,
// and each run was thrown away whole (95 s of runs failing on the same key, 2026-11-29; since then the
// copier reads its own member unleased, and a self-fence shows as a timeout of the CAS instead).
import test from 'ava';

import { KvError } from '../../protocol/errors.js';
import { withRetries } from '../../server/replication/copier.js';

/** A copy that fails with `code` `failures` times, then copies 7 bytes; and how often it was called. */
function failing(code: KvError['code'], failures: number) {
  let calls = 0;
  return {
    copy: async () => {
      calls++;
      if (calls <= failures) throw new KvError(code, `${code} #${calls}`, true);
      return 7;
    },
    calls: () => calls,
  };
}

test('a read lease that lapsed at the GET is waited out for that key: the run goes on', async (t) => {
  const lapsing = failing('KV_READ_LEASE_LAPSED', 3);
  t.is(await withRetries(lapsing.copy), 7);
  t.is(lapsing.calls(), 4);
});

test('a timeout is tried again, at most 5 times', async (t) => {
  const slow = failing('KV_TIMEOUT', 2);
  t.is(await withRetries(slow.copy), 7);
  const stuck = failing('KV_TIMEOUT', 100);
  await t.throwsAsync(withRetries(stuck.copy), { message: 'KV_TIMEOUT #5' });
  t.is(stuck.calls(), 5);
});

test('any other failure ends the run at once', async (t) => {
  const moved = failing('KV_EPOCH_MOVED', 1);
  await t.throwsAsync(withRetries(moved.copy), { message: 'KV_EPOCH_MOVED #1' });
  t.is(moved.calls(), 1);
});
