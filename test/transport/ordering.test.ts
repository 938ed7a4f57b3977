// Conformance: on one connection, one signaled completion proves every
// unsignaled request before it executed (selective signaling is safe).
import test from 'ava';

import { Opcode, SendFlag } from '../../native/index.js';
import { connectPair } from '../helpers/pair.js';
import { providersUnderTest } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  test(`${scheme}: unsignaled WRITEs then one signaled READ: the READ sees every WRITE`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const n = 200;
    for (let i = 0; i < n; i++) p.scratch.bytes.writeUInt32LE(0xc0de0000 + i, i * 4);
    for (let start = 0; start < n; start += 100) {
      p.clientConn.postSend(
        Array.from({ length: 100 }, (_, k) => ({
          wrId: start + k, opcode: Opcode.WRITE, local: p.scratch, localOffset: (start + k) * 4, length: 4,
          remoteAddr: p.region.addr + BigInt((start + k) * 4), rkey: p.region.rkey,
        })),
      );
    }
    p.clientConn.postSend([{ wrId: 9999, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, localOffset: 8192, length: n * 4, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
    const wcs = await p.clientCq.take(1);
    t.deepEqual(wcs.map((c) => [c.wrId, c.statusName]), [[9999, 'SUCCESS']]); // nothing from the unsignaled ones
    for (let i = 0; i < n; i++) t.is(p.scratch.bytes.readUInt32LE(8192 + i * 4), 0xc0de0000 + i);
  });

  test(`${scheme}: 10,000 unsignaled WRITEs with a signaled one every 256 never overflow the send queue`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    let signaled = 0;
    for (let start = 0; start < 10_000; start += 256) {
      const count = Math.min(256, 10_000 - start);
      p.clientConn.postSend(
        Array.from({ length: count }, (_, k) => ({
          wrId: start + k, opcode: Opcode.WRITE, flags: k === count - 1 ? SendFlag.SIGNALED : 0, local: p.scratch, length: 64,
          remoteAddr: p.region.addr + BigInt(((start + k) % 1024) * 64), rkey: p.region.rkey,
        })),
      );
      const [wc] = await p.clientCq.take(1);
      t.is(wc!.statusName, 'SUCCESS');
      signaled++;
    }
    t.is(signaled, 40);
  });

  test(`${scheme}: SENDs arrive in the order they were posted`, async (t) => {
    const p = await connectPair(scheme, { serverRecvs: 100, recvBytes: 8 });
    t.teardown(() => p.close());
    for (let i = 0; i < 100; i++) p.scratch.bytes.writeUInt32LE(i, i * 4);
    p.clientConn.postSend(Array.from({ length: 100 }, (_, i) => ({ wrId: i, opcode: Opcode.SEND, local: p.scratch, localOffset: i * 4, length: 4 })));
    const got = await p.serverCq.take(100);
    t.deepEqual(got.map((c) => p.recvRegion.bytes.readUInt32LE((c.wrId - 1000) * 8)), Array.from({ length: 100 }, (_, i) => i));
  });
}
