// KvClient.close() of a client that follows etcd, while its etcd does not
// answer (a partition that drops packets: the TCP connection stays up and
// carries nothing). Before, close() never ended: it cancels its watch, and
// etcd3's cancel waits for etcd to confirm it (now waited for 1 s at most);
// and the process never exited: closing the etcd client leaves a call still
// open (the watch) on its connection (now pinged: gRPC keepalive closes a
// connection that does not answer). A load process of the replicated failover
// tests that did not exit after its last operation kept a case waiting for 10
// minutes in CI (4fdda7d); whether this was why is not known.
import ava from 'ava';

import { etcdForFile } from '../helpers/etcd.js';
import { EtcdProxy } from '../helpers/etcd-proxy.js';
import { forkKvChild } from '../helpers/kv.js';
import { slow } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { clusterDir, eventually, startMember, stopAll } from './helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);

test('close() ends, and the process exits, while etcd takes requests in and never answers them', async (t) => {
  const prefix = '/test-close-etcd';
  const dir = clusterDir(t);
  const member = await startMember(dir, 0, ['--etcd', etcd.url, '--etcd-prefix', prefix, '--name', 'm0']);
  t.teardown(() => stopAll([member]));
  const proxy = await EtcdProxy.start(etcd.url);
  t.teardown(() => proxy.close());

  const child = forkKvChild(t, ['closing', `etcd+${proxy.url}${prefix}`]);
  const reports: Array<Record<string, unknown>> = [];
  child.on('message', (m: Record<string, unknown>) => reports.push(m));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  await eventually(() => reports.some((m) => m.ready), 'the child connected');

  proxy.stall();
  child.send('close');
  const guardMs = slow(30_000); // a guard: without the fix the child waits for etcd for good
  const outcome = await Promise.race([exited.then((code) => ({ code })), new Promise((resolve) => setTimeout(() => resolve(`still running after ${guardMs} ms`), guardMs).unref())]);
  t.deepEqual(outcome, { code: 0 }, 'the child exits once its client is closed');
  t.true(reports.some((m) => m.closed === 'closed'), 'close() resolved');
});
