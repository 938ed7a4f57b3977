// One client core driving two connections of one provider on one CQ (the
// shape a cluster client's members take), against two bare servers whose
// regions differ (bucket count, seed, rkey, ring): a batch spanning both goes
// in with one crossing and each op runs against its own connection's region;
// losing one connection fails only its ops; control completions of either
// come back to JS; closing a connection frees its index; an op naming a
// connection the core lacks is refused with PROTOCOL.
import test from 'ava';

import { ControlWords, KvLayout, KvOp, KvStatus, Opcode, ResultLayout, SendFlag, WcStatus } from '../../native/constants.generated.js';
import {
  Access,
  ClientCore,
  type CompletionQueue,
  type Connection,
  type CoreRegion,
  type MemoryRegion,
  Provider,
  access,
  hashKey,
  nativeBuildItem,
  readCompletion,
} from '../../native/index.js';
import { ItemType } from '../../protocol/constants.js';
import { packSlot } from '../../protocol/index-format.js';
import { type CoreOp, writeOps } from '../helpers/core-ops.js';
import { type Scheme, listenUrl, providersUnderTest, slow, testTimeoutMs } from '../helpers/providers.js';

const INDEX = 4096;
const HEAP_BYTES = 512 << 10;

/** A bare server: a region open to remote access with an empty index of `buckets` buckets, and receive buffers for the ring's notices. */
interface BareServer {
  provider: Provider;
  region: MemoryRegion;
  connection: Connection;
  buckets: number;
  seed: bigint;
  close(): void;
}

const heapOffset = (s: BareServer) => INDEX + s.buckets * 64;

async function connectServer(scheme: Scheme, client: Provider, cq: CompletionQueue, buckets: number, seed: bigint): Promise<BareServer> {
  const provider = new Provider(scheme);
  const region = provider.allocate(1 << 20, access.REMOTE_ALL);
  const serverCq = provider.createCq(1024);
  const recvs = provider.allocate(16 * 64, Access.LOCAL_WRITE);
  const listener = provider.listen(listenUrl(scheme));
  const accepted = new Promise<Connection>((resolve, reject) => {
    provider.once('connectRequest', (request) => {
      try {
        // The notices of PUTs (WRITE_WITH_IMM) each take a receive.
        const initialRecvs = Array.from({ length: 16 }, (_, i) => ({ wrId: 1000 + i, local: recvs, localOffset: i * 64, length: 64 }));
        const connection = request.accept({ cq: serverCq, initialRecvs });
        connection.once('established', () => resolve(connection));
      } catch (error) {
        reject(error as Error);
      }
    });
  });
  const connection = await client.connect(listener.url, { cq, privateData: Buffer.from('core'), timeoutMs: testTimeoutMs() });
  const serverConnection = await accepted;
  return {
    provider,
    region,
    connection,
    buckets,
    seed,
    close() {
      connection.disconnect();
      serverConnection.disconnect();
      listener.close();
      provider.close();
    },
  };
}

function regionOf(s: BareServer, clientId: number): CoreRegion {
  const heap = heapOffset(s);
  return {
    addr: s.region.addr, rkey: s.region.rkey, length: 1n << 20n, bucketCount: s.buckets, indexOffset: BigInt(INDEX), heapOffset: BigInt(heap),
    heapBytes: BigInt(HEAP_BYTES), seed: s.seed, ringOffset: BigInt(heap + HEAP_BYTES), clientId, versionBase: BigInt(clientId) << 40n,
    maxValueBytes: 4096, graceMs: slow(1000),
  };
}

/** `key` with `value` as an item at heap block `block` of the server, its slot in its first bucket. */
function place(s: BareServer, key: string, value: string, block: number): void {
  const k = Buffer.from(key);
  const item = nativeBuildItem(ItemType.BYTES, k, Buffer.from(value), (9n << 40n) | 1n);
  item.copy(s.region.bytes, heapOffset(s) + block * KvLayout.UNIT_BYTES);
  const { b1, fingerprint } = hashKey(k, s.seed, s.buckets);
  s.region.bytes.writeBigUInt64LE(packSlot(fingerprint, Math.ceil(item.length / KvLayout.UNIT_BYTES), block), INDEX + b1 * 64 + 8);
}

