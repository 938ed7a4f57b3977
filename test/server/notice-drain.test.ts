// The server's native notice drain (native/server/notice_drain.cc) on its own:
// a peer writes ring records and announces them with WRITE_WITH_IMM, and each
// poll's flat results are checked against a real Heap's bitmaps — forged and
// repeated records, slots outside the heap, a ring that wraps, and more
// completions than one crossing takes.
import test from 'ava';

import { Access, type CompletionQueue, Limit, type Connection, type MemoryRegion, NoticeDrain, NoticeOut, NoticeProblem, Opcode, Provider, SendFlag, type WorkRequest, access, readCompletion } from '../../native/index.js';
import { ItemHeader, ItemType, KvLayout, RecordKind } from '../../protocol/constants.js';
import { packSlot } from '../../protocol/index-format.js';
import { Heap } from '../../server/store/heap.js';
import { listenUrl, providersUnderTest, testTimeoutMs } from '../helpers/providers.js';

const CLASSES = [1, 2, 3, 4, 5, 7, 9, 12];
const RING_BYTES = KvLayout.RING_HEADER_BYTES + KvLayout.RING_RECORDS * KvLayout.RECORD_BYTES;
const LAYOUT = { ringOffset: 4096, ringBytes: RING_BYTES, maxClients: 2, heapOffset: 65536, heapBytes: 512 * 1024 };
const HEAP_UNITS = LAYOUT.heapBytes / KvLayout.UNIT_BYTES;
const REGION_BYTES = LAYOUT.heapOffset + LAYOUT.heapBytes;
const RING = 1;

interface Rig {
  heap: Heap;
  drain: NoticeDrain;
  region: MemoryRegion;
  serverConn: Connection;
  /** Writes records `seq -> [kind, newSlot, oldSlot]` into the ring and announces each (in order). */
  notify(records: Array<[number, bigint, bigint, bigint]>): Promise<void>;
  /** Polls until `count` notices have been taken (or nothing comes); one result object per poll. */
  pollAll(count: number, max?: number): Promise<PollResult[]>;
}

interface PollResult {
  polled: number;
  notices: number;
  itemsDelta: number;
  retired: Array<[number, number]>;
  published: Array<[number, number]>;
  locks: number[];
  problems: Array<[number, number, number]>;
  others: Array<ReturnType<typeof readCompletion>>;
}

function read(drain: NoticeDrain): PollResult {
  const o = drain.out;
  const pairs = (at: number, n: number) => Array.from({ length: n }, (_, i): [number, number] => [o[at + 2 * i]!, o[at + 2 * i + 1]!]);
  return {
    polled: o[NoticeOut.POLLED]!,
    notices: o[NoticeOut.NOTICES]!,
    itemsDelta: o[NoticeOut.ITEMS_DELTA]! | 0,
    retired: pairs(NoticeOut.RETIRED_AT, o[NoticeOut.RETIRED]!),
    published: pairs(NoticeOut.PUBLISHED_AT, o[NoticeOut.PUBLISHED]!),
    locks: Array.from(o.subarray(NoticeOut.LOCKS_AT, NoticeOut.LOCKS_AT + o[NoticeOut.LOCKS]!)),
    problems: Array.from({ length: o[NoticeOut.PROBLEMS]! }, (_, i): [number, number, number] => [o[NoticeOut.PROBLEMS_AT + 3 * i]!, o[NoticeOut.PROBLEMS_AT + 3 * i + 1]!, o[NoticeOut.PROBLEMS_AT + 3 * i + 2]!]),
    others: Array.from({ length: o[NoticeOut.OTHERS]! }, (_, i) => readCompletion(drain.others, i)),
  };
}

