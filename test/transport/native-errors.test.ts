// What the addon throws: instances of TransportError, constructed by native
// code itself (native/addon.ts hands it the class once per environment), with
// a string code, nothing wrapped on the way up.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

import test from 'ava';

import { Limit, Memory, TransportError } from '../../native/index.js';
import { connectPair } from '../helpers/pair.js';
import { providersUnderTest } from '../helpers/providers.js';

const addon = createRequire(import.meta.url)('node-gyp-build')(fileURLToPath(new URL('../../..', import.meta.url))) as {
  Memory: new (length: number) => unknown;
};

test('a bad argument throws a TransportError with its code from native code', (t) => {
  const error = t.throws(() => new Memory(0), { instanceOf: TransportError, message: 'memory length out of range' });
  t.is((error as TransportError).code, 'ERR_OUT_OF_RANGE');
  t.is(error!.name, 'TransportError');
  // The addon itself, with no typed face around it, throws the same.
  const bare = t.throws(() => new addon.Memory(0), { instanceOf: TransportError, message: 'memory length out of range' });
  t.is((bare as TransportError).code, 'ERR_OUT_OF_RANGE');
});

test('each worker thread gets instances of its own TransportError', async (t) => {
  const script = `
    const { parentPort } = require('node:worker_threads');
    import(${JSON.stringify(new URL('../../native/index.js', import.meta.url).href)}).then(({ Memory, TransportError }) => {
      try { new Memory(0); } catch (error) {
        parentPort.postMessage({ ours: error instanceof TransportError, code: error.code });
      }
    });`;
  const worker = new Worker(script, { eval: true, env: { ...process.env, RKV_QUIET: '1' } });
  const report = await new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  await worker.terminate();
  t.deepEqual(report, { ours: true, code: 'ERR_OUT_OF_RANGE' });
  // ...and the main thread's class is still the one this environment registered.
  t.throws(() => new Memory(0), { instanceOf: TransportError });
});

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a post that fails part way is a TransportError that says how many requests were posted`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    // Receives until the receive queue is full: the batch that overflows it is posted in part.
    const batch = Array.from({ length: Limit.MAX_POST_BATCH }, (_, i) => ({ wrId: i, local: p.scratch, localOffset: 64 * i, length: 64 }));
    let error: unknown;
    for (let i = 0; i < 64 && error === undefined; i++) {
      try {
        p.clientConn.postRecv(batch);
      } catch (thrown) {
        error = thrown;
      }
    }
    t.true(error instanceof TransportError, String(error));
    t.is((error as TransportError).code, 'ENOMEM');
    const { posted } = error as TransportError;
    t.true(typeof posted === 'number' && posted >= 0 && posted < Limit.MAX_POST_BATCH, `posted: ${posted}`);
    t.regex((error as Error).message, new RegExp(`^postRecv: .* at request ${posted} \\(the ones before it were posted\\)$`));
  });
}
