// Conformance: memory windows (Connection.bindWindow). A window's rkey works
// for the peer of the connection it was bound on, with its access alone; on
// another connection, after invalidation, or beyond its access it fails at the
// device with REM_ACCESS_ERR and changes nothing, and the server and its other
// clients go on. The rkey reaches the client as kv-server's hello does: in a
// SEND posted after the bind on the same send queue.
import test, { type ExecutionContext } from 'ava';

import { Access, type CompletionQueue, type Connection, type MemoryRegion, type MemoryWindow, Opcode, Provider, SendFlag, type WorkRequest } from '../../native/index.js';
import { type Pair, connectPair } from '../helpers/pair.js';
import { providersUnderTest, testTimeoutMs } from '../helpers/providers.js';

const WRITABLE = Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC;
/** The region the windows cover: remote access only through them. */
const REGION_ACCESS = Access.LOCAL_WRITE | Access.MW_BIND;
/** Where a client receives the rkey in its scratch. */
const HELLO_AT = 4096;

interface Client {
  conn: Connection;
  cq: CompletionQueue;
  /** its local memory: where it receives the rkey, and its requests' buffer */
  scratch: MemoryRegion;
  /** the server's end of this client's connection */
  serverConn: Connection;
}

async function windowed(t: ExecutionContext, scheme: Parameters<typeof connectPair>[0]): Promise<Pair> {
  // Receives posted: a NIC checks for one (RNR) before the rkey of a WRITE_WITH_IMM.
  const p = await connectPair(scheme, { regionAccess: REGION_ACCESS, serverRecvs: 4 });
  t.teardown(() => p.close());
  return p;
}

/** The pair's own client, and its server end. */
function first(p: Pair): Client {
  return { conn: p.clientConn, cq: p.clientCq, scratch: p.scratch, serverConn: p.serverConn };
}

/** Another client of the same server (its own provider, as another process would be). */
async function another(t: ExecutionContext, p: Pair): Promise<Client> {
  const provider = new Provider(p.client.scheme);
  t.teardown(() => provider.close());
  const scratch = provider.allocate(1 << 16, Access.LOCAL_WRITE);
  const accepted = new Promise<Connection>((resolve) => {
    p.server.once('connectRequest', (request) => {
      const connection = request.accept({ cq: p.serverCq });
      connection.once('established', () => resolve(connection));
    });
  });
  const cq = provider.createCq(64);
  const conn = await provider.connect(p.url, { cq, timeoutMs: testTimeoutMs() });
  t.teardown(() => conn.disconnect());
  return { conn, cq, scratch, serverConn: await accepted };
}

/** Binds a window on the server's end of `client`'s connection and tells the client its rkey. */
async function bindAndTell(p: Pair, client: Client, access: number): Promise<MemoryWindow> {
  const { scratch } = client;
  client.conn.postRecv([{ wrId: 77, local: scratch, localOffset: HELLO_AT, length: 64 }]);
  const window = client.serverConn.bindWindow(p.region, access);
  p.recvRegion.bytes.writeUInt32LE(window.rkey, 0);
  client.serverConn.postSend([{ wrId: 78, opcode: Opcode.SEND, flags: SendFlag.SIGNALED, local: p.recvRegion, length: 4 }]);
  // The server's CQ also gets the flushed receives of a connection an earlier access error broke
  // (in the same batch as ours, at times: look through every batch).
  let sent;
  while (!sent) sent = (await p.serverCq.next()).find((wc) => wc.wrId === 78);
  const [hello] = await client.cq.take(1);
  if (sent?.statusName !== 'SUCCESS' || hello?.statusName !== 'SUCCESS') throw new Error(`hello: ${sent?.statusName}, ${hello?.statusName}`);
  if (scratch.bytes.readUInt32LE(HELLO_AT) !== window.rkey) throw new Error('the rkey did not arrive');
  return window;
}

/** One signaled request with `rkey` at region offset `at`; its completion's status. */
async function attempt(p: Pair, client: Client, opcode: WorkRequest['opcode'], rkey: number, at: number, length = 8): Promise<string> {
  const { scratch } = client;
  client.conn.postSend([{ wrId: 1, opcode, flags: SendFlag.SIGNALED, local: scratch, length, remoteAddr: p.region.addr + BigInt(at), rkey, compareAdd: 0n, swap: 0x5a5a5a5an, imm: 9 }]);
  const [wc] = await client.cq.take(1);
  return wc!.statusName;
}

