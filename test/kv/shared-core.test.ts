// A KvClient drives all its members over one provider with one native core
// (client/core-host.ts): each member's session is one link of it. Losing a
// member must fail only that member's ops, even while another member's are
// in flight in the same core, and its reconnect must add a link to the core
// the others still use.
import test from 'ava';

import { KvClient, type KvError } from '../../client/index.js';
import { ClientCore } from '../../native/index.js';
import { startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';

// The cores that took ops.
const cores = new Set<ClientCore>();
const { submit } = ClientCore.prototype;
ClientCore.prototype.submit = function (this: ClientCore, count: number) {
  cores.add(this);
  return submit.call(this, count);
};

/** A key of the member `name`. */
function keyOf(kv: KvClient, name: string, prefix: string): string {
  for (let i = 0; ; i++) if (kv.memberFor(`${prefix}${i}`) === name) return `${prefix}${i}`;
}

for (const scheme of providersUnderTest()) {
  for (const pollMode of ['busy', 'event'] as const) {
    test.serial(`${scheme} (${pollMode}): a lost member fails only its ops in the shared core; the other's op in flight completes, and the member comes back on the same core`, async (t) => {
      cores.clear();
      const a = await startServer(scheme);
      const b = await startServer(scheme);
      t.teardown(() => b.close());
      const urls = [a.urls[0]!, b.urls[0]!];
      const options = { servers: urls, timeoutMs: testTimeoutMs(), pollMode };
      const holder = await KvClient.connect(options);
      t.teardown(() => holder.close());
      const kv = await KvClient.connect(options);
      t.teardown(() => kv.close());
      const onA = keyOf(kv, urls[0]!, 'a');
      const onB = keyOf(kv, urls[1]!, 'b');
      const lockNameA = keyOf(kv, urls[0]!, 'lock-a');
      const lockNameB = keyOf(kv, urls[1]!, 'lock-b');
      await kv.putMany([[onA, '1'], [onB, '2']]);
      t.deepEqual((await kv.getMany([onA, onB])).map(String), ['1', '2']);
      const kvCores = [...cores].filter((core) => core.connections === 2);
      t.true(kvCores.length >= 1, 'a core drives both members');

      // In flight in kv's core, one on each member: LOCKs waiting for the holder's.
      const lockA = await holder.lock(lockNameA);
      const lockB = await holder.lock(lockNameB);
      const waitingA = kv.lock(lockNameA, { timeoutMs: slow(60_000) });
      const waitingB = kv.lock(lockNameB, { timeoutMs: slow(60_000) });
      const settled = { b: false };
      void waitingB.then(() => (settled.b = true), () => (settled.b = true));
      await new Promise((resolve) => setTimeout(resolve, 50));
      await a.close();
      const lostA = (await t.throwsAsync(waitingA)) as KvError;
      t.is(lostA.code, 'KV_DISCONNECTED');
      t.regex(lostA.message, /the connection to the server is gone \(.+\)$/, 'it says why the connection went');
      t.false(settled.b, "the other member's LOCK is still waiting");
      await lockB.release();
      const gotB = await waitingB;
      t.truthy(gotB, "the other member's LOCK completes");
      await gotB.release();
      t.is((await kv.get(onB))?.toString(), '2');
      void lockA; // its server is gone

      // The member comes back (empty: no region file) and is served by the core the other still uses.
      const a2 = await startServer(scheme, { listen: [urls[0]!] });
      t.teardown(() => a2.close());
      await eventually(() => kv.status === 'ready', 'kv reconnected to the restarted member', slow(15_000));
      await kv.put(onA, '3');
      t.is((await kv.get(onA))?.toString(), '3');
      t.is((await kv.get(onB))?.toString(), '2');
      t.true([...cores].some((core) => core.connections === 2 && kvCores.includes(core)), 'the reconnect is a link of the same core');
    });
  }
}
