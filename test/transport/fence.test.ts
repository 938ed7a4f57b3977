// Conformance: a FENCEd READ after a CMP_AND_SWP on the same connection sees
// the swap, also when the NIC retransmits. This file shortens the local ACK
// timeout to 8 us (RKV_RDMA_ACK_TIMEOUT=1; the provider reads it when created),
// so on Soft-RoCE an ACK that comes a jiffy late makes the requester resend.
// rxe's own FENCE waits on a count of outstanding READs/atomics that a resend
// leaves wrong: with IBV_SEND_FENCE posted (RKV_VERBS_RXE_FENCE=1) the first
// fenced READ after a retransmit never goes out and its batch never completes.
// The provider posts no fences on rxe, whose responder keeps a queue pair's
// requests in order by itself (docs/softroce-vm.md, "A queue pair that goes silent").
import test from 'ava';

import { Opcode, SendFlag } from '../../native/index.js';
import { nicCounters } from '../helpers/kv.js';
import { connectPair } from '../helpers/pair.js';
import { providersUnderTest, slow } from '../helpers/providers.js';

process.env.RKV_RDMA_ACK_TIMEOUT = '1'; // before connectPair creates this test's providers

/** rxe's count of retransmit rounds its requesters started (0 without an rxe device). */
function retransmits(): number {
  let sum = 0;
  for (const [name, value] of nicCounters()) if (name.endsWith('/completer_retry_err')) sum += value;
  return sum;
}
const countsRetransmits = [...nicCounters().keys()].some((name) => name.endsWith('/completer_retry_err'));

for (const scheme of providersUnderTest()) {
  test(`${scheme}: CMP_AND_SWP then a FENCEd READ, batch after batch: each READ sees its swap, also across retransmits`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    const word = p.region.addr + 64n;
    const before = retransmits();
    // Until the NIC has retransmitted a few times (rxe), or 2,000 batches where nothing counts retransmits.
    const wanted = scheme === 'rdma' && countsRetransmits ? 3 : 0;
    const guardEnd = Date.now() + slow(60_000);
    let batches = 0;
    for (let value = 0n; batches < 2000 || retransmits() - before < wanted; value++, batches++) {
      if (Date.now() > guardEnd) break; // reported below: the test proves nothing without retransmits
      p.clientConn.postSend([
        { wrId: 1, opcode: Opcode.CMP_AND_SWP, local: p.scratch, localOffset: 0, length: 8, remoteAddr: word, rkey: p.region.rkey, compareAdd: value, swap: value + 1n },
        { wrId: 2, opcode: Opcode.READ, flags: SendFlag.FENCE | SendFlag.SIGNALED, local: p.scratch, localOffset: 8, length: 8, remoteAddr: word, rkey: p.region.rkey },
      ]);
      const [wc] = await p.clientCq.take(1, { timeoutMs: slow(10_000) }).catch((error: Error) => {
        throw new Error(`batch ${batches} (swap ${value} -> ${value + 1n}) never completed: ${error.message}; retransmits so far ${retransmits() - before}`);
      });
      t.is(wc!.statusName, 'SUCCESS');
      if (p.scratch.bytes.readBigUInt64LE(0) !== value) t.fail(`batch ${batches}: the CAS found ${p.scratch.bytes.readBigUInt64LE(0)}, not ${value}`);
      if (p.scratch.bytes.readBigUInt64LE(8) !== value + 1n) t.fail(`batch ${batches}: the FENCEd READ saw ${p.scratch.bytes.readBigUInt64LE(8)}, not the swap's ${value + 1n}`);
    }
    const seen = retransmits() - before;
    t.log(`${batches} batches, ${seen} retransmit rounds`);
    t.true(seen >= wanted, `the NIC retransmitted ${seen} times in ${batches} batches, fewer than the ${wanted} this test needs`);
    t.is(p.region.bytes.readBigUInt64LE(64), BigInt(batches));
  });
}
