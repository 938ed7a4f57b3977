// The native client core's boundary, tested against the core itself on a bare
// connected pair (an empty index in the server's region): close() with
// operations in flight; a core collected while JS still holds a view of its
// scratch memory; the completions of control requests, which come back apart
// from op results. And through a Session: a view of scratch outlives the
// session and keeps the core's memory, which goes with the view.
import { fork } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import test from 'ava';

import { ControlWords, CopyLayout, KvLayout, Limit, KvOp, KvStatus, OpLayout, Opcode, ResultLayout, SendFlag, WcStatus } from '../../native/constants.generated.js';
import { type Completion, hashKey, nativeBuildItem, readCompletion } from '../../native/index.js';
import { ItemType } from '../../protocol/constants.js';
import { packSlot } from '../../protocol/index-format.js';
import { type Pair, connectPair } from '../helpers/pair.js';
import { providersUnderTest, slow } from '../helpers/providers.js';

type NativeCore = {
  submit(count: number): number;
  poll(): number;
  close(waitMs?: number): boolean;
  readonly inflight: number;
  readonly opWords: Uint32Array;
  readonly resultWords: Uint32Array;
  readonly controlWords: Uint32Array;
  readonly arena: Buffer;
  readonly scratch: Buffer;
  readonly copyWords: Uint32Array;
  copyValues(target: Uint8Array | ArrayBuffer, first: number, count: number): void;
  readonly handle: number;
};
const addon = createRequire(import.meta.url)('node-gyp-build')(fileURLToPath(new URL('../../..', import.meta.url))) as {
  ClientCore: new (provider: unknown, connection: unknown, cq: unknown, region: object, options: object) => NativeCore;
  corePoll(handle: unknown): number;
  coreSubmit(handle: unknown, count: number): number;
  coreCopyValues(handle: unknown, target: Uint8Array | ArrayBuffer, first: number, count: number): void;
};

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

// A region of the pair's 1 MiB server memory: 1024 empty buckets, a heap, our ring.
const INDEX = 4096, HEAP = INDEX + 1024 * 64;
function newCore(p: Pair, { graceMs = slow(1000), opTimeoutMs = slow(2000) } = {}): NativeCore {
  const heapBytes = 512 << 10;
  const region = {
    addr: p.region.addr, rkey: p.region.rkey, length: 1 << 20, bucketCount: 1024, indexOffset: INDEX, heapOffset: HEAP,
    heapBytes, seed: 7n, ringOffset: HEAP + heapBytes, clientId: 1, versionBase: 1n << 40n, maxValueBytes: 4096, graceMs,
  };
  return new addon.ClientCore(p.client.native, p.clientConn.native, p.clientCq.native, region, { scratchBytes: 1 << 20, opTimeoutMs, arenaBytes: 1 << 16 });
}

// Every bucket's lock word held by client 1: a GET of a missing key waits
// (backs off) until its deadline, so it stays in the core.
function lockAllBuckets(p: Pair): void {
  for (let b = 0; b < 1024; b++) p.region.bytes.writeBigUInt64LE(1n, 4096 + b * 64);
}

// GETs of keys "k<id>", ids from `first`: how many the core took, and the
// results of those that finished inside submit (it drives the round trips
// as far as completions are synchronous: on shm, to the end).
function submitGets(core: NativeCore, count: number, first = 1): { taken: number; done: Array<{ id: number; status: number }> } {
  for (let i = 0; i < count; i++) {
    const o = i * OpLayout.WORDS, key = Buffer.from(`k${first + i}`);
    key.copy(core.arena, i * 16);
    core.opWords.fill(0, o, o + OpLayout.WORDS);
    core.opWords[o + OpLayout.TYPE] = KvOp.GET;
    core.opWords[o + OpLayout.ID] = first + i;
    core.opWords[o + OpLayout.KEY_OFFSET] = i * 16;
    core.opWords[o + OpLayout.KEY_LEN] = key.length;
  }
  const r = core.submit(count);
  return { taken: r & 0xffff, done: results(core, r >>> 16) };
}

function results(core: NativeCore, n: number): Array<{ id: number; status: number }> {
  return Array.from({ length: n }, (_, i) => ({
    id: core.resultWords[i * ResultLayout.WORDS + ResultLayout.ID]!,
    status: core.resultWords[i * ResultLayout.WORDS + ResultLayout.STATUS]!,
  }));
}

