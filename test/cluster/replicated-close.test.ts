// close() while a replicated write waits on its backup, after its primary was
// lost (shm; two kv-server processes with --replicas 2). The shm provider's hold
// hook keeps every request to the backup in flight, as a NIC's to a host that
// stopped answering, so the write's follower never reaches its next stop.
// Losing the primary fails the leader, which answers only once its follower has
// ended; the queue leaves such a write to the core while the core has other
// links. close() then detaches the backup's link, the core's last: the core
// closes, ends the follower and answers the write, and nothing polled it again,
// so the write's promise never settled (seen on verbs, where requests are in
// flight for real). Now the host hands out what the closed core answered.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import ava from 'ava';

import { KvClient, KvDisconnectedError } from '../../client/index.js';
import { etcdForFile } from '../helpers/etcd.js';
import { slow } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { nextStatus } from './helpers.js';
import { replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);

// Nothing may time out while the case runs: not the members' leases (no failover), not the
// client's keepalive of the held backup (its loss would end the follower), not the write.
const QUIET = ['--keepalive-ms', String(slow(60_000)), '--replace-after', '1h'];
const LEASE_SECONDS = Math.round(slow(60_000) / 1000);

test('a replicated write waiting on its backup settles when close() follows the loss of its primary', async (t) => {
  const prefix = '/test-replicated-close';
  const { members, replicasOf, dir } = await replicatedMembers(t, etcd, prefix, 2, 2, 'shm', QUIET, LEASE_SECONDS);
  // Read when the client's provider is made (the members are running already: theirs is not).
  const holdFile = join(dir, 'hold');
  process.env.RKV_SHM_TEST_HOLD_FILE = holdFile;
  t.teardown(() => void delete process.env.RKV_SHM_TEST_HOLD_FILE);
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: slow(120_000) });
  let closed = false;
  t.teardown(() => (closed ? undefined : kv.close()));
  await nextStatus(kv, 'ready');
  let key = 'stuck:0';
  for (let i = 0; replicasOf(key)[0] !== 'm0'; i++) key = `stuck:${i}`;
  const backup = members[1]!.process.child;

  await kv.put(key, 'before');
  // From here on, the backup's connection carries nothing: the write's follower waits there.
  writeFileSync(holdFile, String(backup.pid));
  let settled = false;
  const pending = kv.put(key, 'held').then(
    () => void (settled = true),
    (error: unknown) => ((settled = true), error),
  );
  await new Promise((resolve) => setTimeout(resolve, 50)); // some turns of polling: the write stays in flight whatever they do
  t.false(settled, 'the write waits for its follower');

  // The primary dies: the client loses it (the shm connection says so), and the write stays the core's.
  const lost = new Promise<void>((resolve) => kv.on('member', (name, status) => void (name === 'm0' && status !== 'ready' && resolve())));
  await members[0]!.process.stop('SIGKILL');
  await lost;
  t.false(settled, 'the write still waits for its follower');

  await kv.close();
  closed = true;
  await new Promise((resolve) => setImmediate(resolve));
  t.true(settled, 'the write settled by the time close() resolved');
  const outcome = await Promise.race([pending, new Promise((resolve) => setImmediate(() => resolve('unsettled')))]);
  t.true(outcome instanceof KvDisconnectedError, `the write failed as disconnected: ${String(outcome)}`);
  t.log(String(outcome));
});
