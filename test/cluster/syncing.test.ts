// Two pieces of repair seen alone, on in-process servers placed by hand under
// a config the test writes (no controller, no follower, no copier):
//  - a member syncing into a hash slot receives every client write of it (it
//    is written as a backup is), and is never read;
//  - a member's epoch follower drops what the member holds of a hash slot it
//    starts syncing into when its word is at an older epoch (it returned: its
//    items are stale), but not when its word was merely fenced at that very
//    epoch (self-fenced and lifted: it missed no write, and may already have
//    been reported copied);
//  - protocol v9: a replica's read lease counts only for a client whose config
//    is at least as new as the one the replica has applied; a client behind
//    reads config again, and its GETs go on once it has.
import ava, { type ExecutionContext } from 'ava';
import { pino } from 'pino';

import { KvClient } from '../../client/index.js';
import { SLOT_COUNT } from '../../protocol/hash-slots.js';
import { type ClusterConfig, etcdKeys } from '../../protocol/registry.js';
import type { KvServer } from '../../server/kv-server.js';
import { writeConfig } from '../../server/replication/config-store.js';
import { EpochFollower } from '../../server/replication/epoch-follower.js';
import { etcdForFile } from '../helpers/etcd.js';
import { startServer } from '../helpers/kv.js';
import { needing } from '../helpers/tools.js';
import { nextStatus } from './helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);
const ALL = Array.from({ length: SLOT_COUNT }, (_, i) => i);

/** In-process servers registered under `prefix` by hand, every hash slot's words open at `epoch`. */
async function handPlaced(t: ExecutionContext, prefix: string, names: string[], epoch: number): Promise<Map<string, KvServer>> {
  const keys = etcdKeys(prefix);
  const servers = new Map<string, KvServer>();
  t.teardown(() => Promise.all([...servers.values()].map((s) => s.close())));
  for (const name of names) {
    const server = await startServer('shm');
    servers.set(name, server);
    await etcd.client.put(keys.member(name)).value(JSON.stringify({ name, joined: new Date().toISOString(), replicas: 2 }));
    await etcd.client.put(keys.aliveKey(name)).value(JSON.stringify({ url: server.urls[0], pid: process.pid, host: 'test', started: new Date().toISOString() }));
    await server.epochBarrier(ALL, epoch);
  }
  return servers;
}

/** What `server` holds for `key`, read by a client that names it directly. */
async function direct(server: KvServer, key: string): Promise<string | undefined> {
  const c = await KvClient.connect({ url: server.urls[0]!, timeoutMs: 400 });
  try {
    return (await c.get(key))?.toString();
  } finally {
    await c.close();
  }
}

test.serial('a member syncing into a hash slot receives its writes (PUT, CAS, DELETE) as a backup does, and is never read', async (t) => {
  const prefix = '/test-syncing-writes';
  const servers = await handPlaced(t, prefix, ['a', 'b'], 3);
  const config: ClusterConfig = { epoch: 3, replicas: 2, members: ['a', 'b'], slots: [{ from: 0, to: SLOT_COUNT - 1, replicas: [0], syncing: [1], epoch: 3 }] };
  t.true(await writeConfig(etcd.client, etcdKeys(prefix), config, undefined));
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 2000 });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  const a = servers.get('a')!;
  const b = servers.get('b')!;
  await kv.put('k1', 'v1');
  await kv.put('k2', 'v2');
  t.deepEqual([await direct(a, 'k1'), await direct(b, 'k1')], ['v1', 'v1'], 'the PUT reached the syncing member');
  const { version } = (await kv.getWithVersion('k1'))!;
  t.true(await kv.cas('k1', version, 'v1b'));
  t.true(await kv.delete('k2'));
  t.deepEqual([await direct(b, 'k1'), await direct(b, 'k2')], ['v1b', undefined], 'CAS and DELETE too');
  // Reads go to the primary alone: what only the syncing member holds is never seen.
  const stray = await KvClient.connect({ url: b.urls[0]!, timeoutMs: 400 });
  await stray.put('only-on-b', 'x');
  await stray.close();
  t.is(await kv.get('only-on-b'), undefined);
});