async function rig(t: { teardown(fn: () => void): void }, scheme: 'shm' | 'rdma', recvs: number): Promise<Rig> {
  const server = new Provider(scheme);
  const client = new Provider(scheme);
  t.teardown(() => {
    client.close();
    server.close();
  });
  const region = server.allocate(REGION_BYTES, access.REMOTE_ALL);
  const cq: CompletionQueue = server.createCq(4096);
  const recvRegion = server.allocate(recvs * KvLayout.SERVER_RECV_BYTES, Access.LOCAL_WRITE);
  const recvAt = (i: number) => ({ wrId: i, local: recvRegion, localOffset: i * KvLayout.SERVER_RECV_BYTES, length: KvLayout.SERVER_RECV_BYTES });
  const listener = server.listen(listenUrl(scheme));
  const accepted = new Promise<Connection>((resolve, reject) => {
    server.once('connectRequest', (request) => {
      try {
        const initialRecvs = Array.from({ length: Math.min(recvs, Limit.MAX_POST_BATCH) }, (_, i) => recvAt(i));
        const connection = request.accept({ cq, initialRecvs, recvDepth: recvs + 16 });
        connection.once('established', () => resolve(connection));
      } catch (error) {
        reject(error as Error);
      }
    });
  });
  const scratch = client.allocate(64 * KvLayout.RECORD_BYTES, Access.LOCAL_WRITE);
  const clientCq = client.createCq(4096);
  const clientConn = await client.connect(listener.url, { cq: clientCq, timeoutMs: testTimeoutMs(), sendDepth: 256 });
  const serverConn = await accepted;
  for (let first = Limit.MAX_POST_BATCH; first < recvs; first += Limit.MAX_POST_BATCH) {
    serverConn.postRecv(Array.from({ length: Math.min(Limit.MAX_POST_BATCH, recvs - first) }, (_, i) => recvAt(first + i)));
  }
  const heap = new Heap(HEAP_UNITS, CLASSES, 1000);
  const drain = new NoticeDrain(server, cq, region.bytes, LAYOUT, CLASSES, recvRegion, KvLayout.SERVER_RECV_BYTES);
  drain.attach(serverConn, RING);
  const ringRecords = region.addr + BigInt(LAYOUT.ringOffset + RING * RING_BYTES + KvLayout.RING_HEADER_BYTES);
  const { chunkStart, granted } = heap.bitmaps();
  return {
    heap,
    drain,
    region,
    serverConn,
    async notify(records) {
      for (let first = 0; first < records.length; first += 64) {
        const chunk = records.slice(first, first + 64);
        const wrs: WorkRequest[] = chunk.map(([seq, kind, newSlot, oldSlot], i) => {
          const at = i * KvLayout.RECORD_BYTES;
          scratch.bytes.writeBigUInt64LE(kind, at);
          scratch.bytes.writeBigUInt64LE(newSlot, at + 8);
          scratch.bytes.writeBigUInt64LE(oldSlot, at + 16);
          scratch.bytes.writeBigUInt64LE(0n, at + 24);
          const position = BigInt((seq % KvLayout.RING_RECORDS) * KvLayout.RECORD_BYTES);
          return { opcode: Opcode.WRITE_WITH_IMM, local: scratch, localOffset: at, length: KvLayout.RECORD_BYTES, remoteAddr: ringRecords + position, rkey: region.rkey, imm: seq };
        });
        wrs[wrs.length - 1]!.flags = SendFlag.SIGNALED;
        clientConn.postSend(wrs);
        const [wc] = await clientCq.take(1, { timeoutMs: testTimeoutMs() });
        if (wc!.statusName !== 'SUCCESS') throw new Error(`notice WRITE_WITH_IMM failed: ${wc!.statusName}`);
      }
    },
    async pollAll(count, max) {
      const results: PollResult[] = [];
      let notices = 0;
      const deadline = Date.now() + testTimeoutMs();
      while (notices < count && Date.now() < deadline) {
        const n = max === undefined ? drain.poll(chunkStart, granted) : drain.poll(chunkStart, granted, max);
        if (n === 0) {
          await new Promise((resolve) => setImmediate(resolve));
          continue;
        }
        const result = read(drain);
        notices += result.notices;
        results.push(result);
      }
      return results;
    },
  };
}

