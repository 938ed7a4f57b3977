// KV conformance: bad arguments to the client API are rejected promises with
// a typed KvError — never a synchronous throw, never an uncaught exception
// (a crash of the caller's process), never a silent reinterpretation.
import test, { type ExecutionContext } from 'ava';

import { KvClient, KvError, KvInvalidArgumentError, KvLockContendedError } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';

/** Calls `call` and expects a promise (no synchronous throw) that rejects with `type`. */
async function rejects(t: ExecutionContext, call: () => Promise<unknown>, type: new (...args: never[]) => KvError, what: string): Promise<KvError> {
  let pending: Promise<unknown> | undefined;
  t.notThrows(() => {
    pending = call();
  }, `${what}: threw synchronously`);
  const error = await t.throwsAsync(pending ?? Promise.resolve(), undefined, `${what}: did not reject`);
  t.true(error instanceof type, `${what}: rejected with ${error?.name} (${error?.message}), not ${type.name}`);
  return error as KvError;
}

const any = (x: unknown) => x as never;

for (const scheme of providersUnderTest()) {
  test(`${scheme}: cas versions: a safe non-negative integer number works as a bigint; strings, undefined and out-of-range reject`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    // A number version used to crash the process (BigInt mixed with number in the flush).
    t.true(await kv.cas('n', any(0), 'created'));
    const { version } = (await kv.getWithVersion('n'))!;
    t.true(version <= BigInt(Number.MAX_SAFE_INTEGER)); // client id << 40 | sequence
    t.true(await kv.cas('n', any(Number(version)), 'second'));
    t.false(await kv.cas('n', any(Number(version)), 'stale'));
    t.is((await kv.get('n'))?.toString(), 'second');
    // "Only if absent" must be said with 0n, not by leaving the version out.
    await rejects(t, () => kv.cas('u', any(undefined), 'v'), KvInvalidArgumentError, 'cas(undefined)');
    await rejects(t, () => kv.cas('u', any(null), 'v'), KvInvalidArgumentError, 'cas(null)');
    for (const bad of ['7', '0', 5.5, -1, NaN, Infinity, 2 ** 60, -1n, 2n ** 64n, {}, [1n], true]) {
      await rejects(t, () => kv.cas('u', any(bad), 'v'), KvInvalidArgumentError, `cas(${typeof bad} ${String(bad)})`);
    }
    t.is(await kv.get('u'), undefined); // none of them wrote
    t.true(await kv.cas('u', 0n, 'explicitly absent'));
    t.is((await kv.get('u'))?.toString(), 'explicitly absent');
  });

  test(`${scheme}: values, keys, deltas and lists of the wrong type reject, they do not throw`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    for (const bad of [123, null, undefined, {}, [1, 2], true, 5n, Symbol('s'), () => 1]) {
      const what = `${typeof bad} ${String(bad)}`;
      await rejects(t, () => kv.put('k', any(bad)), KvInvalidArgumentError, `put(k, ${what})`);
      await rejects(t, () => kv.cas('k', 0n, any(bad)), KvInvalidArgumentError, `cas(k, 0n, ${what})`);
      await rejects(t, () => kv.get(any(bad)), KvInvalidArgumentError, `get(${what})`);
      await rejects(t, () => kv.put(any(bad), 'v'), KvInvalidArgumentError, `put(${what}, v)`);
      await rejects(t, () => kv.delete(any(bad)), KvInvalidArgumentError, `delete(${what})`);
      await rejects(t, () => kv.getWithVersion(any(bad)), KvInvalidArgumentError, `getWithVersion(${what})`);
      await rejects(t, () => kv.incr(any(bad)), KvInvalidArgumentError, `incr(${what})`);
      await rejects(t, () => kv.lock(any(bad)), KvInvalidArgumentError, `lock(${what})`);
    }
    for (const bad of ['5', 1.5, NaN, Infinity, null, {}, 2n ** 64n, -(2n ** 64n)]) {
      await rejects(t, () => kv.incr('c', any(bad)), KvInvalidArgumentError, `incr(c, ${typeof bad} ${String(bad)})`);
    }
    t.is(await kv.incr('c', 0), 0n); // none of them counted
    for (const bad of [null, undefined, 'abc', 5, {}, new Map()]) {
      await rejects(t, () => kv.getMany(any(bad)), KvInvalidArgumentError, `getMany(${String(bad)})`);
      await rejects(t, () => kv.putMany(any(bad)), KvInvalidArgumentError, `putMany(${String(bad)})`);
    }
    await rejects(t, () => kv.getMany(any(['a', 5])), KvInvalidArgumentError, 'getMany([a, 5])');
    await rejects(t, () => kv.putMany(any([['a']])), KvInvalidArgumentError, 'putMany([[a]])');
    await rejects(t, () => kv.putMany(any(['ab'])), KvInvalidArgumentError, 'putMany([ab])');
    await rejects(t, () => kv.putMany(any([null])), KvInvalidArgumentError, 'putMany([null])');
    // A hole in a sparse array is a missing key, not one to skip.
    await rejects(t, () => kv.getMany(any(new Array(2))), KvInvalidArgumentError, 'getMany([, ,])');
    await rejects(t, () => kv.putMany(any(new Array(2))), KvInvalidArgumentError, 'putMany([, ,])');
    t.is(await kv.get('a'), undefined);
    t.throws(() => kv.memberFor(any(5)), { instanceOf: KvInvalidArgumentError });
    // The client is unharmed.
    await kv.putMany([['a', '1'], ['b', '2']]);
    t.deepEqual((await kv.getMany(['a', 'b', 'z'])).map((v) => v?.toString()), ['1', '2', undefined]);
  });

  test(`${scheme}: lock timeoutMs: Infinity waits without a timeout; bad timeouts and options reject`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const lock = await kv.lock('m', { timeoutMs: Infinity });
    t.true(lock.token > 0n);
    // A second taker with no timeout waits until the first lets go.
    let taken = false;
    const second = kv.lock('m', { timeoutMs: Infinity }).then((l) => {
      taken = true;
      return l;
    });
    await new Promise((r) => setTimeout(r, 50));
    t.false(taken);
    await lock.release();
    const next = await second;
    t.true(next.token > lock.token);
    await next.release();
    for (const [i, bad] of [0, -1, NaN, -Infinity, '100', null, 10n, Object.create(null)].entries()) {
      await rejects(t, () => kv.lock('m', { timeoutMs: any(bad) }), KvInvalidArgumentError, `lock timeoutMs #${i} (${typeof bad})`);
    }
    await rejects(t, () => kv.lock('m', any(null)), KvInvalidArgumentError, 'lock(m, null)');
    await rejects(t, () => kv.lock('m', any(5)), KvInvalidArgumentError, 'lock(m, 5)');
  });

  test(`${scheme}: a second release() of a lock that failed to release rejects too`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    // Lost: the lock item is gone (deleted), so this client no longer holds it.
    const lost = await kv.lock('gone');
    t.true(await kv.delete('gone'));
    await rejects(t, () => lost.release(), KvLockContendedError, 'first release');
    await rejects(t, () => lost.release(), KvLockContendedError, 'second release');
    // Not sent: the client was closed.
    const other = await kv.lock('closed');
    await kv.close();
    const first = await rejects(t, () => other.release(), KvError, 'release after close');
    const again = await rejects(t, () => other.release(), KvError, 'second release after close');
    t.is(again.code, first.code);
  });

  test(`${scheme}: a history callback that throws is reported as an 'error' event; operations go on`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server, {
      history: () => {
        throw new Error('the checker is full');
      },
    });
    t.teardown(() => kv.close());
    const errors: Error[] = [];
    kv.on('error', (error) => errors.push(error));
    let put: Promise<void> | undefined;
    t.notThrows(() => {
      put = kv.put('h', 'v');
    });
    await put;
    t.is((await kv.get('h'))?.toString(), 'v');
    t.true(errors.length >= 4 && errors.every((e) => e instanceof KvError && /the checker is full/.test(e.message)));
  });

  test(`${scheme}: a released lock's second release() resolves (release is idempotent)`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    const lock = await kv.lock('m');
    await lock.release();
    await t.notThrowsAsync(lock.release());
    const again = await kv.lock('m', { timeoutMs: slow(1000) });
    await again.release();
  });
}