for (const scheme of providersUnderTest()) {
  // Every case needs the device's windows; where it has none, the provider says so and refuses to bind.
  const windows = (() => {
    const probe = new Provider(scheme);
    const info = probe.deviceInfo;
    probe.close();
    return info;
  })();
  if (!windows.memoryWindows) {
    test(`${scheme}: without memory windows (${windows.memoryWindowsNote}) a bind fails with ERR_RKV_WINDOW`, async (t) => {
      const p = await windowed(t, scheme).catch(() => connectPair(scheme));
      t.throws(() => p.serverConn.bindWindow(p.region, Access.REMOTE_READ), { code: 'ERR_RKV_WINDOW' });
    });
    continue;
  }

  test(`${scheme}: a window's rkey works on its own connection for READ, WRITE and atomics; the region's own rkey does not`, async (t) => {
    const p = await windowed(t, scheme);
    const c = first(p);
    const window = await bindAndTell(p, c, WRITABLE);
    t.true(window.valid);
    t.not(window.rkey, p.region.rkey);
    p.scratch.bytes.write('through!', 0);
    t.is(await attempt(p, c, Opcode.WRITE, window.rkey, 256), 'SUCCESS');
    t.is(p.region.bytes.subarray(256, 264).toString(), 'through!');
    t.is(await attempt(p, c, Opcode.FETCH_AND_ADD, window.rkey, 512), 'SUCCESS');
    t.is(p.region.bytes.readBigUInt64LE(512), 0n); // compareAdd 0: added nothing, proved it ran
    p.region.bytes.writeBigUInt64LE(0n, 520);
    t.is(await attempt(p, c, Opcode.CMP_AND_SWP, window.rkey, 520), 'SUCCESS');
    t.is(p.region.bytes.readBigUInt64LE(520), 0x5a5a5a5an);
    t.is(await attempt(p, c, Opcode.READ, window.rkey, 256), 'SUCCESS');
    t.is(p.scratch.bytes.subarray(0, 8).toString(), 'through!');
    // The region has no remote access of its own: its rkey is refused.
    p.region.bytes.write('untouched', 1024);
    t.is(await attempt(p, c, Opcode.WRITE, p.region.rkey, 1024), 'REM_ACCESS_ERR');
    t.is(p.region.bytes.subarray(1024, 1033).toString(), 'untouched');
  });

  test(`${scheme}: a window's rkey used on another connection fails with REM_ACCESS_ERR, changes nothing, and its owner goes on`, async (t) => {
    const p = await windowed(t, scheme);
    const owner = first(p);
    const window = await bindAndTell(p, owner, WRITABLE);
    const thief = await another(t, p);
    await bindAndTell(p, thief, Access.REMOTE_READ); // a window of its own: a client of this server in good standing
    p.region.bytes.write('untouch!', 2048);
    p.region.bytes.writeBigUInt64LE(7n, 2056);
    thief.scratch.bytes.write('stolen!!', 0);
    t.is(await attempt(p, thief, Opcode.WRITE, window.rkey, 2048), 'REM_ACCESS_ERR');
    t.is(p.region.bytes.subarray(2048, 2056).toString(), 'untouch!');
    t.regex(thief.conn.firstError, /REM_ACCESS_ERR/);
    // A second thief tries an atomic and a READ: refused too.
    const other = await another(t, p);
    t.is(await attempt(p, other, Opcode.CMP_AND_SWP, window.rkey, 2056), 'REM_ACCESS_ERR');
    t.is(p.region.bytes.readBigUInt64LE(2056), 7n);
    const reader = await another(t, p);
    t.is(await attempt(p, reader, Opcode.READ, window.rkey, 2048), 'REM_ACCESS_ERR');
    // The owner's connection and window are untouched.
    t.true(window.valid);
    p.scratch.bytes.write('owner ok', 0);
    t.is(await attempt(p, owner, Opcode.WRITE, window.rkey, 2048), 'SUCCESS');
    t.is(p.region.bytes.subarray(2048, 2056).toString(), 'owner ok');
  });

  test(`${scheme}: after invalidate() the window's rkey fails with REM_ACCESS_ERR and changes nothing; the server serves others`, async (t) => {
    const p = await windowed(t, scheme);
    const c = first(p);
    const window = await bindAndTell(p, c, WRITABLE);
    t.is(await attempt(p, c, Opcode.READ, window.rkey, 0), 'SUCCESS');
    window.invalidate();
    window.invalidate(); // idempotent
    t.false(window.valid);
    p.region.bytes.writeBigUInt64LE(11n, 4096);
    t.is(await attempt(p, c, Opcode.FETCH_AND_ADD, window.rkey, 4096), 'REM_ACCESS_ERR');
    t.is(p.region.bytes.readBigUInt64LE(4096), 11n);
    // Another client binds and works as before.
    const next = await another(t, p);
    const fresh = await bindAndTell(p, next, WRITABLE);
    t.not(fresh.rkey, window.rkey);
    t.is(await attempt(p, next, Opcode.READ, fresh.rkey, 4096), 'SUCCESS');
  });

  for (const [what, opcode] of [['WRITE', Opcode.WRITE], ['WRITE_WITH_IMM', Opcode.WRITE_WITH_IMM], ['CMP_AND_SWP', Opcode.CMP_AND_SWP], ['FETCH_AND_ADD', Opcode.FETCH_AND_ADD]] as const) {
    test(`${scheme}: a READ-only window: READ works, ${what} fails with REM_ACCESS_ERR and changes nothing`, async (t) => {
      const p = await windowed(t, scheme);
      const c = first(p);
      const window = await bindAndTell(p, c, Access.REMOTE_READ);
      p.region.bytes.write('untouched', 64);
      t.is(await attempt(p, c, Opcode.READ, window.rkey, 64), 'SUCCESS');
      t.is(p.scratch.bytes.subarray(0, 8).toString(), 'untouche');
      p.scratch.bytes.fill(0x5a, 0, 8);
      t.is(await attempt(p, c, opcode, window.rkey, 64), 'REM_ACCESS_ERR');
      t.is(p.region.bytes.subarray(64, 73).toString(), 'untouched');
      // A writable window of another client of the same server still writes.
      const writer = await another(t, p);
      const writable = await bindAndTell(p, writer, WRITABLE);
      t.is(await attempt(p, writer, Opcode.WRITE, writable.rkey, 128), 'SUCCESS');
    });
  }

  test(`${scheme}: the server's disconnect invalidates the windows bound on that connection, not others`, async (t) => {
    const p = await windowed(t, scheme);
    const c = first(p);
    const window = await bindAndTell(p, c, WRITABLE);
    const other = await another(t, p);
    const kept = await bindAndTell(p, other, WRITABLE);
    c.serverConn.disconnect();
    t.false(window.valid);
    t.true(kept.valid);
    t.is(await attempt(p, other, Opcode.READ, kept.rkey, 0), 'SUCCESS');
  });

  test(`${scheme}: a bind is refused without MW_BIND, writable without LOCAL_WRITE, outside the region, or with no remote access`, async (t) => {
    const p = await connectPair(scheme); // REMOTE_ALL, no MW_BIND
    t.teardown(() => p.close());
    t.throws(() => p.serverConn.bindWindow(p.region, Access.REMOTE_READ), { code: 'ERR_RKV_WINDOW', message: /MW_BIND/ });
    const readOnly = p.server.register(p.region.memory, p.region.offset, p.region.length, Access.MW_BIND);
    t.throws(() => p.serverConn.bindWindow(readOnly, Access.REMOTE_WRITE), { code: 'ERR_RKV_WINDOW', message: /LOCAL_WRITE/ });
    const bindable = p.server.register(p.region.memory, p.region.offset, p.region.length, REGION_ACCESS);
    t.throws(() => p.serverConn.bindWindow(bindable, Access.LOCAL_WRITE), { code: 'ERR_RKV_WINDOW' });
    t.throws(() => p.serverConn.bindWindow(bindable, Access.REMOTE_READ, { offset: 4096, length: bindable.length }), { code: 'ERR_OUT_OF_RANGE' });
    t.true(p.serverConn.bindWindow(bindable, Access.REMOTE_READ, { offset: 4096, length: 4096 }).valid);
  });

  test.serial(`${scheme}: RKV_NO_MEMORY_WINDOWS=1 makes a provider that reports no windows (kv-server's fallback)`, (t) => {
    process.env.RKV_NO_MEMORY_WINDOWS = '1';
    let provider: Provider;
    try {
      provider = new Provider(scheme);
    } finally {
      delete process.env.RKV_NO_MEMORY_WINDOWS;
    }
    t.teardown(() => provider.close());
    t.false(provider.deviceInfo.memoryWindows);
    t.regex(provider.deviceInfo.memoryWindowsNote, /RKV_NO_MEMORY_WINDOWS/);
  });
}
