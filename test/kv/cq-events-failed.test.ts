// An event-mode client whose completion queue's event fd fails (POLLERR: an RDMA device that
// went away, as in a NIC's reset) keeps finishing its operations: its watch polls the CQ on a
// timer from then on (CqWatcher) and says so once, as a process warning. Before, the watch went
// silent: on rdma an operation then waited for the keepalive's poll (set to a minute here, so it
// would time out); on shm most operations finish inside their posts, so there only the warning
// tells the two apart. test/transport/cq-watch.test.ts pins the watch itself down.
import test from 'ava';

import type { CoreHosts } from '../../client/core-host.js';
import type { KvClient } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

function failEvents(kv: KvClient, scheme: string): void {
  (kv as unknown as { hosts: CoreHosts }).hosts.of(scheme).cq.native.failEventsForTest();
}

for (const scheme of providersUnderTest()) {
  test(`${scheme} (event): after its CQ's event fd fails, the client's operations still finish, and a warning says why once`, async (t) => {
    const server = await startServer(scheme, { keepaliveMs: 60_000 }); // its poll would hide a silent watch
    t.teardown(() => server.close());
    const kv = await connect(server, { pollMode: 'event' });
    t.teardown(() => kv.close());
    await kv.put('before', 'one');
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => {
      if ((warning as Error & { code?: string }).code === 'RKV_CQ_EVENTS_FAILED') warnings.push(warning);
    };
    process.on('warning', onWarning);
    t.teardown(() => process.off('warning', onWarning));
    failEvents(kv, scheme);
    // Sequential (each waits for its completion) and concurrent, reads and writes.
    t.is((await kv.get('before'))?.toString(), 'one');
    for (let i = 0; i < 20; i++) await kv.put(`k${i}`, `v${i}`);
    const values = await Promise.all(Array.from({ length: 20 }, (_, i) => kv.get(`k${i}`)));
    t.deepEqual(values.map((v) => v?.toString()), Array.from({ length: 20 }, (_, i) => `v${i}`));
    t.deepEqual((await kv.getMany(['k0', 'k19', 'missing'])).map((v) => v?.toString()), ['v0', 'v19', undefined]);
    await new Promise((resolve) => setImmediate(resolve)); // process warnings are emitted on the next tick
    t.is(warnings.length, 1);
    t.regex(warnings[0]!.message, /event fd failed \(bad file descriptor\)/);
  });
}
