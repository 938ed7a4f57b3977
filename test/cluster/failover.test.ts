// Sharding over a static server list, per provider (shm on the host, rdma in
// the Soft-RoCE guest): three kv-server processes, one client spreading keys
// over them, one server killed and restarted on its region file, and a
// client that connects while a member is down.
import test from 'ava';

import { KvClient, type KvError, isRetryable } from '../../client/index.js';
import { providersUnderTest, testScale, testTimeoutMs } from '../helpers/providers.js';
import { type Member, clusterDir, eventually, memberUrl, nextStatus, restartMember, startMember, stats, stopAll } from './helpers.js';

/** 100k on a normal machine; RKV_TEST_SCALE shrinks it in the emulated guest (the same keys, so the same spread). */
const KEYS = Math.round(100_000 * testScale());
const key = (i: number) => `user:${i}`;
const value = (i: number) => `value-${i}-${'x'.repeat(i % 50)}`;

async function putAll(kv: KvClient, count: number): Promise<void> {
  for (let from = 0; from < count; from += 5000) {
    const batch: Array<[string, string]> = [];
    for (let i = from; i < Math.min(count, from + 5000); i++) batch.push([key(i), value(i)]);
    await kv.putMany(batch);
  }
}

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: ${KEYS} keys spread over 3 servers; one dies: its keys fail fast and retryably, the rest serve; back on its region file: all readable`, async (t) => {
    const dir = clusterDir(t);
    const members: Member[] = [];
    for (let i = 0; i < 3; i++) members.push(await startMember(dir, i, [], await memberUrl(scheme, dir, i)));
    const kv = await KvClient.connect({ servers: members.map((m) => m.url), timeoutMs: Math.max(30_000, testTimeoutMs()) });
    try {
      t.is(kv.status, 'ready');
      await putAll(kv, KEYS);

      // Each server holds exactly the keys the map sends it: about a third.
      const expected = new Map<string, number>();
      for (let i = 0; i < KEYS; i++) expected.set(kv.memberFor(key(i))!, (expected.get(kv.memberFor(key(i))!) ?? 0) + 1);
      await eventually(async () => (await Promise.all(members.map(stats))).every((s, i) => s.items === expected.get(members[i]!.url)), 'items per server match the map');
      for (const m of members) {
        const share = expected.get(m.url)! / KEYS;
        t.true(share > 0.3 && share < 0.37, `${m.url} holds ${(share * 100).toFixed(1)} % of the keys`);
      }
      t.deepEqual(kv.layout().map((l) => l.status), ['ready', 'ready', 'ready']);

      // SIGKILL the second server.
      const dead = members[1]!;
      const degraded = nextStatus(kv, 'degraded');
      await dead.process.stop('SIGKILL');
      await degraded;
      const sample = Array.from({ length: 3000 }, (_, j) => Math.floor((j * KEYS) / 3000));
      const results = await Promise.allSettled(sample.map((i) => kv.get(key(i))));
      let failed = 0;
      results.forEach((r, j) => {
        const i = sample[j]!;
        if (kv.memberFor(key(i)) === dead.url) {
          failed++;
          t.is(r.status, 'rejected', `${key(i)} is on the dead server`);
          const error = (r as PromiseRejectedResult).reason as KvError;
          t.is(error.code, 'KV_DISCONNECTED'); // not KV_TIMEOUT: it failed fast
          t.true(isRetryable(error));
        } else {
          t.is(r.status, 'fulfilled', `${key(i)} is on a live server`);
          t.is((r as PromiseFulfilledResult<Buffer | undefined>).value?.toString(), value(i));
        }
      });
      t.true(failed > 500 && failed < 1500, `${failed} of ${sample.length} keys on the dead server`);
      // Writes to the live servers go on.
      const fresh = Array.from({ length: 60 }, (_, j) => `fresh:${j}`).filter((k) => kv.memberFor(k) !== dead.url);
      await Promise.all(fresh.map((k) => kv.put(k, k)));
      t.deepEqual((await kv.getMany(fresh)).map(String), fresh);

      // Back on the same socket and region file: the client reconnects by itself.
      const ready = nextStatus(kv, 'ready');
      await restartMember(dead);
      await ready;
      const all = await kv.getMany(sample.map(key));
      all.forEach((v, j) => t.is(v?.toString(), value(sample[j]!), key(sample[j]!)));
      const onDead = Array.from({ length: KEYS }, (_, i) => i).filter((i) => kv.memberFor(key(i)) === dead.url);
      const back = await kv.getMany(onDead.map(key));
      t.is(back.filter((v, j) => v?.toString() === value(onDead[j]!)).length, onDead.length, 'every key of the restarted server is readable');
    } finally {
      await kv.close();
      await stopAll(members);
    }
  });
}

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: a server down at connect time: the client connects degraded, fails that server's keys fast, and picks it up when it starts`, async (t) => {
    const dir = clusterDir(t);
    const up = await startMember(dir, 0, [], await memberUrl(scheme, dir, 0));
    const later = await startMember(dir, 1, [], await memberUrl(scheme, dir, 1));
    await later.process.stop('SIGTERM');
    const kv = await KvClient.connect({ servers: [up.url, later.url], timeoutMs: testTimeoutMs() });
    try {
      t.is(kv.status, 'degraded');
      const k = Array.from({ length: 100 }, (_, i) => `k${i}`).find((x) => kv.memberFor(x) === later.url)!;
      const error = await t.throwsAsync<KvError>(kv.put(k, 'v'));
      t.is(error?.code, 'KV_DISCONNECTED');
      const ready = nextStatus(kv, 'ready');
      await restartMember(later);
      await ready;
      await kv.put(k, 'v');
      t.is((await kv.get(k))?.toString(), 'v');
    } finally {
      await kv.close();
      await stopAll([up, later]);
    }
  });
}
