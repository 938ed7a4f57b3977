// KV conformance: concurrent get/put/delete/cas from several processes on a
// few keys form a linearizable history.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import type { HistoryEvent } from '../../client/index.js';
import { runKvChild, startServer } from '../helpers/kv.js';
import { registerHistories } from '../helpers/history-operations.js';
import { type Operation, isLinearizable } from '../helpers/linearizability.js';
import { type RegisterInput, type RegisterOutput, registerModel } from '../helpers/linearizability-models.js';
import { providersUnderTest, testScale } from '../helpers/providers.js';

const op = (call: number, ret: number, input: RegisterInput, output: RegisterOutput): Operation<RegisterInput, RegisterOutput> => ({ call: BigInt(call), ret: BigInt(ret), input, output });

test('the checker accepts a linearizable history and rejects a stale read', (t) => {
  // put(a) overlaps a get that sees it; a later put(b); then a get of b.
  const good = [op(0, 10, { f: 'put', value: 'a' }, undefined), op(5, 15, { f: 'get' }, 'a'), op(20, 30, { f: 'put', value: 'b' }, undefined), op(31, 40, { f: 'get' }, 'b')];
  t.true(isLinearizable(good, registerModel));
  // The same, but the last get returns the overwritten value after the put completed.
  const stale = [...good.slice(0, 3), op(31, 40, { f: 'get' }, 'a')];
  t.false(isLinearizable(stale, registerModel));
  // A successful cas against a value that was never current is rejected.
  t.false(isLinearizable([op(0, 1, { f: 'put', value: 'x' }, undefined), op(2, 3, { f: 'cas', expected: 'y', value: 'z' }, true)], registerModel));
  // Two deletes of one key cannot both find it.
  t.false(isLinearizable([op(0, 1, { f: 'put', value: 'x' }, undefined), op(2, 5, { f: 'delete' }, true), op(3, 6, { f: 'delete' }, true)], registerModel));
});

for (const scheme of providersUnderTest()) {
  const count = Math.max(50, Math.round(400 * testScale()));
  test(`${scheme}: 4 processes x ${count} concurrent get/put/delete/cas on 3 keys are linearizable`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const dir = mkdtempSync(join(tmpdir(), 'rkv-history-'));
    const files = [0, 1, 2, 3].map((p) => join(dir, `p${p}.jsonl`));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    await Promise.all(files.map((file, p) => runKvChild(t, ['lin', server.urls[0]!, String(p), String(count), file])));
    const events = files.flatMap((file, p) =>
      readFileSync(file, 'utf8').trim().split('\n').map((line) => ({ ...(JSON.parse(line) as HistoryEvent), process: p })),
    );
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
