// KV conformance: a property-based fuzz of the public client API. Every
// method of KvClient is called with arguments of every type (fast-check's
// anything(), strings, bytes, numbers with NaN and Infinity, bigints, null,
// undefined, objects, a 1 MiB string), mixed with valid calls that reach the
// server. A call either succeeds, or rejects with a KvError: no synchronous
// throw, no other error type, no uncaught exception or unhandled rejection;
// and afterwards the server and the clients still work.
import test from 'ava';
import fc from 'fast-check';
import { Registry } from 'prom-client';

import { KvClient, KvError } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, testScale, testTimeoutMs } from '../helpers/providers.js';

const huge = 'x'.repeat(1 << 20);

/** Anything at all, valid arguments excepted (they come from their own arbitraries). */
const junk: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.anything({ maxDepth: 2, maxKeys: 4, withBigInt: true, withBoxedValues: true, withDate: true, withMap: true, withSet: true, withNullPrototype: true, withObjectString: true, withTypedArray: true, withSparseArray: true, withUnicodeString: true }) },
  fc.string({ unit: 'binary', maxLength: 1200 }),
  fc.uint8Array({ maxLength: 1200 }).map((a) => Buffer.from(a)),
  fc.double(),
  fc.integer(),
  fc.bigInt(),
  fc.constantFrom<unknown>(null, undefined, NaN, Infinity, -Infinity, -0, -1, 0, 1, 2 ** 53, 2 ** 64, -1n, 2n ** 64n, huge, true, false, [], {}, new Map(), Symbol('s'), () => 1, Promise.resolve(1), new Error('e')),
);

const key = fc.oneof({ weight: 3, arbitrary: fc.constantFrom('k0', 'k1', 'k2', 'c0', Buffer.from([0, 255])) }, { weight: 2, arbitrary: junk });
const value = fc.oneof({ weight: 3, arbitrary: fc.oneof(fc.string({ maxLength: 300 }), fc.uint8Array({ maxLength: 2000 })) }, { weight: 2, arbitrary: junk });
const version = fc.oneof(fc.constant(0n), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.nat(), junk);
const delta = fc.oneof(fc.bigInt({ min: -(2n ** 64n) + 1n, max: 2n ** 64n - 1n }), fc.integer(), fc.constant(undefined), junk);
const timeout = fc.oneof(fc.double({ min: 0.001, max: 20, noNaN: true }), fc.constantFrom(Infinity, 1e300), junk);
// Locks get names of their own. A lock on a counter waits out its whole timeout
// (the native core takes a counter's word for a held lock), so no lock name may
// ever be one: junk that could be a key (a string, bytes) is kept away from lock().
const notAKey = junk.filter((x) => typeof x !== 'string' && !(x instanceof Uint8Array));
const lockName = fc.oneof({ weight: 3, arbitrary: fc.constantFrom('m0', 'm1') }, notAKey);
const lockOptions = fc.oneof(fc.constant(undefined), fc.record({ timeoutMs: timeout }, { requiredKeys: [] }), junk);
const keyList = fc.oneof(fc.array(key, { maxLength: 8 }), junk);
const entryList = fc.oneof(fc.array(fc.oneof({ weight: 3, arbitrary: fc.tuple(key, value) }, fc.array(junk, { maxLength: 3 }), junk), { maxLength: 8 }), junk);

const METHODS = ['get', 'getWithVersion', 'put', 'delete', 'cas', 'incr', 'getMany', 'putMany', 'lock', 'memberFor', 'layout'] as const;
type Call = [method: (typeof METHODS)[number], args: unknown[]];

