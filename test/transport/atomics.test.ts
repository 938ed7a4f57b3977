// Conformance: CMP_AND_SWP and FETCH_AND_ADD, alone and from many processes.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import test from 'ava';

import { Opcode, SendFlag } from '../../native/index.js';
import { connectPair } from '../helpers/pair.js';
import { listenUrl, providersUnderTest } from '../helpers/providers.js';

const child = fileURLToPath(new URL('../helpers/transport-child.js', import.meta.url));

for (const scheme of providersUnderTest()) {
  test(`${scheme}: CAS returns the original value and swaps only on a match`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    p.region.bytes.writeBigUInt64LE(0x1122334455667788n, 64);
    const cas = (wrId: number, compare: bigint, swap: bigint, resultAt: number) => ({
      wrId, opcode: Opcode.CMP_AND_SWP, flags: SendFlag.SIGNALED, local: p.scratch, localOffset: resultAt, length: 8,
      remoteAddr: p.region.addr + 64n, rkey: p.region.rkey, compareAdd: compare, swap,
    });
    p.clientConn.postSend([cas(1, 5n, 99n, 0)]); // no match
    await p.clientCq.take(1);
    t.is(p.scratch.bytes.readBigUInt64LE(0), 0x1122334455667788n);
    t.is(p.region.bytes.readBigUInt64LE(64), 0x1122334455667788n);
    p.clientConn.postSend([cas(2, 0x1122334455667788n, 0xffffffff00000001n, 8)]); // match
    const [wc] = await p.clientCq.take(1);
    t.is(wc!.statusName, 'SUCCESS');
    t.is(wc!.opcode, Opcode.CMP_AND_SWP);
    t.is(p.scratch.bytes.readBigUInt64LE(8), 0x1122334455667788n);
    t.is(p.region.bytes.readBigUInt64LE(64), 0xffffffff00000001n);
  });

  test(`${scheme}: FETCH_AND_ADD returns the original and wraps modulo 2^64`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    p.region.bytes.writeBigUInt64LE(0xfffffffffffffffen, 128);
    const faa = (wrId: number, add: bigint, resultAt: number) => ({
      wrId, opcode: Opcode.FETCH_AND_ADD, flags: SendFlag.SIGNALED, local: p.scratch, localOffset: resultAt, length: 8,
      remoteAddr: p.region.addr + 128n, rkey: p.region.rkey, compareAdd: add,
    });
    p.clientConn.postSend([faa(1, 1n, 0), faa(2, 3n, 8)]);
    const wcs = await p.clientCq.take(2);
    t.deepEqual(wcs.map((c) => c.statusName), ['SUCCESS', 'SUCCESS']);
    t.is(p.scratch.bytes.readBigUInt64LE(0), 0xfffffffffffffffen);
    t.is(p.scratch.bytes.readBigUInt64LE(8), 0xffffffffffffffffn);
    t.is(p.region.bytes.readBigUInt64LE(128), 2n);
  });

  test(`${scheme}: 100,000 FETCH_AND_ADDs from two processes sum exactly`, async (t) => {
    const p = await connectPair(scheme);
    t.teardown(() => p.close());
    // The test process serves the region; two children each connect and add.
    const target = p.region.addr + 256n;
    p.region.bytes.writeBigUInt64LE(0n, 256);
    const listener = p.server.listen(listenUrl(scheme));
    t.teardown(() => listener.close());
    p.server.on('connectRequest', (request) => request.accept({ cq: p.serverCq }));
    const perChild = 50_000;
    const runs = [0, 1].map(
      () =>
        new Promise<number>((resolve, reject) => {
          const proc = fork(child, ['faa', listener.url, String(target), String(p.region.rkey), String(perChild)], {
            env: { ...process.env, RKV_QUIET: '1' },
            stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
          });
          proc.on('message', (m: { sum?: number; error?: string }) => (m.error ? reject(new Error(m.error)) : resolve(m.sum!)));
          proc.on('exit', (code) => code !== 0 && reject(new Error(`child exited with ${code}`)));
        }),
    );
    const results = await Promise.all(runs);
    t.deepEqual(results, [perChild, perChild]);
    t.is(p.region.bytes.readBigUInt64LE(256), BigInt(2 * perChild));
  });
}
