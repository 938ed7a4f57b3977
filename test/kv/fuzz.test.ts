// KV conformance: 100,000 random and mutated control messages (and forged
// notifications) from one peer; the server keeps serving a well-behaved
// client correctly and logs each kind of rejection once per connection.
import { Writable } from 'node:stream';

import test from 'ava';
import { pino } from 'pino';

import { KvLayout } from '../../protocol/constants.js';
import { connectData } from '../../protocol/connect.js';
import { GRANT_BATCH, decode, encode } from '../../protocol/control.js';
import { Access, Opcode, Provider, SendFlag, type WorkRequest } from '../../native/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest, slow, testScale } from '../helpers/providers.js';
import { rng } from '../helpers/random.js';

for (const scheme of providersUnderTest()) {
  const total = Math.round(100_000 * testScale());
  test(`${scheme}: ${total.toLocaleString('en-US')} fuzzed control messages: the server keeps serving and logs each rejection kind once`, async (t) => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    const server = await startServer(scheme, { memoryBytes: 128 << 20, logger: pino({ level: 'warn' }, sink) });
    t.teardown(() => server.close());
    const good = await connect(server);
    t.teardown(() => good.close());

    // The fuzzer speaks the transport directly, with the right token (none).
    const provider = new Provider(scheme);
    t.teardown(() => provider.close());
    const cq = provider.createCq(4096);
    const buffers = provider.allocate(64 * 4096, Access.LOCAL_WRITE);
    const recvs = Array.from({ length: 32 }, (_, i) => ({ wrId: i, local: buffers, localOffset: i * 4096, length: 4096 }));
    const conn = await provider.connect(server.urls[0]!, { cq, initialRecvs: recvs, privateData: connectData(undefined) });
    const [helloWc] = await cq.take(1);
    const hello = decode(buffers.bytes.subarray(helloWc!.wrId * 4096, helloWc!.wrId * 4096 + helloWc!.byteLen));
    t.is(hello.t, 'hello');
    if (hello.t !== 'hello') return;
    conn.postRecv([recvs[helloWc!.wrId]!]);

    const random = rng(42);
    const valid = [encode({ t: 'grant', c: 0, n: 1 }), encode({ t: 'return', c: 0, blocks: [] }), encode({ t: 'ping' })];
    const message = (): Buffer => {
      const dice = random();
      if (dice < 0.3) return Buffer.from(Array.from({ length: Math.floor(random() * 500) }, () => Math.floor(random() * 256)));
      if (dice < 0.6) {
        const m = Buffer.from(valid[Math.floor(random() * valid.length)]!); // a valid message with bytes flipped
        for (let k = 0; k < 1 + Math.floor(random() * 3); k++) m[Math.floor(random() * m.length)] = Math.floor(random() * 256);
        return m;
      }
      if (dice < 0.8) {
        // Counts below 1, some valid ones, and some past GRANT_BATCH. The valid ones stay small: the
        // fuzzer never answers a reclaim, so what it is granted stays out of the good client's reach.
        const n = random() < 0.8 ? Math.floor(random() * 100) - 50 : GRANT_BATCH + 1 + Math.floor(random() * 100);
        return encode({ t: 'grant', c: Math.floor(random() * 1000) - 500, n });
      }
      if (dice < 0.9) return encode({ t: 'return', c: Math.floor(random() * 40), blocks: [Math.floor(random() * 1e9)] } as never);
      return encode({ t: ['hello', 'granted', 'nonsense', 'error'][Math.floor(random() * 4)] } as never);
    };
    const ringAddr = hello.region.addr + hello.layout.ringOffset! + BigInt(KvLayout.RING_HEADER_BYTES);
    let sent = 0;
    while (sent < total) {
      const batch = Math.min(64, total - sent);
      const wrs: WorkRequest[] = [];
      for (let i = 0; i < batch; i++) {
        const slot = 32 + (i % 32);
        if (random() < 0.1) {
          // A forged notification: garbage in a ring record, a random immediate.
          buffers.bytes.fill(Math.floor(random() * 256), slot * 4096, slot * 4096 + 32);
          wrs.push({ opcode: Opcode.WRITE_WITH_IMM, local: buffers, localOffset: slot * 4096, length: 32, remoteAddr: ringAddr + BigInt(Math.floor(random() * 256) * 32), rkey: hello.region.rkey, imm: Math.floor(random() * 2 ** 32) });
        } else {
          const bytes = message();
          bytes.copy(buffers.bytes, slot * 4096);
          wrs.push({ opcode: Opcode.SEND, local: buffers, localOffset: slot * 4096, length: bytes.length });
        }
      }
      wrs[wrs.length - 1]!.flags = SendFlag.SIGNALED;
      conn.postSend(wrs);
      await cq.take(1, { timeoutMs: slow(30_000) }).then((wcs) => {
        for (const wc of wcs) {
          if (wc.opcode === Opcode.RECV) conn.postRecv([recvs[wc.wrId]!]); // replies to valid-looking messages
          else if (wc.statusName !== 'SUCCESS') throw new Error(`fuzzer send failed: ${wc.statusName}`);
        }
      });
      sent += batch;
      // Keep within the server's posted receives: wait until it has caught up.
      while (server.stats().controlMessages + server.stats().notifications < sent - 128) await new Promise((r) => setImmediate(r));
      if (sent % 10_000 < 64) {
        // The well-behaved client is served correctly all along.
        await good.put(`good-${sent}`, `value ${sent}`);
        t.is((await good.get(`good-${sent}`))?.toString(), `value ${sent}`);
      }
    }
    t.true(server.stats().controlMessages + server.stats().notifications >= total - 128);
    // Each kind of rejection was logged once for the fuzzer's connection, not once per message.
    const rejections = lines.filter((l) => l.msg === 'control message rejected');
    const kinds = new Set(rejections.map((l) => String(l.why).split(' ')[0]));
    t.log(`${rejections.length} rejection lines for ${total} messages: ${[...kinds].join(', ')}`);
    t.true(rejections.length >= 2 && rejections.length <= 8);
    t.true(rejections.every((l) => l.clientId === hello.clientId));
    await good.put('after', 'the fuzzing');
    t.is((await good.get('after'))?.toString(), 'the fuzzing');
    conn.disconnect();
  });
}
