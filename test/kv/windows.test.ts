// Conformance: kv-server's memory windows (server/fabric.ts). Where the
// provider has windows, every client's hello names an rkey of its own
// connection: another connection's requests with it fail at the device with
// REM_ACCESS_ERR and change nothing, and once the client is fenced its
// remembered rkey is refused everywhere, while the server and other clients go
// on. Where it has none (RKV_NO_MEMORY_WINDOWS=1 here), the server says so and
// serves with the region's rkey, as before windows.
import test from 'ava';

import type { TokenEntry } from '../../protocol/tokens.js';
import { Opcode, Provider } from '../../native/index.js';
import type { KvServer } from '../../server/kv-server.js';
import { connect, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';
import { rawClient } from '../helpers/raw-client.js';

const TOKENS: TokenEntry[] = [
  { token: 'writer', role: 'write', namespace: 'default' },
  { token: 'other', role: 'write', namespace: 'default' },
];

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: without memory windows the server says so, reports 0, and clients share the region's rkey`, async (t) => {
    process.env.RKV_NO_MEMORY_WINDOWS = '1';
    let server: KvServer;
    try {
      server = await startServer(scheme, { tokens: TOKENS });
    } finally {
      delete process.env.RKV_NO_MEMORY_WINDOWS;
    }
    t.teardown(() => server.close());
    t.deepEqual(server.stats().memoryWindows, { [scheme]: 0 });
    const a = await rawClient(t, scheme, server, 'writer');
    const b = await rawClient(t, scheme, server, 'other');
    t.is(a.hello.region.rkey, b.hello.region.rkey, 'the region\'s one rkey');
    const kv = await connect(server, { token: 'writer' });
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    t.is((await kv.get('k'))?.toString(), 'v');
  });

  const probe = new Provider(scheme);
  const windows = probe.deviceInfo.memoryWindows;
  probe.close();
  if (!windows) continue; // the fallback above is all such a device can show

  test(`${scheme}: each client's rkey is its own connection's: another client's requests with it fail with REM_ACCESS_ERR and change nothing`, async (t) => {
    const server = await startServer(scheme, { tokens: TOKENS });
    t.teardown(() => server.close());
    t.deepEqual(server.stats().memoryWindows, { [scheme]: 1 });
    const kv = await connect(server, { token: 'writer' });
    t.teardown(() => kv.close());
    await kv.put('k', 'before');
    const victim = await rawClient(t, scheme, server, 'writer');
    const thief = await rawClient(t, scheme, server, 'other');
    t.not(victim.hello.region.rkey, thief.hello.region.rkey);
    const { indexOffset } = server.layout;
    const index = () => Buffer.from(server.region.subarray(indexOffset));
    const before = index();
    // Its own rkey reads; the victim's, on its connection, is refused for WRITE.
    t.is(await thief.post({ opcode: Opcode.READ, length: 64, remoteAddr: thief.hello.region.addr + BigInt(indexOffset), rkey: thief.hello.region.rkey }), 'SUCCESS');
    thief.scratch.fill(0x5a, 0, 64);
    t.is(await thief.post({ opcode: Opcode.WRITE, length: 64, remoteAddr: victim.hello.region.addr + BigInt(indexOffset), rkey: victim.hello.region.rkey }), 'REM_ACCESS_ERR');
    t.true(index().equals(before), 'the index and the heap are unchanged');
    // The victim's rkey still works on the victim's connection, and the server serves on.
    t.is(await victim.post({ opcode: Opcode.READ, length: 64, remoteAddr: victim.hello.region.addr + BigInt(indexOffset), rkey: victim.hello.region.rkey }), 'SUCCESS');
    await kv.put('k', 'after');
    t.is((await kv.get('k'))?.toString(), 'after');
  });

  test(`${scheme}: a fenced client's remembered rkey no longer works, on a new connection of a valid token or anywhere`, async (t) => {
    const server = await startServer(scheme, { tokens: TOKENS });
    t.teardown(() => server.close());
    const kv = await connect(server, { token: 'other' });
    t.teardown(() => kv.close());
    await kv.put('k', 'kept');
    const fenced = await rawClient(t, scheme, server, 'writer');
    const remembered = fenced.hello.region;
    const { indexOffset } = server.layout;
    t.is(await fenced.post({ opcode: Opcode.READ, length: 64, remoteAddr: remembered.addr + BigInt(indexOffset), rkey: remembered.rkey }), 'SUCCESS');
    // Its token is removed: the server fences it (its queue pair to error, its window invalidated).
    t.is(server.setTokens([TOKENS[1]!, { token: 'writer2', role: 'write', namespace: 'default' }]), 1);
    await eventually(() => server.stats().fencedClients >= 1, 'the client was fenced');
    await server.settled();
    const before = Buffer.from(server.region.subarray(indexOffset));
    // Back with a token that is valid: a new connection, a new window; the old rkey is refused.
    const back = await rawClient(t, scheme, server, 'writer2');
    t.not(back.hello.region.rkey, remembered.rkey);
    back.scratch.fill(0x5a, 0, 64);
    t.is(await back.post({ opcode: Opcode.WRITE, length: 64, remoteAddr: remembered.addr + BigInt(indexOffset), rkey: remembered.rkey }), 'REM_ACCESS_ERR');
    const again = await rawClient(t, scheme, server, 'writer2');
    t.is(await again.post({ opcode: Opcode.READ, length: 64, remoteAddr: remembered.addr + BigInt(indexOffset), rkey: remembered.rkey }), 'REM_ACCESS_ERR');
    t.true(Buffer.from(server.region.subarray(indexOffset)).equals(before), 'nothing changed');
    // Its own fresh rkey works, and the other client was not disturbed.
    const fresh = await rawClient(t, scheme, server, 'writer2');
    t.is(await fresh.post({ opcode: Opcode.READ, length: 64, remoteAddr: fresh.hello.region.addr + BigInt(indexOffset), rkey: fresh.hello.region.rkey }), 'SUCCESS');
    t.is((await kv.get('k'))?.toString(), 'kept');
    await kv.put('k', 'still writing');
    t.is(kv.status, 'ready');
  });
}
