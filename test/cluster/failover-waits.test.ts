// How an op on a replicated cluster waits out a failover (client/cluster/failover-waits.ts),
// with stand-in routes: which failures it routes again (a member down, KV_EPOCH_MOVED, a
// disconnect before the op was sent, any disconnect of a GET), which it passes on at once
// (a refusal for good, a write that may have taken effect), and that it gives up at its
// timeout with the last error, leaving no waiter behind.
import test from 'ava';

import { FailoverWaits } from '../../client/cluster/failover-waits.js';
import { NOT_SENT } from '../../client/op-records.js';
import { ServerClient } from '../../client/server-client.js';
import { KvOp } from '../../protocol/constants.js';
import { KvDisconnectedError, KvError, KvInvalidArgumentError } from '../../protocol/errors.js';

/** A route's answer: a ServerClient whose routeRefusal says `refused` (undefined: it can take the op), holding a read lease or not. */
function member(refused?: KvError, readLeaseHeld = false): ServerClient {
  const server = Object.create(ServerClient.prototype) as ServerClient;
  Object.defineProperty(server, 'routeRefusal', { value: () => refused });
  Object.defineProperty(server, 'readLeaseHeld', { value: readLeaseHeld });
  return server;
}

const epochMoved = () => new KvError('KV_EPOCH_MOVED', 'moved', true);
const notSent = () => Object.assign(new KvDisconnectedError('lost before sending'), { [NOT_SENT]: true });
const waiters = (w: FailoverWaits) => (w as unknown as { waiters: Set<unknown> }).waiters.size;

test('a member down, then a config change: the op runs on the new route, at once on changed()', async (t) => {
  const waits = new FailoverWaits(60_000, () => false);
  let route: ServerClient | KvError = new KvDisconnectedError('replica m1 has no live registration');
  const ran: string[] = [];
  const pending = waits.run(KvOp.PUT, 'k', undefined, () => route, async () => {
    ran.push('ran');
    return 'ok';
  });
  await new Promise((resolve) => setImmediate(resolve));
  t.deepEqual(ran, []);
  route = member();
  waits.changed(); // well before the 100 ms re-route timer
  t.is(await pending, 'ok');
  t.deepEqual(ran, ['ran']);
  t.is(waiters(waits), 0);
});

test('what runs again: KV_EPOCH_MOVED, a disconnect before sending, and a GET after any disconnect', async (t) => {
  for (const [type, first] of [[KvOp.PUT, epochMoved()], [KvOp.DELETE, notSent()], [KvOp.GET, new KvDisconnectedError('lost')]] as const) {
    const waits = new FailoverWaits(60_000, () => false);
    let attempts = 0;
    const result = await waits.run(type, 'k', undefined, () => member(), async () => {
      if (attempts++ === 0) throw first;
      return 'second try';
    });
    t.is(result, 'second try', `op ${type} after ${first.code}`);
    t.is(attempts, 2);
  }
});

test('a GET answered after its read lease runs again: at once when the lease is held again (renewed in the same poll), else after a short wait', async (t) => {
  for (const held of [true, false]) {
    const waits = new FailoverWaits(60_000, () => false);
    let attempts = 0;
    const pending = waits.run(KvOp.GET, 'k', undefined, () => member(undefined, held), async () => {
      if (attempts++ === 0) throw new KvError('KV_READ_LEASE_LAPSED', 'late', true);
      return 'second try';
    });
    await new Promise((resolve) => setImmediate(resolve)); // microtasks only: no timer has run
    if (held) t.is(attempts, 2, 'run again without waiting');
    t.is(await pending, 'second try');
    t.is(attempts, 2);
    t.is(waiters(waits), 0);
  }
});

