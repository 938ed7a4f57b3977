// Conformance: bad remote accesses end in verbs-named error completions, the
// connection flushes what follows, and the target process serves on.
import test from 'ava';

import { Access, Opcode, SendFlag, WcStatus, type WorkRequest, access } from '../../native/index.js';
import { type Pair, connectPair } from '../helpers/pair.js';
import { listenUrl, providersUnderTest, testTimeoutMs } from '../helpers/providers.js';

type Bad = (p: Pair) => WorkRequest;

const cases: Array<[string, Bad, keyof typeof WcStatus]> = [
  ['a READ past the end of the region', (p) => ({ opcode: Opcode.READ, local: p.scratch, length: 64, remoteAddr: p.region.addr + BigInt(p.region.length - 32), rkey: p.region.rkey }), 'REM_ACCESS_ERR'],
  ['a READ with a wrong rkey', (p) => ({ opcode: Opcode.READ, local: p.scratch, length: 8, remoteAddr: p.region.addr, rkey: (p.region.rkey ^ 0x5a5a) >>> 0 }), 'REM_ACCESS_ERR'],
  ['a READ before the region starts', (p) => ({ opcode: Opcode.READ, local: p.scratch, length: 8, remoteAddr: p.region.addr - 4096n, rkey: p.region.rkey }), 'REM_ACCESS_ERR'],
  ['an atomic on a misaligned address', (p) => ({ opcode: Opcode.FETCH_AND_ADD, local: p.scratch, length: 8, remoteAddr: p.region.addr + 4n, rkey: p.region.rkey, compareAdd: 1n }), 'REM_INV_REQ_ERR'],
];