test('rdma:// without a usable verbs provider (not built, or no device) rejects with a KvError, not a TransportError', async (t) => {
  // On a host with an RDMA device nothing listens on port 1: KV_DISCONNECTED, also a KvError.
  const error = await t.throwsAsync(KvClient.connect({ url: 'rdma://127.0.0.1:1', timeoutMs: testTimeoutMs(), reconnect: false }));
  t.true(error instanceof KvError, `${error?.name}: ${error?.message}`);
});

test('connect options of the wrong type reject with KV_INVALID_ARGUMENT', async (t) => {
  const url = 'shm:///nonexistent/rkv.sock';
  const bads: unknown[] = [
    null,
    5,
    'shm:///x',
    { url: 5 },
    { url, timeoutMs: -1 },
    { url, timeoutMs: NaN },
    { url, timeoutMs: '100' },
    { url, token: 5 },
    { url, scratchBytes: -1 },
    { url, scratchBytes: 1.5 },
    { url, scratchBytes: 2 ** 40 },
    { url, timeoutMs: Object.create(null) },
    { url, reconnect: 'yes' },
    { url, requireReady: 1 },
    { url, history: 5 },
    { url, metrics: 'registry' },
    { url, metrics: {} },
    { servers: [url, 5] },
    { etcd: 'http://127.0.0.1:2379' },
    { etcd: { hosts: 5 } },
    { etcd: { hosts: 'http://127.0.0.1:2379', prefix: 5 } },
  ];
  for (const options of bads) {
    let pending: Promise<unknown> | undefined;
    t.notThrows(() => {
      pending = KvClient.connect(options as never);
    });
    const error = await t.throwsAsync(pending!);
    t.true(error instanceof KvInvalidArgumentError, `${JSON.stringify(options)}: ${error?.name}: ${error?.message}`);
  }
});