const call: fc.Arbitrary<Call> = fc.oneof(
  fc.tuple(fc.constant('get' as const), fc.tuple(key)),
  fc.tuple(fc.constant('getWithVersion' as const), fc.tuple(key)),
  fc.tuple(fc.constant('put' as const), fc.tuple(key, value)),
  fc.tuple(fc.constant('delete' as const), fc.tuple(key)),
  fc.tuple(fc.constant('cas' as const), fc.tuple(key, version, value)),
  fc.tuple(fc.constant('incr' as const), fc.tuple(key, delta)),
  fc.tuple(fc.constant('getMany' as const), fc.tuple(keyList)),
  fc.tuple(fc.constant('putMany' as const), fc.tuple(entryList)),
  fc.tuple(fc.constant('lock' as const), fc.tuple(lockName, lockOptions)),
  fc.tuple(fc.constant('lock' as const), fc.array(notAKey, { maxLength: 3 })),
  fc.tuple(fc.constant('memberFor' as const), fc.tuple(key)),
  // Any method, any number of arguments of any type.
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom(...METHODS.filter((m) => m !== 'lock')), fc.array(junk, { maxLength: 4 })) },
);

/** Why a thrown or rejected value breaks the contract, or undefined if it is a KvError. */
function notKvError(where: string, error: unknown): string | undefined {
  if (error instanceof KvError) return undefined;
  return `${where}: ${error instanceof Error ? `${error.name}: ${error.message}` : `non-error ${typeof error}`}`;
}

/** Calls that resolved: the fuzz is not all rejections. */
let fulfilled = 0;

/** Runs one call; resolves a contract violation, or undefined. */
function run(kv: KvClient, [method, args]: Call): Promise<string | undefined> {
  const where = `${method}(${args.map((a) => (typeof a === 'symbol' ? 'Symbol' : typeof a)).join(', ')})`;
  let result: unknown;
  try {
    result = (kv[method] as (...a: unknown[]) => unknown).apply(kv, args);
  } catch (error) {
    // Only the synchronous methods (memberFor) may throw, and only a KvError.
    if (method !== 'memberFor' && method !== 'layout') return Promise.resolve(`${where} threw synchronously${notKvError('', error) ?? ' (a KvError)'}`);
    return Promise.resolve(notKvError(where, error));
  }
  if (!(result instanceof Promise)) return Promise.resolve(undefined);
  return result.then(
    async (r) => {
      fulfilled++;
      if (method !== 'lock') return undefined;
      // A lock taken is given back at once (twice: the second must agree), so no call waits on it for long.
      const { release } = r as { release: () => Promise<void> };
      const outcomes = await Promise.allSettled([release(), release()]);
      if (outcomes[0].status !== outcomes[1].status) return `${where}: two releases disagreed`;
      return outcomes[0].status === 'rejected' ? notKvError(`${where} release`, outcomes[0].reason) : undefined;
    },
    (error) => notKvError(where, error),
  );
}

for (const scheme of providersUnderTest()) {
  const total = Math.round(100_000 * testScale());
  const perRun = 100;
  test(`${scheme}: ${total.toLocaleString('en-US')} client API calls with random arguments of every type: only KvErrors, the server keeps serving`, async (t) => {
    const stray: unknown[] = [];
    const onStray = (error: unknown) => stray.push(error);
    process.on('unhandledRejection', onStray);
    process.on('uncaughtException', onStray);
    t.teardown(() => {
      process.off('unhandledRejection', onStray);
      process.off('uncaughtException', onStray);
    });
    const server = await startServer(scheme, { memoryBytes: 128 << 20 });
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());

    let calls = 0;
    const started = performance.now();
    const details = await fc.check(
      fc.asyncProperty(fc.array(call, { minLength: perRun, maxLength: perRun }), async (batch) => {
        // One batch at a time, its calls concurrent: one tick, one doorbell.
        const violations = await Promise.all(batch.map((c) => run(kv, c)));
        calls += batch.length;
        const bad = violations.filter((v): v is string => v !== undefined);
        if (bad.length > 0) throw new Error(bad.join('\n'));
        if (stray.length > 0) throw new Error(`uncaught: ${stray.map((e) => (e instanceof Error ? e.message : typeof e)).join('; ')}`);
      }),
      { numRuns: Math.ceil(total / perRun), endOnFailure: true },
    );
    // The violation itself, and the seed to replay it (fc.assert would print the whole batch instead).
    if (details.failed) t.fail(`seed ${details.seed}: ${(details.errorInstance as Error | undefined)?.message ?? 'failed'}`);
    const seconds = (performance.now() - started) / 1000;
    t.log(`${calls.toLocaleString('en-US')} calls in ${seconds.toFixed(1)} s, ${fulfilled.toLocaleString('en-US')} resolved`);
    t.true(calls >= total);
    t.true(fulfilled > total / 20, 'valid calls reached the server');
    t.deepEqual(stray, []);

    // The fuzzed client and a fresh one both still work, against the same server.
    t.is(kv.status, 'ready');
    await kv.put('after', 'the fuzz');
    t.is((await kv.get('after'))?.toString(), 'the fuzz');
    const good = await KvClient.connect({ url: server.urls[0]!, timeoutMs: testTimeoutMs() });
    t.teardown(() => good.close());
    t.is((await good.get('after'))?.toString(), 'the fuzz');
    t.true(await good.cas('fresh', 0n, 'v'));
    t.is(await good.incr('fresh-counter', 3), 3n);
  });
}

