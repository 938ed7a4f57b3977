// Fencing is exact on shm: a client paused between the provider's fence check
// and the execution of its request (a debugger, SIGSTOP, a page fault) is
// fenced by the server, and nothing it does when it resumes can replace a
// value acknowledged to another client. The pause is deterministic: the
// provider's test hook (RKV_SHM_TEST_STOP_BEFORE) stops the child process with
// SIGSTOP right before it executes the first 8-byte WRITE of its PUT's commit
// (the SUPERSEDED mark on the item it replaces; the slot WRITE follows in the
// same post), while it holds the key's bucket locks. On verbs the fence is the NIC's: the queue pair
// in error executes nothing more.

import test from 'ava';

import { KvError } from '../../client/index.js';
import { connectData } from '../../protocol/connect.js';
import { Access, Provider } from '../../native/index.js';
import { connect, forkKvChild, processStopped, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest, slow } from '../helpers/providers.js';


if (providersUnderTest().includes('shm')) {
  test('shm: a fenced client paused inside its slot WRITE cannot replace a value acknowledged after the fence', async (t) => {
    const server = await startServer('shm', { keepaliveMs: 100 });
    t.teardown(() => server.close());
    const other = await connect(server, { timeoutMs: 1000 });
    t.teardown(() => other.close());
    const key = 'fenced-key';
    await other.put(key, 'before');

    const child = forkKvChild(t, ['put', server.urls[0]!, key, 'stale'], { env: { RKV_SHM_TEST_STOP_BEFORE: 'WRITE:8' } });
    let report: Record<string, unknown> | undefined;
    child.on('message', (m: Record<string, unknown>) => (report = m));
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
    await eventually(() => processStopped(child.pid!), 'the writer stopped itself before its slot WRITE');
    // Silent for three keepalive intervals: the server fences it.
    await eventually(() => server.stats().fencedClients >= 1, 'the server fenced the paused writer');

    // A write after the fence. Acknowledged only if the fence let go of the paused writer's locks.
    const acked = await other.put(key, 'fresh').then(
      () => true,
      (error: unknown) => {
        t.true(error instanceof KvError, `a typed error: ${String(error)}`);
        return false;
      },
    );
    child.kill('SIGCONT');
    await exited;
    t.false(report?.acked === true, 'the fenced writer was not told its put succeeded');
    await server.settled();
    if (!acked) await other.put(key, 'fresh'); // now the paused writer's post has ended and its locks are back
    t.is((await other.get(key))?.toString(), 'fresh', 'the value acknowledged last is the one stored');
    t.is(server.stats().lockRecoveries, 2, "the writer's two bucket locks were released once, after its post ended");
  });
}

if (providersUnderTest().includes('shm')) {
  test('shm: a client killed between sealing a counter and unlinking it: the server finishes its delete', async (t) => {
    const server = await startServer('shm', { keepaliveMs: 100, graceMs: 20_000 });
    t.teardown(() => server.close());
    const kv = await connect(server, { timeoutMs: 2000 });
    t.teardown(() => kv.close());
    t.is(await kv.incr('sealed', 5), 5n);
    // The delete's last doorbell: seal (FETCH_AND_ADD), then the slot WRITE — it stops before the WRITE.
    const child = forkKvChild(t, ['del', server.urls[0]!, 'sealed'], { env: { RKV_SHM_TEST_STOP_BEFORE: 'WRITE:8' } });
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
    await eventually(() => processStopped(child.pid!), 'the deleter stopped itself between seal and unlink');
    child.kill('SIGKILL');
    await exited;
    await eventually(() => server.stats().fencedClients >= 1, 'the server fenced the dead deleter');
    await server.settled();
    t.is(await kv.incr('sealed'), 1n, 'the delete is finished: the counter starts again (not stuck on a sealed item)');
  });

  test('shm: a client killed after creating a lock held, before its notice: the lock is released like any departed holder\'s', async (t) => {
    const server = await startServer('shm', { keepaliveMs: 100 });
    t.teardown(() => server.close());
    const kv = await connect(server, { timeoutMs: 2000 });
    t.teardown(() => kv.close());
    // LOCK on an absent name writes a lock item held by its writer and publishes it; its first WRITE_WITH_IMM is that
    // commit's notice (RecordKind.PUT_LOCK), which would have put the item on the server's list of locks.
    const child = forkKvChild(t, ['hold', server.urls[0]!, 'mutex'], { env: { RKV_SHM_TEST_STOP_BEFORE: 'WRITE_WITH_IMM' } });
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
    await eventually(() => processStopped(child.pid!), 'the locker stopped itself before its notice');
    await t.throwsAsync(kv.lock('mutex', { timeoutMs: 100 }), { code: 'KV_LOCK_CONTENDED' }, 'the dead-to-be holder holds it');
    child.kill('SIGKILL');
    await exited;
    await eventually(() => server.stats().fencedClients >= 1, 'the server fenced the dead locker');
    await server.settled();
    // Released by the orphan scan (one per keepalive interval) once its departure knows the item for a lock.
    const lock = await kv.lock('mutex', { timeoutMs: slow(2000) });
    t.true(server.stats().orphanLocksReleased >= 1, 'released as an orphan\'s');
    await lock.release();
  });
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a connection is not fenced while connected; after disconnect() its fence completes`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const provider = new Provider(scheme);
    t.teardown(() => provider.close());
    const cq = provider.createCq(64);
    const buffers = provider.allocate(4096, Access.LOCAL_WRITE);
    const recvs = Array.from({ length: 4 }, (_, i) => ({ wrId: i, local: buffers, localOffset: i * 1024, length: 1024 }));
    const connection = await provider.connect(server.urls[0]!, { cq, initialRecvs: recvs, privateData: connectData(undefined) });
    t.false(await connection.fenced({ stopWaiting: () => true }), 'a live connection is not fenced');
    connection.disconnect();
    t.true(await connection.fenced(), 'nothing the peer posts can land once disconnect() returned and the fence completed');
  });
}
