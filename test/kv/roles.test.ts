// Conformance: roles. A read token's client reads as any client does, has its
// writes refused with KV_READ_ONLY before anything is sent, and holds an rkey
// the device itself refuses for WRITE and atomics (REM_ACCESS_ERR, nothing
// changed), while the server and write clients go on. Replacing the tokens
// (KvServer.setTokens, kv-server's SIGHUP) fences exactly the clients of
// removed or re-roled tokens.
import test from 'ava';

import { KvClient, type KvError } from '../../client/index.js';
import type { ServerClient } from '../../client/server-client.js';
import type { TokenEntry } from '../../protocol/tokens.js';
import { Opcode } from '../../native/index.js';
import type { KvServer } from '../../server/kv-server.js';
import { connect, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest, testTimeoutMs } from '../helpers/providers.js';
import { rawClient } from '../helpers/raw-client.js';
import { slotOfKeyIn } from '../helpers/region-file.js';

const TOKENS: TokenEntry[] = [
  { token: 'writer', role: 'write', namespace: 'default' },
  { token: 'reader', role: 'read', namespace: 'default' },
];

function onlyServer(kv: KvClient): ServerClient {
  return [...(kv as unknown as { servers: Map<string, ServerClient> }).servers.values()][0]!;
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a read client gets, getMany and getWithVersion; its writes are KV_READ_ONLY and send nothing`, async (t) => {
    const server = await startServer(scheme, { tokens: TOKENS });
    t.teardown(() => server.close());
    const writer = await connect(server, { token: 'writer' });
    t.teardown(() => writer.close());
    await writer.put('k', 'written');
    await writer.incr('counter', 5);
    const reader = await connect(server, { token: 'reader' });
    t.teardown(() => reader.close());
    t.is((await reader.get('k'))?.toString(), 'written');
    t.deepEqual((await reader.getMany(['k', 'missing'])).map((v) => v?.toString()), ['written', undefined]);
    t.is((await reader.getWithVersion('k'))?.value.toString(), 'written');

    const link = onlyServer(reader);
    const doorbells = link.doorbells;
    const submits = link.submits;
    const refused: Array<[string, () => Promise<unknown>]> = [
      ['put', () => reader.put('k', 'overwritten')],
      ['delete', () => reader.delete('k')],
      ['cas', () => reader.cas('k', 0n, 'x')],
      ['incr', () => reader.incr('counter')],
      ['lock', () => reader.lock('a-lock')],
      ['putMany', () => reader.putMany([['k', 'a'], ['k2', 'b']])],
    ];
    for (const [what, run] of refused) {
      const error = await t.throwsAsync(run(), undefined, what);
      t.is((error as KvError).code, 'KV_READ_ONLY', what);
      t.is((error as KvError).name, 'KvReadOnlyError', what);
    }
    t.is(link.doorbells, doorbells, 'nothing was posted');
    t.is(link.submits, submits, 'nothing was queued');
    // Nothing changed, and the reader still reads.
    t.is((await reader.get('k'))?.toString(), 'written');
    t.is(await writer.incr('counter', 0), 5n);
    t.is(reader.status, 'ready');
  });

  test(`${scheme}: a read client's rkey: READ works, WRITE and CMP_AND_SWP fail with REM_ACCESS_ERR and change nothing; the server and a write client go on`, async (t) => {
    const server = await startServer(scheme, { tokens: TOKENS });
    t.teardown(() => server.close());
    const writer = await connect(server, { token: 'writer' });
    t.teardown(() => writer.close());
    await writer.put('target', 'the value');
    await writer.lock('a-lock').then((l) => l.release());
    const region = server.region;
    const item = slotOfKeyIn(region, 'target').itemAt;
    const lockWord = slotOfKeyIn(region, 'a-lock').itemAt + 24; // ItemHeader.ATOMIC_WORD
    // The index and the heap (a connection's accept changes the superblock's next session and clears a ring).
    const data = () => region.subarray(server.layout.indexOffset);
    const before = Buffer.from(data());

    const hostile = await rawClient(t, scheme, server, 'reader');
    t.is(hostile.hello.role, 'read');
    t.is(hostile.hello.layout.ringOffset, undefined, 'a read client has no ring');
    const read = await hostile.post({ opcode: Opcode.READ, length: 64, remoteAddr: hostile.hello.region.addr + BigInt(item) });
    t.is(read, 'SUCCESS');
    t.deepEqual(hostile.scratch.subarray(0, 64), region.subarray(item, item + 64));
    hostile.scratch.fill(0x5a, 0, 64);
    const write = await hostile.post({ opcode: Opcode.WRITE, length: 64, remoteAddr: hostile.hello.region.addr + BigInt(item) });
    t.is(write, 'REM_ACCESS_ERR');
    t.regex(hostile.conn.firstError, /REM_ACCESS_ERR/);

    // Atomics on a fresh connection (the first one is in error now, as a NIC leaves it).
    const again = await rawClient(t, scheme, server, 'reader');
    const cas = await again.post({ opcode: Opcode.CMP_AND_SWP, length: 8, remoteAddr: again.hello.region.addr + BigInt(lockWord), compareAdd: region.readBigUInt64LE(lockWord), swap: 0xdeadn });
    t.is(cas, 'REM_ACCESS_ERR');
    const third = await rawClient(t, scheme, server, 'reader');
    const faa = await third.post({ opcode: Opcode.FETCH_AND_ADD, length: 8, remoteAddr: third.hello.region.addr + BigInt(lockWord), compareAdd: 1n });
    t.is(faa, 'REM_ACCESS_ERR');
    const fourth = await rawClient(t, scheme, server, 'reader');
    const imm = await fourth.post({ opcode: Opcode.WRITE_WITH_IMM, length: 8, remoteAddr: fourth.hello.region.addr + BigInt(item), imm: 1 });
    t.is(imm, 'REM_ACCESS_ERR');

    t.true(data().equals(before), 'the index and the heap are unchanged');
    // The server and the write client are unaffected.
    await writer.put('target', 'written again');
    t.is((await writer.get('target'))?.toString(), 'written again');
    await writer.lock('a-lock').then((l) => l.release());
    const reader = await connect(server, { token: 'reader' });
    t.teardown(() => reader.close());
    t.is((await reader.get('target'))?.toString(), 'written again');
  });

  test(`${scheme}: a server started with write tokens only takes a read token added later, with a READ-only rkey`, async (t) => {
    const server = await startServer(scheme, { token: 'writer' });
    t.teardown(() => server.close());
    const writer = await connect(server, { token: 'writer' });
    t.teardown(() => writer.close());
    await writer.put('k', 'v');
    t.is(server.setTokens(TOKENS), 0, 'the writer keeps its role: not fenced');
    const hostile = await rawClient(t, scheme, server, 'reader');
    t.is(hostile.hello.role, 'read');
    t.not(hostile.hello.region.rkey, (await rawClient(t, scheme, server, 'writer')).hello.region.rkey);
    t.is(await hostile.post({ opcode: Opcode.CMP_AND_SWP, length: 8, remoteAddr: hostile.hello.region.addr + BigInt(server.layout.indexOffset), compareAdd: 0n, swap: 1n }), 'REM_ACCESS_ERR');
    const reader = await connect(server, { token: 'reader' });
    t.teardown(() => reader.close());
    t.is((await reader.get('k'))?.toString(), 'v');
    await writer.put('k', 'still writes');
  });

  test(`${scheme}: a wrong token is still KV_AUTH with several tokens`, async (t) => {
    const server = await startServer(scheme, { tokens: TOKENS });
    t.teardown(() => server.close());
    for (const token of ['writer ', 'read', undefined]) {
      const error = await t.throwsAsync(KvClient.connect({ url: server.urls[0]!, token, timeoutMs: testTimeoutMs(), reconnect: false }));
      t.is((error as KvError).code, 'KV_AUTH');
    }
    t.is(server.stats().rejectedConnections, 3);
  });

  test(`${scheme}: replacing the tokens fences the clients of removed and re-roled tokens only; new tokens work`, async (t) => {
    const start: TokenEntry[] = [
      { token: 'kept-writer', role: 'write', namespace: 'default' },
      { token: 'kept-reader', role: 'read', namespace: 'default' },
      { token: 'removed', role: 'write', namespace: 'default' },
      { token: 'downgraded', role: 'write', namespace: 'default' },
    ];
    const server = await startServer(scheme, { tokens: start });
    t.teardown(() => server.close());
    const clients = new Map<string, KvClient>();
    for (const { token } of start) {
      const kv = await connect(server, { token });
      t.teardown(() => kv.close());
      clients.set(token, kv);
    }
    const changes = new Map<string, string[]>();
    for (const [token, kv] of clients) {
      changes.set(token, []);
      kv.on('status', (status) => changes.get(token)!.push(status));
    }
    const departed: number[] = [];
    server.on('clientDisconnected', (id: number) => departed.push(id));
    await clients.get('downgraded')!.put('before', 'the downgrade');

    const fenced = server.setTokens([
      { token: 'kept-writer', role: 'write', namespace: 'default' },
      { token: 'kept-reader', role: 'read', namespace: 'default' },
      { token: 'downgraded', role: 'read', namespace: 'default' },
      { token: 'new-reader', role: 'read', namespace: 'default' },
    ]);
    t.is(fenced, 2);
    await eventually(() => departed.length === 2, 'both fenced clients departed');
    // The downgraded client reconnects as a reader: its writes are refused from then on.
    const downgraded = clients.get('downgraded')!;
    await eventually(() => downgraded.status === 'ready' && changes.get('downgraded')!.includes('reconnecting'), 'the downgraded client reconnected');
    t.is((await downgraded.get('before'))?.toString(), 'the downgrade');
    t.is(((await t.throwsAsync(downgraded.put('after', 'x'))) as KvError).code, 'KV_READ_ONLY');
    // The removed token's client cannot come back.
    await eventually(() => changes.get('removed')!.includes('reconnecting'), 'the removed client lost its connection');
    t.not(clients.get('removed')!.status, 'ready');
    const refused = await t.throwsAsync(KvClient.connect({ url: server.urls[0]!, token: 'removed', timeoutMs: testTimeoutMs(), reconnect: false }));
    t.is((refused as KvError).code, 'KV_AUTH');
    // The others were never disturbed, and the new token works.
    await clients.get('kept-writer')!.put('still', 'writing');
    t.is((await clients.get('kept-reader')!.get('still'))?.toString(), 'writing');
    t.deepEqual(changes.get('kept-writer'), []);
    t.deepEqual(changes.get('kept-reader'), []);
    const fresh = await connect(server, { token: 'new-reader' });
    t.teardown(() => fresh.close());
    t.is((await fresh.get('still'))?.toString(), 'writing');
    // Bad entries are refused whole: the tokens in force stay.
    t.throws(() => server.setTokens([{ token: 'x', role: 'admin' as never, namespace: 'default' }]), { message: /unknown role 'admin'/ });
    const still = await connect(server, { token: 'new-reader' });
    t.teardown(() => still.close());
  });
}