function controls(core: NativeCore): Completion[] {
  return Array.from({ length: core.controlWords[ControlWords.COUNT]! }, (_, i) => readCompletion(core.controlWords, i, ControlWords.ENTRIES));
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: close() fails the ops in flight with DISCONNECTED once their requests are done; later ops fail at once`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const core = newCore(p);
    // The fixture works: a GET of a missing key completes as NOT_FOUND.
    const first = submitGets(core, 1, 100);
    t.is(first.taken, 1);
    const done = first.done;
    const deadline = performance.now() + slow(5000);
    while (done.length === 0 && performance.now() < deadline) {
      done.push(...results(core, core.poll()));
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.deepEqual(done, [{ id: 100, status: KvStatus.NOT_FOUND }]);

    lockAllBuckets(p);
    t.deepEqual(submitGets(core, 8), { taken: 8, done: [] });
    t.is(core.inflight, 8);
    t.true(core.close(), 'every request the core posted completed');
    t.is(core.inflight, 0);
    const failed = results(core, core.poll());
    t.deepEqual(failed.map((r) => r.id).sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8]);
    t.true(failed.every((r) => r.status === KvStatus.DISCONNECTED));

    // Refused inside submit, and answered from it.
    t.deepEqual(submitGets(core, 2, 20), { taken: 2, done: [{ id: 20, status: KvStatus.DISCONNECTED }, { id: 21, status: KvStatus.DISCONNECTED }] });
    t.is(core.inflight, 0);
    t.is(core.poll(), 0);
    t.true(core.close(), 'idempotent');
  });

  // An item READ later than half the grace period after its bucket READ starts the GET over (the
  // block may have been reused). A grace period too short for any READ made every restart late:
  // the GET looped in the core forever and its promise never settled. Restarts go through the
  // backoff now, which ends the op at its deadline.
  test(`${scheme}: a GET whose every item READ is late (grace period 0) ends at its deadline with TIMEOUT`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const core = newCore(p, { graceMs: 0, opTimeoutMs: 200 });
    const key = Buffer.from('k1');
    const item = nativeBuildItem(ItemType.BYTES, key, Buffer.from('value'), (1n << 40n) | 1n);
    item.copy(p.region.bytes, HEAP);
    const { b1, fingerprint } = hashKey(key, 7n, 1024);
    p.region.bytes.writeBigUInt64LE(packSlot(fingerprint, Math.ceil(item.length / KvLayout.UNIT_BYTES), 0), INDEX + b1 * 64 + 8);
    const { taken, done } = submitGets(core, 1, 1);
    t.is(taken, 1);
    const deadline = performance.now() + slow(5000);
    while (done.length === 0 && performance.now() < deadline) {
      done.push(...results(core, core.poll()));
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.deepEqual(done, [{ id: 1, status: KvStatus.TIMEOUT }]);
    core.close();
  });

  test(`${scheme}: a core collected with ops in flight and never closed leaves JS's scratch view readable`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    let collected = false;
    const registry = new FinalizationRegistry(() => {
      collected = true;
    });
    const scratch = (() => {
      const core = newCore(p);
      lockAllBuckets(p);
      t.deepEqual(submitGets(core, 8), { taken: 8, done: [] });
      registry.register(core, 'core');
      return core.scratch;
    })();
    for (let i = 0; i < 50 && !collected; i++) {
      gc();
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.true(collected, 'the wrapper was collected');
    scratch.fill(0xa5);
    t.is(scratch[scratch.length - 1], 0xa5);
  });

  test(`${scheme}: copyValues copies copyWords' ranges of scratch into a Buffer or an ArrayBuffer, and refuses the whole list if one range is outside either`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const core = newCore(p);
    t.teardown(() => void core.close());
    const n = core.scratch.length;
    core.scratch.write('abc', 100, 'latin1');
    core.scratch.write('XYZW', n - 4, 'latin1');
    const words = core.copyWords;
    t.is(words.length, Limit.MAX_POST_BATCH * CopyLayout.WORDS);
    const entry = (i: number, at: number, length: number, targetStart: number): void => {
      words[i * CopyLayout.WORDS + CopyLayout.AT] = at;
      words[i * CopyLayout.WORDS + CopyLayout.LENGTH] = length;
      words[i * CopyLayout.WORDS + CopyLayout.TARGET_START] = targetStart;
    };
    const target = Buffer.alloc(9, 0x2e);
    entry(5, n - 4, 4, 4); // out of order in the target, and up to both ends
    entry(6, 100, 3, 0);
    entry(7, 0, 0, 9);
    core.copyValues(target, 5, 3);
    t.is(target.toString('latin1'), 'abc.XYZW.');
    core.copyValues(target, 0, 0);
    // An ArrayBuffer: TARGET_START counts from its start (a pooled Buffer's byteOffset).
    const memory = new ArrayBuffer(16);
    entry(Limit.MAX_POST_BATCH - 1, 100, 3, 13);
    core.copyValues(memory, Limit.MAX_POST_BATCH - 1, 1);
    t.is(Buffer.from(memory, 13, 3).toString('latin1'), 'abc');
    target.fill(0x2e);
    for (const [at, length, start] of [[n - 3, 4, 0], [0, 4, 6], [n + 1, 0, 0], [0, 0, 10]]) {
      entry(0, 100, 3, 0); // a good entry first: nothing of the list is copied
      entry(1, at!, length!, start!);
      t.throws(() => core.copyValues(target, 0, 2), { code: 'ERR_OUT_OF_RANGE' }, `at ${at}, length ${length}, start ${start}`);
    }
    for (const [first, count] of [[0, Limit.MAX_POST_BATCH + 1], [Limit.MAX_POST_BATCH, 1], [Limit.MAX_POST_BATCH + 1, 0], [-1, 1], [0, -1]]) {
      t.throws(() => core.copyValues(target, first!, count!), { code: 'ERR_OUT_OF_RANGE' }, `first ${first}, count ${count}`);
    }
    t.throws(() => core.copyValues('no buffer' as unknown as Buffer, 0, 0), { code: 'ERR_INVALID_ARG_TYPE' });
    t.is(target.toString('latin1'), '.........', 'a refused list wrote nothing');
  });

  test(`${scheme}: the calls by handle reach their own core, and refuse a handle that names none (a closed-and-collected core's, made up, not a number)`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const first = newCore(p);
    t.teardown(() => void first.close());
    first.scratch.write('first', 0, 'latin1');
    const target = Buffer.alloc(5);
    first.copyWords[CopyLayout.AT] = 0;
    first.copyWords[CopyLayout.LENGTH] = 5;
    first.copyWords[CopyLayout.TARGET_START] = 0;
    addon.coreCopyValues(first.handle, target, 0, 1);
    t.is(target.toString('latin1'), 'first');
    const submitted = submitGets(first, 1, 1);
    t.is(submitted.taken, 1);
    const deadline = performance.now() + slow(2000);
    let finished = submitted.done.length;
    while (finished === 0 && performance.now() < deadline) {
      finished += addon.corePoll(first.handle);
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.is(finished, 1, 'the GET finished, in submit or in a poll by handle');
    // A second core gets another handle; once it is gone (closed, then collected), its handle names nothing,
    // even after a later core takes its slot.
    let second: NativeCore | undefined = newCore(p);
    const stale = second.handle;
    t.not(stale, first.handle);
    second.close();
    second = undefined;
    const refused = (): boolean => {
      try {
        addon.corePoll(stale);
        return false;
      } catch {
        return true;
      }
    };
    let gone = false;
    for (let i = 0; i < 50 && !(gone = refused()); i++) {
      gc();
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.true(gone, 'the collected core\'s handle was refused');
    const third = newCore(p);
    t.teardown(() => void third.close());
    for (const handle of [stale, first.handle + 2 ** 40, -1, 0.5, 'h', undefined]) {
      t.throws(() => addon.corePoll(handle), { code: 'ERR_INVALID_STATE' }, `handle ${String(handle)}`);
    }
    t.is(addon.corePoll(first.handle), 0, 'the live core still answers by its handle');
  });

  test(`${scheme}: the completions of control requests come back in controlWords, as posted, apart from op results`, async (t) => {
    const p = await connectPair(scheme, { serverRecvs: 1 });
    t.teardown(() => p.close());
    const core = newCore(p);
    t.teardown(() => core.close());
    const tag = 2 ** KvLayout.CONTROL_TAG_SHIFT;
    // A control RECV and a control SEND of the client, with the server's answer to the RECV, and one GET.
    p.clientConn.postRecv([{ wrId: tag + 3, local: p.scratch, localOffset: 0, length: 64 }]);
    p.region.bytes.write('hello', 0);
    p.serverConn.postSend([{ wrId: 1, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: p.region, length: 5 }]);
    p.clientConn.postSend([{ wrId: tag + 9, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: p.scratch, localOffset: 64, length: 4 }]);
    const submitted = submitGets(core, 1, 42);
    t.is(submitted.taken, 1);
    const done = submitted.done;
    const seen: ReturnType<typeof controls> = controls(core);
    const deadline = performance.now() + slow(5000);
    while ((done.length < 1 || seen.length < 2) && performance.now() < deadline) {
      done.push(...results(core, core.poll()));
      seen.push(...controls(core));
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.deepEqual(done, [{ id: 42, status: KvStatus.NOT_FOUND }]);
    seen.sort((a, b) => a.wrId - b.wrId);
    t.deepEqual(seen.map(({ wrId, status, opcode }) => ({ wrId, status, opcode })), [
      { wrId: tag + 3, status: WcStatus.SUCCESS, opcode: Opcode.RECV },
      { wrId: tag + 9, status: WcStatus.SUCCESS, opcode: Opcode.SEND },
    ]);
    t.is(seen[0]!.byteLen, 5);
    // A poll with nothing new says so.
    t.is(core.poll(), 0);
    t.deepEqual(controls(core), []);
  });
}

test('a view of a client core\'s scratch keeps the core and its memory alive; dropping the view frees them', async (t) => {
  const result = await new Promise<Record<string, number>>((resolve, reject) => {
    const child = fork(fileURLToPath(new URL('../helpers/scratch-child.js', import.meta.url)), [], {
      execArgv: ['--expose-gc'],
      env: { ...process.env, RKV_QUIET: '1' },
    });
    child.on('message', (m) => resolve(m as Record<string, number>));
    child.on('exit', (code, signal) => (code !== 0 || signal) && reject(new Error(`child exited with ${signal ?? code}`)));
  });
  t.log(JSON.stringify(result));
  const { withView, afterView, read } = result;
  t.is(read, 0); // read after the GC: the memory is still there
  // The scratch mapping outlived the session while the view was held, and went with the view.
  t.true(withView! > afterView!, 'dropping the view unmapped the scratch memory');
});