test('what fails at once: a write disconnected after it was sent, an INCR answered after its read lease, any other error, and a refusal for good', async (t) => {
  const waits = new FailoverWaits(60_000, () => false);
  let attempts = 0;
  const sent = new KvDisconnectedError('lost after sending');
  await t.throwsAsync(waits.run(KvOp.PUT, 'k', undefined, () => member(), async () => {
    attempts++;
    throw sent;
  }), { is: sent });
  const lapsedIncr = new KvError('KV_READ_LEASE_LAPSED', 'late', true); // an INCR may have added
  await t.throwsAsync(waits.run(KvOp.INCR, 'k', undefined, () => member(undefined, true), async () => {
    attempts++;
    throw lapsedIncr;
  }), { is: lapsedIncr });
  const full = new KvError('KV_TABLE_FULL', 'full');
  await t.throwsAsync(waits.run(KvOp.CAS, 'k', undefined, () => member(), async () => {
    attempts++;
    throw full;
  }), { is: full });
  t.is(attempts, 3, 'each tried once');
  const readOnly = new KvInvalidArgumentError('a read client cannot write');
  await t.throwsAsync(waits.run(KvOp.PUT, 'k', undefined, () => member(readOnly), async () => t.fail('not run')), { is: readOnly });
  await t.throwsAsync(waits.run(KvOp.PUT, 'k', undefined, () => readOnly, async () => t.fail('not run')), { is: readOnly });
  t.is(waiters(waits), 0);
});

test('at the timeout: the last error, and no waiter left behind; a closed client stops waiting', async (t) => {
  const waits = new FailoverWaits(250, () => false);
  const down = new KvDisconnectedError('replica m1 has no live registration');
  await t.throwsAsync(waits.run(KvOp.PUT, 'k', undefined, () => down, async () => t.fail('not run')), { is: down });
  t.is(waiters(waits), 0, 'timers that fired took their waiters with them');
  let closed = false;
  const closing = new FailoverWaits(60_000, () => closed);
  const pending = closing.run(KvOp.GET, 'k', undefined, () => down, async () => t.fail('not run'));
  closed = true;
  closing.changed();
  await t.throwsAsync(pending, { is: down });
});

test('each: one op per key, each routed alone', async (t) => {
  const waits = new FailoverWaits(60_000, () => false);
  const downKeys = new Set(['b']);
  const done: string[] = [];
  const pending = waits.each(KvOp.PUT, ['a', 'b', 'c'], (key) => (downKeys.has(String(key)) ? new KvDisconnectedError('down') : member()), async (_, key, i) => {
    done.push(`${String(key)}${i}`);
  });
  await new Promise((resolve) => setImmediate(resolve));
  t.deepEqual(done, ['a0', 'c2']);
  downKeys.clear();
  waits.changed();
  await pending;
  t.deepEqual(done, ['a0', 'c2', 'b1']);
});

test('getMany: one batch per primary that can take a GET; a batch that failed harmlessly runs again key by key, one that failed otherwise rejects; keys with no primary to read wait alone', async (t) => {
  const waits = new FailoverWaits(60_000, () => false);
  const [m0, m1, m2] = [member(), member(), member()];
  const down = new KvDisconnectedError('replica m3 has no live registration');
  let m3: ServerClient | KvError = down;
  const owner: Record<string, ServerClient | (() => ServerClient | KvError)> = { a: m0, b: m1, c: m0, d: m2, e: () => m3, f: m1 };
  const route = (key: unknown) => {
    const server = owner[String(key)]!;
    return typeof server === 'function' ? server() : server;
  };
  const batches: string[] = [];
  const alone: string[] = [];
  const lapsed = new KvError('KV_READ_LEASE_LAPSED', 'late', true);
  const pending = waits.getMany(['a', 'b', 'c', 'd', 'e', 'f'], route, async (server, keys, positions) => {
    batches.push(`${keys.map(String).join('')}@${positions.join(',')}`);
    if (server === m1) throw lapsed; // m1's batch: answered after its read lease
  }, async (_, key, i) => {
    alone.push(`${String(key)}${i}`);
  });
  await new Promise((resolve) => setImmediate(resolve));
  t.deepEqual(batches, ['ac@0,2', 'bf@1,5', 'd@3'], 'one batch per primary, with the keys\' positions');
  t.deepEqual(alone.sort(), ['b1', 'f5'], 'the lapsed batch\'s keys again, one by one; e waits for a primary');
  m3 = member();
  waits.changed();
  await pending;
  t.deepEqual(alone.sort(), ['b1', 'e4', 'f5']);
  t.is(waiters(waits), 0);

  const full = new KvError('KV_TABLE_FULL', 'not one a GET retries on');
  await t.throwsAsync(waits.getMany(['a', 'd'], route, async (server) => {
    if (server === m2) throw full;
  }, async () => t.fail('not run alone')), { is: full });
  t.deepEqual(await waits.getMany([], route, async () => t.fail('no batch'), async () => t.fail('no op')), undefined);
});