for (const scheme of providersUnderTest()) {
  const runs = Math.max(100, Math.round(1000 * testScale()));
  test(`${scheme}: ${runs.toLocaleString('en-US')} KvClient.connect calls with random options: a client or a KvError`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const url = server.urls[0]!;
    const registry = new Registry();
    const maybe = <T>(valid: fc.Arbitrary<T>) => fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 2, arbitrary: valid }, notAKey, junk);
    // Never a string for history: it is a path, and would be written to.
    const options = fc.oneof(
      { weight: 8, arbitrary: fc.record({
        url: fc.oneof({ weight: 4, arbitrary: fc.constant(url) }, fc.constant('shm:///nonexistent/rkv.sock'), junk.filter((x) => !(typeof x === 'string' && x.startsWith('rdma://')))),
        servers: fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, fc.array(fc.oneof(fc.constant(url), notAKey), { maxLength: 3 }), notAKey),
        etcd: fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, notAKey),
        token: maybe(fc.string({ maxLength: 20 })),
        pollMode: maybe(fc.constantFrom('busy', 'event')),
        timeoutMs: maybe(fc.oneof(fc.constantFrom(1000, 2 ** 31, Infinity, 0.5), fc.double())),
        reconnect: maybe(fc.boolean()),
        requireReady: maybe(fc.boolean()),
        // Valid sizes stay within what a test machine holds: a client granted 2 GiB of scratch (pinned by
        // registration, plus an arena of half that) is OOM-killed in the 4 GiB Soft-RoCE guest, which is the
        // machine's answer, not the checks'. Sizes past the limit (2^40) and negative ones are still fuzzed.
        scratchBytes: maybe(fc.oneof(fc.constantFrom(1, 4096, 1 << 20, 2 ** 40), fc.integer({ min: -(2 ** 31), max: 64 << 20 }))),
        history: fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, fc.constant(() => {}), notAKey),
        metrics: maybe(fc.constant(registry)),
      }, { requiredKeys: [] }) },
      junk,
    );
    let connected = 0;
    const details = await fc.check(
      fc.asyncProperty(options, async (o) => {
        let pending: Promise<KvClient> | undefined;
        try {
          pending = KvClient.connect(o as never);
        } catch (error) {
          throw new Error(`connect threw synchronously: ${String(error)}`);
        }
        let client: KvClient;
        try {
          client = await pending;
        } catch (error) {
          const why = notKvError('connect', error);
          if (why) throw new Error(why);
          return;
        }
        connected++;
        try {
          await client.get('k').catch((error: unknown) => {
            const why = notKvError('get', error);
            if (why) throw new Error(why);
          });
        } finally {
          await client.close();
        }
      }),
      { numRuns: runs, endOnFailure: true },
    );
    if (details.failed) t.fail(`seed ${details.seed}: ${(details.errorInstance as Error | undefined)?.message ?? 'failed'}`);
    t.log(`${runs} connects, ${connected} connected`);
    t.true(connected > 0);
    // The server still serves.
    const good = await KvClient.connect({ url, timeoutMs: testTimeoutMs() });
    t.teardown(() => good.close());
    await good.put('still', 'serving');
    t.is((await good.get('still'))?.toString(), 'serving');
  });
}
