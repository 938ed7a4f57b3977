// A write's epoch check in the native core (protocol v7; docs/replication-design.md
// §4.2), on a bare connected pair whose region the test lays out itself, epoch
// table included, so it can put any word there: every write READs its key's
// hash slot's epoch word, fenced, in the round of its lock CASes. A word at
// another epoch than the op's EPOCH ends the write with EPOCH_MOVED and nothing
// written; a CLOSED or FENCED word keeps it waiting (locks given back) until
// the word opens; a word in no known state is damage. The core finds the word
// by the same hash slot as protocol/hash-slots.ts keySlot ({tags} included).
// The same core holds GET and INCR answers to a replica's read lease.
import test from 'ava';

import { EpochWord, KvOp, KvStatus, ResultLayout } from '../../native/constants.generated.js';
import { ClientCore, type CoreRegion, hashKey } from '../../native/index.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { type CoreOp, writeOps } from '../helpers/core-ops.js';
import { type Pair, connectPair } from '../helpers/pair.js';
import { providersUnderTest, slow } from '../helpers/providers.js';
import { rng } from '../helpers/random.js';

const BUCKETS = 1024;
const INDEX = 4096;
const HEAP = INDEX + BUCKETS * 64;
const HEAP_BYTES = 512 << 10;
const EPOCHS = (1 << 20) - EpochWord.HASH_SLOTS * 8;
const SEED = 7n;

function regionOf(p: Pair, epochTable: boolean): CoreRegion {
  return {
    addr: p.region.addr, rkey: p.region.rkey, length: 1n << 20n, bucketCount: BUCKETS, indexOffset: BigInt(INDEX), heapOffset: BigInt(HEAP),
    heapBytes: BigInt(HEAP_BYTES), seed: SEED, ringOffset: BigInt(HEAP + HEAP_BYTES), clientId: 1, versionBase: 1n << 40n,
    maxValueBytes: 4096, graceMs: slow(1000), ...(epochTable ? { epochOffset: BigInt(EPOCHS) } : {}),
  };
}

const word = (epoch: number, state: number): bigint => (BigInt(epoch) << 32n) | BigInt(state);
const setWord = (p: Pair, slot: number, value: bigint): void => void p.region.bytes.writeBigUInt64LE(value, EPOCHS + 8 * slot);
const setAll = (p: Pair, value: bigint): void => {
  for (let slot = 0; slot < EpochWord.HASH_SLOTS; slot++) setWord(p, slot, value);
};

interface Done {
  id: number;
  status: number;
  detail?: number;
  blockUnused?: boolean;
  value?: string;
}

function results(core: ClientCore, n: number): Done[] {
  return Array.from({ length: n }, (_, i) => {
    const w = (f: number) => core.resultWords[i * ResultLayout.WORDS + f]!;
    const done: Done = { id: w(ResultLayout.ID), status: w(ResultLayout.STATUS) };
    if (done.status === KvStatus.EPOCH_MOVED) done.detail = w(ResultLayout.DETAIL);
    if (w(ResultLayout.BLOCK_UNUSED)) done.blockUnused = true;
    if (done.status === KvStatus.OK && w(ResultLayout.VALUE_LEN) > 0) {
      done.value = core.scratch.toString('utf8', w(ResultLayout.VALUE_OFFSET), w(ResultLayout.VALUE_OFFSET) + w(ResultLayout.VALUE_LEN));
    }
    return done;
  });
}

function submit(core: ClientCore, ops: CoreOp[]): Done[] {
  writeOps(core, ops);
  if (core.submit(ops.length) !== ops.length) throw new Error('the core did not take every op');
  return results(core, core.submittedResults);
}

/** Polls until `count` results are in, or `turns` event-loop turns have passed (then fewer). */
async function collect(core: ClientCore, done: Done[], count: number, turns = Infinity): Promise<Done[]> {
  const deadline = performance.now() + slow(5000);
  for (let turn = 0; done.length < count && turn < turns && performance.now() < deadline; turn++) {
    done.push(...results(core, core.poll()));
    await new Promise((resolve) => setImmediate(resolve));
  }
  return done.sort((a, b) => a.id - b.id);
}

