// KV conformance: concurrent get/put/delete/cas from several processes on a
// few keys form a linearizable history, and so do incr on a counter and
// lock/unlock of a lock (the checker's counter and lock models on real
// outputs). The checker's own tests, bad histories included, are in test/checker/.
import test from 'ava';

import { counterHistories, lockHistories, registerHistories } from '../helpers/history-operations.js';
import { recordHistories as histories, startServer } from '../helpers/kv.js';
import { isLinearizable } from '../helpers/linearizability.js';
import { counterModel, lockModel, registerModel } from '../helpers/linearizability-models.js';
import { providersUnderTest, testScale } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  const count = Math.max(50, Math.round(400 * testScale()));
  test(`${scheme}: 4 processes x ${count} concurrent get/put/delete/cas on 3 keys are linearizable`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const events = await histories(t, server.urls[0]!, 'lin', 4, count);
    const byKey = registerHistories(events);
    let total = 0;
    for (const [key, ops] of byKey) {
      total += ops.length;
      t.true(isLinearizable(ops, registerModel), `history of ${key} is not linearizable`);
    }
    t.log(`${total} operations on ${byKey.size} keys checked`);
    t.true(total > count * 4); // cas adds a getWithVersion
  });
}

for (const scheme of providersUnderTest()) {
  const count = Math.max(50, Math.round(300 * testScale()));
  test(`${scheme}: 3 processes x ${count} incr and lock/unlock on one counter and one lock are linearizable`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const events = await histories(t, server.urls[0]!, 'linatomic', 3, count);
    const counter = counterHistories(events.filter((e) => e.key === 'lin-ctr')).get('lin-ctr')!;
    const lock = lockHistories(events.filter((e) => e.key === 'lin-lock')).get('lin-lock')!;
    t.true(isLinearizable(counter, counterModel), 'the counter history is not linearizable');
    // No client is fenced here: only an unlock frees the lock.
    t.true(isLinearizable(lock, lockModel({ fencing: false })), 'the lock history is not linearizable');
    const taken = lock.filter((op) => op.ret !== undefined && typeof op.output === 'bigint').length;
    const contended = lock.filter((op) => op.ret !== undefined && op.output === null).length;
    t.log(`${counter.length} counter operations, ${taken} locks taken, ${contended} contended`);
    t.true(counter.length > count && taken > 0);
  });
}