const consumed = (r: Rig): bigint => r.region.bytes.readBigUInt64LE(LAYOUT.ringOffset + RING * RING_BYTES);
const PUT = BigInt(RecordKind.PUT);
const DELETE = BigInt(RecordKind.DELETE);
const PUT_LOCK = BigInt(RecordKind.PUT_LOCK);
const slot = (block: number, units = 1): bigint => packSlot(0x1234, units, block);
const totals = (results: PollResult[]) => ({
  notices: results.reduce((s, r) => s + r.notices, 0),
  retired: results.flatMap((r) => r.retired),
  published: results.flatMap((r) => r.published),
  problems: results.flatMap((r) => r.problems),
  itemsDelta: results.reduce((s, r) => s + r.itemsDelta, 0),
});

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a PUT publishes its block and retires the one it replaced, once: a repeated notice frees nothing`, async (t) => {
    const r = await rig(t, scheme, 64);
    const [a, b] = r.heap.grant(0, 2) as [number, number];
    // b's record says it is a lock item (the server learns lock items from notices); a's header
    // says LOCK too, but its record says a plain PUT, and the drain does not read items (v11).
    r.region.bytes.writeUInt16LE(ItemType.LOCK, LAYOUT.heapOffset + a * KvLayout.UNIT_BYTES + ItemHeader.TYPE);
    await r.notify([[0, PUT, slot(a), 0n], [1, PUT_LOCK, slot(b), slot(a)], [2, PUT, slot(b), slot(a)]]);
    const results = await r.pollAll(3);
    const all = totals(results);
    t.is(all.notices, 3);
    t.deepEqual(all.published, [[RING, a], [RING, b], [RING, b]]);
    t.deepEqual(results.flatMap((x) => x.locks), [b], 'the PUT_LOCK record alone names a lock item');
    t.deepEqual(all.retired, [[0, a]], 'a retired once');
    t.deepEqual(all.problems, [[RING, 2, NoticeProblem.NOT_IN_USE]], 'the repeat is reported');
    t.is(all.itemsDelta, 1, 'one new key');
    t.false(r.heap.isGranted(0, a), 'its granted bit is cleared');
    t.true(r.heap.isGranted(0, b));
    t.is(consumed(r), 3n);
    // A DELETE of b: one item less, b retired.
    await r.notify([[3, DELETE, 0n, slot(b)]]);
    const del = totals(await r.pollAll(1));
    t.deepEqual(del.retired, [[0, b]]);
    t.is(del.itemsDelta, -1);
    t.is(consumed(r), 4n);
  });

  test(`${scheme}: forged records (bad kind, slots outside the heap, wrong class, a block never granted) change nothing`, async (t) => {
    const r = await rig(t, scheme, 64);
    const [a] = r.heap.grant(0, 1) as [number];
    const [c] = r.heap.grant(2, 1) as [number]; // a class-2 block (3 units)
    const before = Buffer.from(r.heap.bitmaps().granted.buffer.slice(0));
    await r.notify([
      [0, 7n, slot(a), 0n], // no such kind
      [1, PUT, slot(HEAP_UNITS - 1, 2), 0n], // the new item would run past the heap
      [2, PUT, 0n, slot(HEAP_UNITS, 1)], // the old slot starts past the heap
      [3, PUT, slot(a, 0), 0n], // zero units
      [4, DELETE, 0n, packSlot(1, 0xffff, 0xffffffff)], // far outside
    ]);
    const bad = totals(await r.pollAll(5));
    t.deepEqual(bad.problems.map((p) => p[2]), Array(5).fill(NoticeProblem.MALFORMED));
    t.deepEqual(bad.problems.map((p) => p[1]), [0, 1, 2, 3, 4]);
    t.deepEqual(bad.retired, []);
    t.deepEqual(bad.published, []);
    t.is(bad.itemsDelta, 0);
    await r.notify([
      [5, DELETE, 0n, slot(a, 3)], // a is a class-0 block: not one block of class 2
      [6, DELETE, 0n, slot(c + 1, 1)], // inside c, not its start
      [7, DELETE, 0n, slot(4000, 1)], // never granted
    ]);
    const wrong = totals(await r.pollAll(3));
    t.deepEqual(wrong.problems.map((p) => p[2]), Array(3).fill(NoticeProblem.NOT_IN_USE));
    t.deepEqual(wrong.retired, []);
    t.deepEqual(Buffer.from(r.heap.bitmaps().granted.buffer.slice(0)), before, 'no granted bit changed');
    t.is(consumed(r), 8n, 'every record is consumed, good or not');
  });

  test(`${scheme}: the ring wraps: 700 notices through 256 records and 64 receive buffers, reposted by the drain`, async (t) => {
    const r = await rig(t, scheme, 64);
    const blocks = r.heap.grant(1, 700); // 2 units each
    t.is(blocks.length, 700);
    const all: PollResult[] = [];
    for (let first = 0; first < 700; first += 50) {
      const records: Array<[number, bigint, bigint, bigint]> = [];
      for (let seq = first; seq < first + 50; seq++) records.push([seq, PUT, slot(blocks[seq]!, 2), seq === 0 ? 0n : slot(blocks[seq - 1]!, 2)]);
      await r.notify(records);
      all.push(...(await r.pollAll(50)));
    }
    const sum = totals(all);
    t.is(sum.notices, 700);
    t.deepEqual(sum.problems, []);
    t.deepEqual(sum.retired, blocks.slice(0, 699).map((b) => [1, b]));
    t.is(consumed(r), 700n);
  });

  test(`${scheme}: 1,500 notices waiting: polls of at most NoticeOut.CAPACITY, every block retired once across them`, async (t) => {
    const r = await rig(t, scheme, 1600);
    const blocks = r.heap.grant(0, KvLayout.RING_RECORDS);
    // Record i names blocks[i % 256] as replaced; the 1,500 notices go round the ring, so every
    // block is named about six times: retired the first time, "not in use" after.
    const records: Array<[number, bigint, bigint, bigint]> = [];
    for (let seq = 0; seq < 1500; seq++) records.push([seq, PUT, 0n, slot(blocks[seq % KvLayout.RING_RECORDS]!)]);
    await r.notify(records);
    const polls = await r.pollAll(1500);
    t.deepEqual(polls.map((p) => p.notices), [NoticeOut.CAPACITY, 1500 - NoticeOut.CAPACITY]);
    const sum = totals(polls);
    t.deepEqual(sum.retired, blocks.map((b) => [0, b]));
    t.is(sum.problems.length, 1500 - KvLayout.RING_RECORDS);
    t.true(sum.problems.every((p) => p[2] === NoticeProblem.NOT_IN_USE));
    // A smaller max is honoured too.
    await r.notify([[1500, PUT, 0n, 0n], [1501, PUT, 0n, 0n], [1502, PUT, 0n, 0n]]);
    t.deepEqual((await r.pollAll(3, 2)).map((p) => p.polled), [2, 1]);
  });

  test(`${scheme}: completions that are not notices, and notices of a detached connection, come back untouched`, async (t) => {
    const r = await rig(t, scheme, 64);
    r.drain.detach(r.serverConn.qpNum);
    await r.notify([[0, PUT, 0n, 0n]]);
    const { chunkStart, granted } = r.heap.bitmaps();
    while (r.drain.poll(chunkStart, granted) === 0) await new Promise((resolve) => setImmediate(resolve));
    const poll = read(r.drain);
    t.is(poll.notices, 0);
    t.is(poll.others.length, 1);
    t.is(poll.others[0]!.opcode, Opcode.RECV_RDMA_WITH_IMM);
    t.is(poll.others[0]!.imm, 0);
    t.is(consumed(r), 0n, 'not consumed: nobody read it');
  });
}