test.serial("a member entering sync drops its stale items of the hash slot; fenced and lifted at the same epoch, it keeps what it was copied", async (t) => {
  const prefix = '/test-syncing-drop';
  const servers = await handPlaced(t, prefix, ['a', 'b'], 0);
  const b = servers.get('b')!;
  // b's region from an earlier life: a key, then every word fenced, as kv-server does before it registers.
  const stray = await KvClient.connect({ url: b.urls[0]!, timeoutMs: 400 });
  t.teardown(() => stray.close());
  await stray.put('stale', 'old');
  await stray.incr('stale-counter', 5n);
  for (const { table } of b.epochTables()) table!.fenceAll();
  const config: ClusterConfig = { epoch: 4, replicas: 2, members: ['a', 'b'], slots: [{ from: 0, to: SLOT_COUNT - 1, replicas: [0], syncing: [1], epoch: 4 }] };
  t.true(await writeConfig(etcd.client, etcdKeys(prefix), config, undefined));
  let fenced = false;
  const follower = await EpochFollower.start({ client: etcd.client, prefix, name: 'b', server: b, logger: pino({ level: 'silent' }), selfFenced: () => fenced });
  t.teardown(() => follower.close());
  t.is(await direct(b, 'stale'), undefined, 'its stale item of the hash slot is gone');
  t.is(b.stats().items, 0, 'the counter too');
  t.deepEqual(b.epochTables()[0]!.table!.read(0), { epoch: 4, state: 'open' });

  // What the copier and the writers give it now is kept across a self-fence at this epoch.
  await stray.put('copied', 'kept');
  fenced = true;
  for (const { table } of b.epochTables()) table!.fenceAll();
  fenced = false;
  await follower.poke();
  t.deepEqual(b.epochTables()[0]!.table!.read(0), { epoch: 4, state: 'open' });
  t.is(await direct(b, 'copied'), 'kept', 'not dropped: it missed no write while fenced');
});

test.serial('protocol v9: a replica grants its read lease only to a client whose config is as new as the one it applied; a client behind reads config again and then reads', async (t) => {
  const prefix = '/test-syncing-lease';
  const servers = await handPlaced(t, prefix, ['a', 'b'], 5);
  const config: ClusterConfig = { epoch: 5, replicas: 2, members: ['a', 'b'], slots: [{ from: 0, to: SLOT_COUNT - 1, replicas: [0, 1], syncing: [], epoch: 5 }] };
  t.true(await writeConfig(etcd.client, etcdKeys(prefix), config, undefined));
  const a = servers.get('a')!;
  let applied = 5;
  a.grantReadLeases(() => ({ leaseMs: 4000, configEpoch: applied }));
  servers.get('b')!.grantReadLeases(() => ({ leaseMs: 4000, configEpoch: applied }));
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 3000 });
  t.teardown(() => kv.close());
  await nextStatus(kv, 'ready');
  await kv.put('lease-key', 'one');
  t.is((await kv.get('lease-key'))?.toString(), 'one', 'config 5, replica at 5: reads count');

  // The replicas apply epoch 6, which this client's config does not have yet (its watch is not
  // told: the config in etcd changes only later). Its lease runs out and is not renewed.
  applied = 6;
  const raw = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: 300 });
  t.teardown(() => raw.close());
  await nextStatus(raw, 'ready');
  await t.throwsAsync(raw.get('lease-key'), { code: 'KV_READ_LEASE_LAPSED' }, 'a client at config 5 gets no lease from a replica at 6');
  // Once etcd has epoch 6, the client reads it (its watch, or the read the lapse asked for) and reads again.
  const six = { ...config, epoch: 6, slots: config.slots.map((r) => ({ ...r, epoch: 6 })) };
  for (const server of servers.values()) await server.epochBarrier(ALL, 6);
  t.true(await writeConfig(etcd.client, etcdKeys(prefix), six, (await etcd.client.get(etcdKeys(prefix).config).exec()).kvs[0]!.mod_revision));
  t.is((await kv.get('lease-key'))?.toString(), 'one', 'config 6, replica at 6: reads count again');
});