interface Done {
  id: number;
  status: number;
  value?: string;
}

function submit(core: ClientCore, ops: CoreOp[]): { taken: number; done: Done[] } {
  writeOps(core, ops);
  const taken = core.submit(ops.length);
  return { taken, done: results(core, core.submittedResults) };
}

function results(core: ClientCore, n: number): Done[] {
  return Array.from({ length: n }, (_, i) => {
    const w = (f: number) => core.resultWords[i * ResultLayout.WORDS + f]!;
    const status = w(ResultLayout.STATUS);
    const done: Done = { id: w(ResultLayout.ID), status };
    if (status === KvStatus.OK && w(ResultLayout.VALUE_LEN) > 0) {
      done.value = core.scratch.toString('utf8', w(ResultLayout.VALUE_OFFSET), w(ResultLayout.VALUE_OFFSET) + w(ResultLayout.VALUE_LEN));
    }
    return done;
  });
}

/** Polls until `count` results are in (shm: none left, they came from submit). */
async function settle(core: ClientCore, done: Done[], count: number): Promise<Done[]> {
  const deadline = performance.now() + slow(5000);
  while (done.length < count && performance.now() < deadline) {
    done.push(...results(core, core.poll()));
    await new Promise((resolve) => setImmediate(resolve));
  }
  return done.sort((a, b) => a.id - b.id);
}

