// One source of truth: the constants the addon was compiled with are the ones
// TypeScript was generated with.
import test from 'ava';

import { builtProviders, constants, nativeConstants } from '../../native/index.js';

test('the addon exports exactly the generated constants', (t) => {
  t.deepEqual(nativeConstants, JSON.parse(JSON.stringify(constants)));
});

test('completion statuses mirror ibv_wc_status by value', (t) => {
  // A few anchors from <infiniband/verbs.h>, which every verbs program relies on.
  t.is(constants.WcStatus.SUCCESS, 0);
  t.is(constants.WcStatus.WR_FLUSH_ERR, 5);
  t.is(constants.WcStatus.REM_ACCESS_ERR, 10);
  t.is(constants.WcStatus.RNR_RETRY_EXC_ERR, 13);
  t.is(constants.Access.REMOTE_ATOMIC, 8);
});

test('the shm provider is always built', (t) => {
  t.true(builtProviders.includes('shm'));
});