for (const scheme of providersUnderTest()) {
  for (const [what, bad, expected] of cases) {
    test(`${scheme}: ${what} fails with ${expected} and flushes what follows`, async (t) => {
      const p = await connectPair(scheme);
      t.teardown(() => p.close());
      const good = { opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, length: 8, remoteAddr: p.region.addr, rkey: p.region.rkey };
      p.clientConn.postSend([{ ...bad(p), wrId: 1, flags: SendFlag.SIGNALED }, { ...good, wrId: 2 }]);
      const [first, second] = await p.clientCq.take(2);
      t.is(first!.wrId, 1);
      t.is(first!.statusName, expected);
      t.is(second!.wrId, 2);
      t.is(second!.statusName, 'WR_FLUSH_ERR');
      t.regex(p.clientConn.firstError, new RegExp(expected));
      // Later posts on the broken connection are flushed too, never executed.
      p.clientConn.postSend([{ ...good, wrId: 3 }]);
      const [third] = await p.clientCq.take(1);
      t.is(third!.statusName, 'WR_FLUSH_ERR');
    });
  }

  test(`${scheme}: a WRITE to a region registered without REMOTE_WRITE fails with REM_ACCESS_ERR`, async (t) => {
    const p = await connectPair(scheme, { regionAccess: Access.LOCAL_WRITE | Access.REMOTE_READ });
    t.teardown(() => p.close());
    p.region.bytes.write('untouched', 0);
    p.clientConn.postSend([{ wrId: 1, opcode: Opcode.WRITE, flags: SendFlag.SIGNALED, local: p.scratch, length: 9, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
    const [wc] = await p.clientCq.take(1);
    t.is(wc!.statusName, 'REM_ACCESS_ERR');
    t.is(p.region.bytes.subarray(0, 9).toString(), 'untouched');
  });

  test(`${scheme}: an atomic on a region without REMOTE_ATOMIC fails with REM_ACCESS_ERR`, async (t) => {
    const p = await connectPair(scheme, { regionAccess: Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE });
    t.teardown(() => p.close());
    p.clientConn.postSend([{ wrId: 1, opcode: Opcode.CMP_AND_SWP, flags: SendFlag.SIGNALED, local: p.scratch, length: 8, remoteAddr: p.region.addr, rkey: p.region.rkey, compareAdd: 0n, swap: 1n }]);
    const [wc] = await p.clientCq.take(1);
    t.is(wc!.statusName, 'REM_ACCESS_ERR');
    t.is(p.region.bytes.readBigUInt64LE(0), 0n);
  });

  // kv-server's read clients: the same memory registered a second time, READ-only (docs/operations.md, roles).
  for (const [what, opcode] of [['WRITE', Opcode.WRITE], ['WRITE_WITH_IMM', Opcode.WRITE_WITH_IMM], ['CMP_AND_SWP', Opcode.CMP_AND_SWP], ['FETCH_AND_ADD', Opcode.FETCH_AND_ADD]] as const) {
    test(`${scheme}: a second, READ-only registration of writable memory: READ works, ${what} fails with REM_ACCESS_ERR and changes nothing`, async (t) => {
      // Receives posted: a NIC checks for one (RNR) before the rkey of a WRITE_WITH_IMM.
      const p = await connectPair(scheme, { serverRecvs: 4 });
      t.teardown(() => p.close());
      const readOnly = p.server.register(p.region.memory, p.region.offset, p.region.length, Access.REMOTE_READ);
      t.not(readOnly.rkey, p.region.rkey);
      p.region.bytes.write('untouched', 64);
      const at = { remoteAddr: readOnly.addr + 64n, rkey: readOnly.rkey, local: p.scratch, length: 8 };
      p.clientConn.postSend([{ ...at, wrId: 1, opcode: Opcode.READ, flags: SendFlag.SIGNALED }]);
      const [read] = await p.clientCq.take(1);
      t.is(read!.statusName, 'SUCCESS');
      t.is(p.scratch.bytes.subarray(0, 8).toString(), 'untouche');
      p.scratch.bytes.fill(0x5a, 0, 8);
      p.clientConn.postSend([{ ...at, wrId: 2, opcode, flags: SendFlag.SIGNALED, compareAdd: 0x6863756f746e75n, swap: 1n, imm: 7 }]);
      const [bad] = await p.clientCq.take(1);
      t.is(bad!.statusName, 'REM_ACCESS_ERR');
      t.is(p.region.bytes.subarray(64, 73).toString(), 'untouched');
      t.regex(p.clientConn.firstError, /REM_ACCESS_ERR/);
      // The writable registration of the same memory still takes a WRITE, on a fresh connection.
      const q = await connectPair(scheme);
      t.teardown(() => q.close());
      const writable = q.server.register(p.region.memory, p.region.offset, p.region.length, access.REMOTE_ALL);
      q.scratch.bytes.write('written!', 0);
      q.clientConn.postSend([{ wrId: 3, opcode: Opcode.WRITE, flags: SendFlag.SIGNALED, local: q.scratch, length: 8, remoteAddr: writable.addr + 64n, rkey: writable.rkey }]);
      const [good] = await q.clientCq.take(1);
      t.is(good!.statusName, 'SUCCESS');
      t.is(p.region.bytes.subarray(64, 72).toString(), 'written!');
    });
  }

  test(`${scheme}: after one client's access error the server serves another client`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    p.clientConn.postSend([{ wrId: 1, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, length: 8, remoteAddr: p.region.addr, rkey: (p.region.rkey + 1) >>> 0 }]);
    const [bad] = await p.clientCq.take(1);
    t.is(bad!.statusName, 'REM_ACCESS_ERR');
    // A second connection to the same server process reads the same region.
    p.region.bytes.write('still serving', 512);
    const cq = p.client.createCq(16);
    const serverCq = p.server.createCq(16);
    p.server.on('connectRequest', (request) => request.accept({ cq: serverCq }));
    const listener = p.server.listen(listenUrl(scheme));
    t.teardown(() => listener.close());
    const again = await p.client.connect(listener.url, { cq, timeoutMs: testTimeoutMs() });
    again.postSend([{ wrId: 2, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, localOffset: 64, length: 13, remoteAddr: p.region.addr + 512n, rkey: p.region.rkey }]);
    const [good] = await cq.take(1);
    t.is(good!.statusName, 'SUCCESS');
    t.is(p.scratch.bytes.subarray(64, 77).toString(), 'still serving');
    again.disconnect();
  });

  test(`${scheme}: a local buffer outside its region is a LOC_PROT_ERR, not a crash`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    p.clientConn.postSend([{ wrId: 1, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, localOffset: p.scratch.length - 4, length: 8, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
    const [wc] = await p.clientCq.take(1);
    t.is(wc!.statusName, 'LOC_PROT_ERR');
  });

  test(`${scheme}: an invalid opcode is rejected at post with EINVAL`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const error = t.throws(() => p.clientConn.postSend([{ opcode: 99 as Opcode }]));
    t.is((error as Error & { code: string }).code, 'EINVAL');
  });
}