/** The key's value as a GET finds it (undefined: NOT_FOUND). */
async function valueOf(core: ClientCore, key: string): Promise<string | undefined> {
  const [done] = await collect(core, submit(core, [{ type: KvOp.GET, id: 99, key }]), 1);
  if (done?.status === KvStatus.NOT_FOUND) return undefined;
  if (done?.status !== KvStatus.OK) throw new Error(`GET ${key}: ${JSON.stringify(done)}`);
  return done.value;
}

/** Polls until the core's one op waits out a backoff. */
async function untilBackingOff(core: ClientCore): Promise<void> {
  const deadline = performance.now() + slow(5000);
  while (core.backoffs !== 1) {
    if (performance.now() > deadline) throw new Error('the op never backed off');
    if (core.poll() !== 0) throw new Error('an op finished while the word was closed');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** Both bucket lock words of `key`: free (owner 0) once a write gave them back. */
function lockOwners(p: Pair, key: string): number[] {
  const { b1, b2 } = hashKey(Buffer.from(key), SEED, BUCKETS);
  return [b1, b2].map((b) => Number(p.region.bytes.readBigUInt64LE(INDEX + b * 64) & 0xffffffffn));
}

async function setup(t: { teardown(fn: () => void): void }, scheme: (typeof SCHEMES)[number], { epochTable = true, opTimeoutMs = slow(3000) } = {}) {
  const p = await connectPair(scheme, { serverRecvs: 64, recvBytes: 64 });
  setAll(p, word(0, EpochWord.OPEN));
  const core = new ClientCore(p.client, p.clientConn, p.clientCq, regionOf(p, epochTable), { scratchBytes: 1 << 20, opTimeoutMs, arenaBytes: 1 << 16 });
  t.teardown(() => {
    core.close();
    p.close();
  });
  return { p, core };
}

const SCHEMES = providersUnderTest();
for (const scheme of SCHEMES) {
  test(`${scheme}: a write at another epoch than its hash slot's word ends EPOCH_MOVED with the word's epoch: nothing written, locks and block given back`, async (t) => {
    const { p, core } = await setup(t, scheme);
    const slot = keySlot(Buffer.from('k'));
    setWord(p, slot, word(5, EpochWord.OPEN));
    // Epoch 0 in the op: no configuration, any open word will do.
    t.deepEqual(await collect(core, submit(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v1', block: 100 }]), 1), [{ id: 1, status: KvStatus.OK }]);
    // The writer's configuration says 4; the word says 5.
    const moved = await collect(core, submit(core, [
      { type: KvOp.PUT, id: 2, key: 'k', value: 'v2', block: 104, epoch: 4 },
      { type: KvOp.DELETE, id: 3, key: 'k', epoch: 4 },
      { type: KvOp.CAS, id: 4, key: 'k', value: 'v3', block: 108, epoch: 6 },
      { type: KvOp.INCR, id: 5, key: 'counter', block: 112, epoch: 4 },
    ]), 4);
    t.deepEqual(moved, [
      { id: 2, status: KvStatus.EPOCH_MOVED, detail: 5, blockUnused: true },
      { id: 3, status: KvStatus.EPOCH_MOVED, detail: 5 },
      { id: 4, status: KvStatus.EPOCH_MOVED, detail: 5, blockUnused: true },
      // Creating the counter goes through the same locked write, and the same check (its own hash slot's word).
      { id: 5, status: KvStatus.EPOCH_MOVED, detail: 0, blockUnused: true },
    ]);
    t.deepEqual(lockOwners(p, 'k'), [0, 0], 'the bucket locks were given back');
    t.deepEqual(lockOwners(p, 'counter'), [0, 0]);
    // Nothing was written: the key still holds v1, and the counter does not exist.
    t.is(await valueOf(core, 'k'), 'v1');
    t.is(await valueOf(core, 'counter'), undefined);
    // At the word's epoch the write goes through.
    t.deepEqual(await collect(core, submit(core, [{ type: KvOp.PUT, id: 8, key: 'k', value: 'v4', block: 116, epoch: 5 }]), 1), [{ id: 8, status: KvStatus.OK }]);
  });

  for (const [name, state] of [['CLOSED', EpochWord.CLOSED], ['FENCED', EpochWord.FENCED]] as const) {
    test(`${scheme}: a write whose hash slot's word is ${name} waits without holding its locks, and goes through once the word opens; other hash slots do not wait`, async (t) => {
      const { p, core } = await setup(t, scheme);
      setWord(p, keySlot(Buffer.from('held')), word(1, state));
      const done = submit(core, [
        { type: KvOp.PUT, id: 1, key: 'held', value: 'v', block: 100 },
        { type: KvOp.PUT, id: 2, key: 'free', value: 'v', block: 104 },
      ]);
      // 'free' finishes; 'held' keeps backing off however many more turns we give it.
      t.deepEqual(await collect(core, done, 1), [{ id: 2, status: KvStatus.OK }]);
      t.deepEqual(await collect(core, done, 2, 200), [{ id: 2, status: KvStatus.OK }]);
      t.is(core.inflight, 1);
      // An op backs off only once its releases completed: read the lock words then, with no poll between.
      await untilBackingOff(core);
      t.deepEqual(lockOwners(p, 'held'), [0, 0], 'it waits with its locks given back (a barrier does not wait for it)');
      setWord(p, keySlot(Buffer.from('held')), word(1, EpochWord.OPEN));
      t.deepEqual(await collect(core, done, 2), [{ id: 1, status: KvStatus.OK }, { id: 2, status: KvStatus.OK }]);
    });
  }

  test(`${scheme}: a write whose word stays closed ends at its deadline with TIMEOUT, its block unused`, async (t) => {
    const { p, core } = await setup(t, scheme, { opTimeoutMs: slow(300) });
    setWord(p, keySlot(Buffer.from('k')), word(0, EpochWord.CLOSED));
    t.deepEqual(await collect(core, submit(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v', block: 100 }]), 1), [{ id: 1, status: KvStatus.TIMEOUT, blockUnused: true }]);
    t.deepEqual(lockOwners(p, 'k'), [0, 0]);
    // A damaged word is damage whatever epoch it seems to hold (not a retryable EPOCH_MOVED).
    setWord(p, keySlot(Buffer.from('k')), word(4, 9));
    t.deepEqual(await collect(core, submit(core, [{ type: KvOp.PUT, id: 2, key: 'k', value: 'v', block: 104, epoch: 3 }]), 1), [{ id: 2, status: KvStatus.CORRUPT, blockUnused: true }]);
  });

  test(`${scheme}: an epoch word in no known state is damage: the write fails with CORRUPT and gives its locks back`, async (t) => {
    const { p, core } = await setup(t, scheme);
    setWord(p, keySlot(Buffer.from('k')), word(0, 7));
    t.deepEqual(await collect(core, submit(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v', block: 100 }]), 1), [{ id: 1, status: KvStatus.CORRUPT, blockUnused: true }]);
    t.deepEqual(lockOwners(p, 'k'), [0, 0]);
  });

  test(`${scheme}: the core reads the word of the key's hash slot as keySlot computes it, {hash tags} included`, async (t) => {
    const { p, core } = await setup(t, scheme);
    // Every word open at its own hash slot + 1: a write expecting keySlot(key) + 1 goes through only on
    // that word, and a wrong word's EPOCH_MOVED names the hash slot the core read (its epoch - 1).
    // The writes are DELETEs of absent keys: the check runs under the locks, and NOT_FOUND commits
    // nothing (no notice: this bare server posts few receives and drains no ring).
    for (let slot = 0; slot < EpochWord.HASH_SLOTS; slot++) setWord(p, slot, word(slot + 1, EpochWord.OPEN));
    const random = rng(17);
    const alphabet = ['a', 'b', '{', '}', 'é', '\u0000'];
    const keys = ['plain', '{user1000}.following', '{user1000}.followers', 'foo{}{bar}', 'foo{{bar}}zap', 'foo{bar}{zap}', 'a{', '}{x}', '{}', '{}}', 'é{ü}'];
    while (keys.length < 200) keys.push(Array.from({ length: 1 + Math.floor(random() * 9) }, () => alphabet[Math.floor(random() * alphabet.length)]).join(''));
    for (let first = 0; first < keys.length; first += 50) {
      const batch = keys.slice(first, first + 50);
      const done = submit(core, batch.map((key, i) => ({ type: KvOp.DELETE, id: i + 1, key, epoch: keySlot(Buffer.from(key)) + 1 })));
      const read = (await collect(core, done, batch.length)).map((d) => (d.status === KvStatus.EPOCH_MOVED ? `read hash slot ${d.detail! - 1}` : d.status));
      t.deepEqual(read, batch.map(() => KvStatus.NOT_FOUND), `keys ${JSON.stringify(batch)}`);
    }
  });

  test(`${scheme}: a region without an epoch table (format 4, or a read client) takes no epoch READ`, async (t) => {
    const { p, core } = await setup(t, scheme, { epochTable: false });
    setAll(p, word(9, EpochWord.CLOSED)); // what lies there is not an epoch table: never read
    t.deepEqual(await collect(core, submit(core, [{ type: KvOp.PUT, id: 1, key: 'k', value: 'v', block: 100, epoch: 3 }]), 1), [{ id: 1, status: KvStatus.OK }]);
  });

  test(`${scheme}: an epoch table past the region's end is refused when the connection is added`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    for (const epochOffset of [BigInt((1 << 20) - 8), BigInt(2 << 20), 2n ** 64n - 8n]) {
      const region = { ...regionOf(p, true), epochOffset };
      t.throws(() => new ClientCore(p.client, p.clientConn, p.clientCq, region, { scratchBytes: 1 << 20, opTimeoutMs: 1000, arenaBytes: 1 << 16 }), { message: /epoch table lies outside/ }, String(epochOffset));
    }
  });

  // The read lease of a replica (protocol v8; docs/replication-design.md §4.4): the core hands over no
  // answer read from a connection whose lease has ended, whatever the answer was.
  test(`${scheme}: once a connection's read lease has ended, every GET answer (a value, a miss, a counter's type) and an INCR's answer end READ_LEASE_LAPSED; renewed, they answer again`, async (t) => {
    const { core } = await setup(t, scheme);
    t.deepEqual(await collect(core, submit(core, [
      { type: KvOp.PUT, id: 1, key: 'k', value: 'v1', block: 100 },
      { type: KvOp.INCR, id: 2, key: 'counter', block: 104 },
    ]), 2), [{ id: 1, status: KvStatus.OK }, { id: 2, status: KvStatus.OK }]);
    core.permitReads(0, -1);
    const lapsed = await collect(core, submit(core, [
      { type: KvOp.GET, id: 3, key: 'k' },
      { type: KvOp.GET, id: 4, key: 'missing' },
      { type: KvOp.GET, id: 5, key: 'counter' },
      { type: KvOp.INCR, id: 6, key: 'counter' },
    ]), 4);
    t.deepEqual(lapsed.map((d) => d.status), [KvStatus.READ_LEASE_LAPSED, KvStatus.READ_LEASE_LAPSED, KvStatus.READ_LEASE_LAPSED, KvStatus.READ_LEASE_LAPSED]);
    core.permitReads(0, slow(60_000));
    t.is(await valueOf(core, 'k'), 'v1');
    t.is(await valueOf(core, 'missing'), undefined);
  });

  // Before: the answer's lapse was applied before the block's fate was judged, so an INCR that created its
  // counter (its block linked) reported the block unused, and the client gave it back to its pool: the next
  // write of that client went into the live counter's block (a counter copied by repair onto a member whose
  // lease had lapsed vanished there in the Soft-RoCE guest).
  test(`${scheme}: an INCR that creates its counter keeps its block even when its answer comes after the read lease`, async (t) => {
    const { core } = await setup(t, scheme);
    core.permitReads(0, -1);
    const [created] = await collect(core, submit(core, [{ type: KvOp.INCR, id: 1, key: 'fresh', block: 100 }]), 1);
    t.deepEqual(created, { id: 1, status: KvStatus.READ_LEASE_LAPSED }, 'lapsed, and its block not given back (no blockUnused)');
    core.permitReads(0, slow(60_000));
    const [counted] = await collect(core, submit(core, [{ type: KvOp.INCR, id: 2, key: 'fresh' }]), 1);
    t.like(counted, { id: 2, status: KvStatus.OK }, 'the counter was created');
  });
}