test('misspelled or unknown connect options reject with KV_INVALID_ARGUMENT naming the option meant, nested ones too', async (t) => {
  // No server at this URL: had the options been accepted, connect would fail with KV_DISCONNECTED instead.
  const url = 'shm:///nonexistent/rkv.sock';
  const hosts = 'http://127.0.0.1:1';
  const cases: Array<[options: object, message: string]> = [
    [{ url, timeoutMS: 1000 }, "unknown option 'timeoutMS': did you mean 'timeoutMs'?"],
    [{ url, timeoutMS: undefined }, "unknown option 'timeoutMS': did you mean 'timeoutMs'?"],
    [{ URL: url }, "unknown option 'URL': did you mean 'url'?"],
    [{ url, pollmode: 'event' }, "unknown option 'pollmode': did you mean 'pollMode'?"],
    [{ url, reconect: false }, "unknown option 'reconect': did you mean 'reconnect'?"],
    [{ url, scratchBytess: 4096 }, "unknown option 'scratchBytess': did you mean 'scratchBytes'?"],
    [{ servers: [url], requireReddy: true }, "unknown option 'requireReddy': did you mean 'requireReady'?"],
    [{ url, tokne: 's3cret' }, "unknown option 'tokne': did you mean 'token'?"],
    [{ etcd: { hosts, prefx: '/x' } }, "unknown option 'etcd.prefx': did you mean 'etcd.prefix'?"],
    [{ etcd: { host: hosts } }, "unknown option 'etcd.host': did you mean 'etcd.hosts'?"],
    [{ url, colour: 'blue' }, "unknown option 'colour' (the options are url, servers, etcd, token, namespace, pollMode, timeoutMs, reconnect, requireReady, scratchBytes, locationCacheEntries, history, metrics)"],
    [{ etcd: { hosts, lease: 5 } }, "unknown option 'etcd.lease' (the options are etcd.hosts, etcd.prefix)"],
  ];
  for (const [options, message] of cases) {
    let pending: Promise<unknown> | undefined;
    t.notThrows(() => {
      pending = KvClient.connect(options as never);
    });
    const error = await t.throwsAsync(pending!);
    t.true(error instanceof KvInvalidArgumentError, `${JSON.stringify(options)}: ${error?.name}: ${error?.message}`);
    t.is(error?.message, message);
  }
});
