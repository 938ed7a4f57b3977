// Conformance: connection lifecycle — close with work outstanding, resources
// freed, dead peers noticed, worker threads, independent addon instances.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

import test from 'ava';

import { Opcode, Provider, SendFlag, TransportError } from '../../native/index.js';
import { connectPair } from '../helpers/pair.js';
import { listenUrl, providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';

const helpers = new URL('../helpers/', import.meta.url);
// Fails instead of hanging when something never happens.
async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expire = new Promise<T>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, expire]);
  } finally {
    clearTimeout(timer);
  }
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: disconnect() flushes every posted receive and send`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    p.clientConn.postRecv(Array.from({ length: 16 }, (_, i) => ({ wrId: 100 + i, local: p.scratch, localOffset: i * 64, length: 64 })));
    p.clientConn.disconnect();
    p.clientConn.postSend([{ wrId: 7, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, length: 8, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
    const wcs = await p.clientCq.take(17);
    t.deepEqual(wcs.map((c) => c.wrId).sort((a, b) => a - b), [7, ...Array.from({ length: 16 }, (_, i) => 100 + i)]);
    t.true(wcs.every((c) => c.statusName === 'WR_FLUSH_ERR'));
  });

  test(`${scheme}: a peer's disconnect wakes an event-mode waiter with flushed receives`, async (t) => {
    const p = await connectPair(scheme, { serverRecvs: 4 });
    t.teardown(() => p.close());
    const waiting = p.serverCq.take(4, { mode: 'event', timeoutMs: slow(10_000) });
    p.clientConn.disconnect();
    const wcs = await waiting;
    t.true(wcs.every((c) => c.statusName === 'WR_FLUSH_ERR'));
  });

  test(`${scheme}: connect() to a server that rejects rejects with its private data`, async (t) => {
    const server = new Provider(scheme);
    const client = new Provider(scheme);
    t.teardown(() => (client.close(), server.close()));
    const listener = server.listen(listenUrl(scheme));
    t.teardown(() => listener.close());
    server.on('connectRequest', (request) => {
      t.is(request.privateData.toString(), 'bad token');
      request.reject(Buffer.from('go away'));
    });
    const error = await t.throwsAsync(client.connect(listener.url, { cq: client.createCq(4), privateData: Buffer.from('bad token'), timeoutMs: testTimeoutMs() }));
    t.true(error instanceof TransportError);
    t.is((error as TransportError).code, 'REJECTED');
    t.is((error as TransportError).privateData?.toString(), 'go away');
  });

  test(`${scheme}: connect() to a server that never answers times out`, async (t) => {
    const server = new Provider(scheme);
    const client = new Provider(scheme);
    t.teardown(() => (client.close(), server.close()));
    const listener = server.listen(listenUrl(scheme));
    t.teardown(() => listener.close());
    server.on('connectRequest', () => {}); // neither accepts nor rejects
    const error = await t.throwsAsync(client.connect(listener.url, { cq: client.createCq(4), timeoutMs: 300 }));
    t.is((error as TransportError).code, 'ERR_RKV_CONNECT');
    t.regex(error!.message, /time/);
  });

  test(`${scheme}: connect() to nowhere fails with a clear error`, async (t) => {
    const client = new Provider(scheme);
    t.teardown(() => client.close());
    const url = scheme === 'shm' ? 'shm:///nonexistent/rdma-kv.sock' : listenUrl(scheme).replace(/:0$/, ':1');
    const error = await t.throwsAsync(client.connect(url, { cq: client.createCq(4), timeoutMs: 2000 }));
    t.true(error instanceof TransportError);
  });

  test(`${scheme}: private data over the limit is refused`, async (t) => {
    const client = new Provider(scheme);
    t.teardown(() => client.close());
    const error = await t.throwsAsync(client.connect(listenUrl(scheme), { cq: client.createCq(4), privateData: Buffer.alloc(57) }));
    t.regex(error!.message, /56 bytes/);
  });

  test(`${scheme}: close() and the GC free every fd and mapping`, async (t) => {
    const result = await new Promise<Record<string, Record<string, number>>>((resolve, reject) => {
      const proc = fork(fileURLToPath(new URL('lifecycle-child.js', helpers)), [scheme], {
        execArgv: ['--expose-gc'],
        env: { ...process.env, RKV_QUIET: '1' },
      });
      proc.on('message', resolve);
      proc.on('exit', (code) => code !== 0 && reject(new Error(`child exited with ${code}`)));
    });
    t.log(JSON.stringify(result));
    const { before, afterClose, afterGc } = result;
    // close() alone: no connection is left, so no socket and no ring mapping.
    t.is(afterClose!.sockets, before!.sockets);
    t.is(afterClose!.connectionMaps, 0);
    // Once the objects are unreachable, everything else goes too.
    t.deepEqual(afterGc, before);
  });

  test(`${scheme}: a peer killed with SIGKILL surfaces as a disconnect event`, async (t) => {
    const server = new Provider(scheme);
    t.teardown(() => server.close());
    const listener = server.listen(listenUrl(scheme));
    t.teardown(() => listener.close());
    const cq = server.createCq(16);
    const accepted = new Promise<import('../../native/index.js').Connection>((resolve) =>
      server.once('connectRequest', (request) => resolve(request.accept({ cq }))),
    );
    const proc = fork(fileURLToPath(new URL('transport-child.js', helpers)), ['hold', listener.url], { env: { ...process.env, RKV_QUIET: '1' } });
    await within(slow(20_000), 'child connected', new Promise((resolve) => proc.once('message', resolve)));
    const connection = await accepted;
    const gone = new Promise<string>((resolve) => connection.once('disconnected', resolve));
    proc.kill('SIGKILL');
    const reason = await within(slow(30_000), 'disconnect after SIGKILL', gone);
    t.log(`disconnect reason: ${reason}`);
    t.not(connection.state, 1);
  });

  test(`${scheme}: the addon works in worker threads, and each instance keeps its own state`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const worker = new Worker(fileURLToPath(new URL('worker-pair.js', helpers)), {
      workerData: { scheme, foreignLkey: p.scratch.lkey },
      env: { ...process.env, RKV_QUIET: '1' },
    });
    const report = await new Promise<{ read: string; text: string; foreign: string }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    t.deepEqual(report, { read: 'SUCCESS', text: 'from a worker', foreign: 'LOC_PROT_ERR' });
    await worker.terminate();
    // The main thread's pair is untouched by the worker's whole lifecycle.
    p.region.bytes.write('main thread', 0);
    p.clientConn.postSend([{ wrId: 1, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, length: 11, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
    const [wc] = await p.clientCq.take(1);
    t.is(wc!.statusName, 'SUCCESS');
    t.is(p.scratch.bytes.subarray(0, 11).toString(), 'main thread');
  });
}
