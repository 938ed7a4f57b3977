// Region format 5's epoch table and the epoch barrier (docs/replication-design.md
// §4.2-4.3; replication's step 4, server side). The barrier must wait for every
// writer that holds bucket locks when it closes the hash slots' words: the
// paused writer is made deterministic by the shm provider's test hook
// (RKV_SHM_TEST_STOP_BEFORE=WRITE:8 stops the child by SIGSTOP right before its
// PUT's commit, holding the key's two bucket locks), as in fencing.test.ts.
import { open } from 'node:fs/promises';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import { EpochWord, KvLayout, Superblock } from '../../protocol/constants.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { EpochBarrierError } from '../../server/replication/epoch-barrier.js';
import { EPOCH_TABLE_BYTES, readSuperblock } from '../../server/store/layout.js';
import { EpochTable } from '../../server/store/epoch-table.js';
import { hashKey } from '../../native/index.js';
import { connect, forkKvChild, processStopped, startServer } from '../helpers/kv.js';
import { rawClient } from '../helpers/raw-client.js';
import { kvServer } from '../server/helpers.js';
import { writeEmptyRegionOfFormat } from '../helpers/region-file.js';
import { eventually, listenUrl, providersUnderTest } from '../helpers/providers.js';


/** Settles within the current turns of the event loop? (A pending promise stays pending.) */
const settledYet = async (promise: Promise<unknown>): Promise<boolean> => {
  let settled = false;
  promise.then(() => (settled = true), () => (settled = true));
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
  return settled;
};

const scheme = providersUnderTest()[0]!;

test('a new region is format 5: an epoch table between the rings and the index, every hash slot open at epoch 0, and a region id kept across restarts', async (t) => {
  const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-epochs-')), 'region');
  const first = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  const sb = readSuperblock(first.region);
  t.is(sb.version, 5);
  const { layout } = first.namespace('default');
  t.is(sb.epochOffset, layout.epochOffset);
  t.true(sb.epochOffset >= layout.ringOffset + layout.maxClients * layout.ringBytes, 'after the rings');
  t.true(sb.epochOffset + EPOCH_TABLE_BYTES <= sb.indexOffset, 'before the index');
  t.not(sb.regionId, 0n);
  const epochs = new EpochTable(first.region, sb.epochOffset);
  for (const slot of [0, 1, 8191, EpochWord.HASH_SLOTS - 1]) t.deepEqual(epochs.read(slot), { epoch: 0, state: 'open' });
  const kv = await connect(first);
  await kv.put('kept', 'value');
  await kv.close();
  await first.close();

  const second = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  t.teardown(() => second.close());
  t.is(readSuperblock(second.region).regionId, sb.regionId, 'the same region, the same id');
  const reader = await connect(second);
  t.teardown(() => reader.close());
  t.is((await reader.get('kept'))?.toString(), 'value');
});

test('a region file of format 4 (no epoch table) is served in its own layout, keeps its data and its format, and refuses a barrier', async (t) => {
  const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-format4-')), 'region');
  const probe = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  const { layout } = probe.namespace('default');
  const seed = readSuperblock(probe.region).seed;
  await probe.close();
  // What the previous release wrote for the same options: an empty format-4 region.
  const old = writeEmptyRegionOfFormat(regionFile, layout, seed, 4);
  t.is(old.epochOffset, 0);

  const server = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  t.teardown(() => server.close());
  t.is(readSuperblock(server.region).version, 4, 'still format 4');
  t.is(server.namespace('default').layout.indexOffset, old.indexOffset, 'its index where format 4 has it');
  const kv = await connect(server);
  t.teardown(() => kv.close());
  await kv.put('in format 4', 'yes');
  t.is((await kv.get('in format 4'))?.toString(), 'yes');
  const error = await t.throwsAsync(server.epochBarrier([1], 1));
  t.true(error instanceof EpochBarrierError, String(error));
  t.regex(error!.message, /format 4, which has no epoch table/);
  t.is(Number(server.region.readBigUInt64LE(Superblock.EPOCH_OFFSET)), 0, 'no epoch table was written into it');
});

test('kv-server --etcd (--replicas 2, and 1) refuses a format-4 region file: writes routed by the config check every replica\'s epoch word', async (t) => {
  const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-format4-replicas-')), 'region');
  const probe = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile, memoryBytes: 64 << 20 });
  const { layout } = probe.namespace('default');
  const seed = readSuperblock(probe.region).seed;
  await probe.close();
  writeEmptyRegionOfFormat(regionFile, layout, seed, 4);
  // The region is checked before etcd is dialled: this address is never used.
  const args = ['--listen', listenUrl('shm'), '--memory', '64M', '--region-file', regionFile, '--etcd', 'http://127.0.0.1:9', '--name', 'm'];
  for (const replicas of ['2', '1']) {
    const refused = await kvServer([...args, '--replicas', replicas], { RKV_EXPERIMENTAL_REPLICAS: '1' });
    t.is(refused.code, 1, refused.stderr);
    t.regex(refused.stderr, /^kv-server: --etcd: .* is of region format 4, which has no epoch table; a cluster member needs format 5 \(hash slots move with their keys by copying, at every --replicas\): serve it without --etcd, or copy its data into a new region$/m);
  }
});