async function setup(t: { teardown(fn: () => void): void }, scheme: Scheme) {
  const client = new Provider(scheme);
  const cq = client.createCq(1024);
  const a = await connectServer(scheme, client, cq, 1024, 7n);
  const b = await connectServer(scheme, client, cq, 512, 9n);
  const core = new ClientCore(client, a.connection, cq, regionOf(a, 1), { scratchBytes: 1 << 20, opTimeoutMs: slow(2000), arenaBytes: 1 << 16 });
  const second = core.addConnection(client, b.connection, regionOf(b, 2));
  t.teardown(() => {
    core.close();
    a.close();
    b.close();
    client.close();
  });
  return { client, cq, a, b, core, second };
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: one core, two connections on one CQ: a batch spanning both is one submit, and each op runs on its connection's region`, async (t) => {
    const { a, b, core, second } = await setup(t, scheme);
    t.is(second, 1);
    t.is(core.connections, 2);
    place(a, 'k', 'from-a', 10);
    place(b, 'k', 'from-b', 20);
    place(b, 'only-b', 'b2', 30);
    const { taken, done } = submit(core, [
      { type: KvOp.GET, id: 1, connection: 0, key: 'k' },
      { type: KvOp.GET, id: 2, connection: 1, key: 'k' },
      { type: KvOp.GET, id: 3, connection: 0, key: 'only-b' },
      { type: KvOp.GET, id: 4, connection: 1, key: 'only-b' },
      { type: KvOp.PUT, id: 5, connection: 1, key: 'new', value: 'put-on-b', block: 100 },
    ]);
    t.is(taken, 5);
    t.deepEqual(await settle(core, done, 5), [
      { id: 1, status: KvStatus.OK, value: 'from-a' },
      { id: 2, status: KvStatus.OK, value: 'from-b' },
      { id: 3, status: KvStatus.NOT_FOUND },
      { id: 4, status: KvStatus.OK, value: 'b2' },
      { id: 5, status: KvStatus.OK },
    ]);
    // The PUT went to b's region (its index, its ring) only.
    const after = submit(core, [
      { type: KvOp.GET, id: 6, connection: 0, key: 'new' },
      { type: KvOp.GET, id: 7, connection: 1, key: 'new' },
    ]);
    t.deepEqual(await settle(core, after.done, 2), [
      { id: 6, status: KvStatus.NOT_FOUND },
      { id: 7, status: KvStatus.OK, value: 'put-on-b' },
    ]);
  });

  test(`${scheme}: a lost connection fails only its own ops; the other connection goes on, and control completions of both come back`, async (t) => {
    const { client, cq, a, b, core } = await setup(t, scheme);
    place(a, 'k', 'from-a', 10);
    // Every bucket of b locked by another client: b's GETs back off until their deadline.
    for (let i = 0; i < b.buckets; i++) b.region.bytes.writeBigUInt64LE(1n, INDEX + i * 64);
    const first = submit(core, [
      { type: KvOp.GET, id: 1, connection: 1, key: 'x' },
      { type: KvOp.GET, id: 2, connection: 0, key: 'k' },
    ]);
    t.deepEqual(await settle(core, first.done, 1), [{ id: 2, status: KvStatus.OK, value: 'from-a' }]);
    t.is(core.inflight, 1);
    // A control SEND on each connection: they come back with the op results, as posted.
    const tag = 2 ** KvLayout.CONTROL_TAG_SHIFT;
    const control = client.allocate(64, Access.LOCAL_WRITE);
    a.connection.postSend([{ wrId: tag + 1, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: control, length: 4 }]);
    b.connection.postSend([{ wrId: tag + 2, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: control, length: 4 }]);
    const seen: number[] = [];
    const deadline = performance.now() + slow(5000);
    while (seen.length < 2 && performance.now() < deadline) {
      core.poll();
      for (let i = 0; i < core.controlCount; i++) {
        const c = readCompletion(core.controlWords, i, ControlWords.ENTRIES);
        if (c.status === WcStatus.SUCCESS) seen.push(c.wrId - tag);
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
    t.deepEqual(seen.sort(), [1, 2]);

    b.connection.disconnect();
    const lost = await settle(core, [], 1);
    t.deepEqual(lost, [{ id: 1, status: KvStatus.DISCONNECTED }]);
    // b's ops now fail at once; a's still run.
    const later = submit(core, [
      { type: KvOp.GET, id: 3, connection: 1, key: 'k' },
      { type: KvOp.GET, id: 4, connection: 0, key: 'k' },
    ]);
    t.deepEqual(await settle(core, later.done, 2), [
      { id: 3, status: KvStatus.DISCONNECTED },
      { id: 4, status: KvStatus.OK, value: 'from-a' },
    ]);
    // Closing b's connection frees its index for the next connection, which runs on its own region.
    const doorbells = core.doorbells;
    t.true(core.closeConnection(1));
    t.is(core.connections, 1);
    t.is(core.doorbells, doorbells, 'a closed connection\'s doorbells still count');
    const c = await connectServer(scheme, client, cq, 256, 5n);
    t.teardown(() => c.close());
    place(c, 'k', 'from-c', 40);
    t.is(core.addConnection(client, c.connection, regionOf(c, 3)), 1);
    const reused = submit(core, [{ type: KvOp.GET, id: 5, connection: 1, key: 'k' }]);
    t.deepEqual(await settle(core, reused.done, 1), [{ id: 5, status: KvStatus.OK, value: 'from-c' }]);
  });

  test(`${scheme}: an op naming a connection the core lacks fails with PROTOCOL; a connection of another provider is refused`, async (t) => {
    const { client, core, b } = await setup(t, scheme);
    const { taken, done } = submit(core, [
      { type: KvOp.GET, id: 1, connection: 5, key: 'k' },
      { type: KvOp.PUT, id: 2, connection: 200, key: 'k', value: 'v' },
      { type: KvOp.DELETE, id: 3, connection: 2, key: 'k' },
    ]);
    t.is(taken, 3);
    t.deepEqual(await settle(core, done, 3), [
      { id: 1, status: KvStatus.PROTOCOL },
      { id: 2, status: KvStatus.PROTOCOL },
      { id: 3, status: KvStatus.PROTOCOL },
    ]);
    t.is(core.inflight, 0);
    const other = new Provider(scheme);
    t.teardown(() => other.close());
    t.throws(() => core.addConnection(other, b.connection, regionOf(b, 3)), { message: /another provider/ });
    t.throws(() => core.addConnection(client, b.connection, { ...regionOf(b, 3), bucketCount: 3 }), { message: /power of two/ });
    t.true(core.closeConnection(63), 'no such connection: nothing to wait for');
    t.is(core.connections, 2);
  });
}