test('a region file of format 6 is refused, naming the formats this server reads', async (t) => {
  const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-format6-')), 'region');
  const server = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  await server.close();
  const file = await open(regionFile, 'r+');
  const word = Buffer.alloc(8);
  word.writeBigUInt64LE(BigInt(KvLayout.REGION_FORMAT + 1));
  await file.write(word, 0, 8, Superblock.VERSION);
  await file.close();
  const error = await t.throwsAsync(startServer(scheme, { listen: [listenUrl(scheme)], regionFile }));
  t.regex(error!.message, /holds region format 6; this kv-server reads region formats 3, 4 and 5 only/);
});

test("a write client's hello names the epoch table (protocol v7 and later); a server that is no replica grants no read lease (v8)", async (t) => {
  const server = await startServer(scheme);
  t.teardown(() => server.close());
  const raw = await rawClient(t, scheme, server);
  t.is(raw.hello.v, KvLayout.PROTOCOL_VERSION);
  t.is(raw.hello.readLeaseMs, undefined);
  t.is(raw.hello.region.epochOffset, BigInt(server.namespace('default').layout.epochOffset));
});

test('with no lock held the barrier opens the hash slots at the new epoch and leaves the others alone', async (t) => {
  const server = await startServer(scheme);
  t.teardown(() => server.close());
  const epochs = new EpochTable(server.region, readSuperblock(server.region).epochOffset);
  const report = await server.epochBarrier([5, 6, 7], 3);
  t.is(report.waitedFor, 0);
  for (const slot of [5, 6, 7]) t.deepEqual(epochs.read(slot), { epoch: 3, state: 'open' });
  t.deepEqual(epochs.read(4), { epoch: 0, state: 'open' });
  t.deepEqual(epochs.read(8), { epoch: 0, state: 'open' });
  await t.throwsAsync(server.epochBarrier([EpochWord.HASH_SLOTS], 4), { instanceOf: RangeError });
});

if (providersUnderTest().includes('shm')) {
  for (const end of ['resumes', 'is killed'] as const) {
    test(`shm: the barrier waits for a writer that holds bucket locks, until it ${end === 'resumes' ? 'resumes and releases them' : 'is killed and its locks are released'}`, async (t) => {
      const server = await startServer('shm', { keepaliveMs: 60_000 }); // never fenced for silence during the test
      t.teardown(() => server.close());
      const key = '{barrier}.a';
      const hashSlot = keySlot(Buffer.from(key));
      const sb = readSuperblock(server.region);
      const epochs = new EpochTable(server.region, sb.epochOffset);
      // Another key of the same hash slot in other buckets: its write waits for the word, not for the stopped writer's locks.
      const buckets = (k: string) => { const { b1, b2 } = hashKey(Buffer.from(k), sb.seed, sb.bucketCount); return [b1, b2]; };
      const other = Array.from({ length: 64 }, (_, i) => `{barrier}.b${i}`).find((k) => !buckets(k).some((b) => buckets(key).includes(b)))!;
      t.is(keySlot(Buffer.from(other)), hashSlot);
      const child = forkKvChild(t, ['put', server.urls[0]!, key, 'written under epoch 0'], { env: { RKV_SHM_TEST_STOP_BEFORE: 'WRITE:8' } });
      let report: Record<string, unknown> | undefined;
      child.on('message', (m: Record<string, unknown>) => (report = m));
      const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
      await eventually(() => processStopped(child.pid!), 'the writer stopped itself before its commit, holding its bucket locks');

      const barrier = server.epochBarrier([hashSlot], 1);
      t.false(await settledYet(barrier), 'the barrier waits while the writer holds its locks');
      t.deepEqual(epochs.read(hashSlot), { epoch: 1, state: 'closed' }, 'the word is closed: a writer reading it now starts over');
      const late = await connect(server);
      t.teardown(() => late.close());
      const lateWrite = late.put(other, 'after the barrier opened');
      t.false(await settledYet(lateWrite), "a write of the hash slot that READs the closed word waits (v7's epoch check)");

      if (end === 'resumes') child.kill('SIGCONT');
      else child.kill('SIGKILL');
      const done = await barrier;
      await exited;
      t.is(done.waitedFor, 2, "it waited for the writer's two bucket locks");
      t.deepEqual(epochs.read(hashSlot), { epoch: 1, state: 'open' });
      if (end === 'resumes') t.is(report?.acked, true, 'the writer, let go, finished its write before the barrier opened');
      await lateWrite;
      t.is((await late.get(other))?.toString(), 'after the barrier opened');
      const kv = await connect(server);
      t.teardown(() => kv.close());
      await kv.put(key, 'after the barrier');
      t.is((await kv.get(key))?.toString(), 'after the barrier');
    });
  }
}
