// Conformance: namespaces. One kv-server hosts several isolated stores; a
// token opens exactly one. A key put in one is not in another; a client of one
// namespace cannot READ or WRITE another's memory with any rkey or address it
// has (its own key does not cover that memory; another namespace's client's
// key is refused on its connection: REM_ACCESS_ERR, nothing changed); a token
// reload that adds a namespace's token lets a new client in without touching
// the other namespaces' clients; a namespace the server does not host is an
// error by name, for a client and in a token list; region files are one per
// namespace.
import { mkdtempSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test, { type ExecutionContext } from 'ava';
import { pino } from 'pino';

import { KvAuthError, KvClient, KvNamespaceError } from '../../client/index.js';
import { connectData } from '../../protocol/connect.js';
import { type Hello, decode } from '../../protocol/control.js';
import type { TokenEntry } from '../../protocol/tokens.js';
import { Access, Opcode, Provider, SendFlag, type WorkRequest } from '../../native/index.js';
import { KvConfigError, type KvServer } from '../../server/kv-server.js';
import { reloadTokens } from '../../server/token-reload.js';
import { connect, startServer } from '../helpers/kv.js';
import { type Scheme, eventually, listenUrl, providersUnderTest, testTimeoutMs } from '../helpers/providers.js';

const NAMESPACES = [
  { name: 'alpha', memoryBytes: 16 << 20 },
  { name: 'beta', memoryBytes: 16 << 20 },
];
const TOKENS: TokenEntry[] = [
  { token: 'a-writer', role: 'write', namespace: 'alpha' },
  { token: 'b-writer', role: 'write', namespace: 'beta' },
  { token: 'b-other', role: 'write', namespace: 'beta' },
  { token: 'd-writer', role: 'write' },
];

/** A raw connection as a (hostile) client with `token` opens it: its hello, and requests with any rkey and address. */
async function rawClient(t: ExecutionContext, scheme: Scheme, server: KvServer, token: string) {
  const provider = new Provider(scheme);
  t.teardown(() => provider.close());
  const cq = provider.createCq(64);
  const buffers = provider.allocate(8 * 4096, Access.LOCAL_WRITE);
  const recvs = Array.from({ length: 4 }, (_, i) => ({ wrId: i, local: buffers, localOffset: i * 4096, length: 4096 }));
  const conn = await provider.connect(server.urls[0]!, { cq, initialRecvs: recvs, privateData: connectData(token), timeoutMs: testTimeoutMs() });
  t.teardown(() => conn.disconnect());
  const [helloWc] = await cq.take(1, { timeoutMs: testTimeoutMs() });
  const hello = decode(buffers.bytes.subarray(helloWc!.wrId * 4096, helloWc!.wrId * 4096 + helloWc!.byteLen)) as Hello;
  /** One signaled request from the last 4 KiB of buffers; resolves its completion's status. */
  const post = async (wr: Omit<WorkRequest, 'wrId' | 'flags' | 'local' | 'localOffset'>) => {
    conn.postSend([{ ...wr, wrId: 99, flags: SendFlag.SIGNALED, local: buffers, localOffset: 7 * 4096 }]);
    for (;;) {
      const wc = (await cq.next({ timeoutMs: 10_000 })).find((c) => c.wrId === 99);
      if (wc) return wc.statusName;
    }
  };
  return { hello, post, scratch: buffers.bytes.subarray(7 * 4096) };
}

for (const scheme of providersUnderTest()) {
  const start = (options: Parameters<typeof startServer>[1] = {}) => startServer(scheme, { memoryBytes: 16 << 20, namespaces: NAMESPACES, tokens: TOKENS, ...options });

  test(`${scheme}: a key put in one namespace is not in another; each has its own region, stats and clients`, async (t) => {
    const server = await start();
    t.teardown(() => server.close());
    t.deepEqual(server.namespaces, ['default', 'alpha', 'beta']);
    const a = await connect(server, { token: 'a-writer' });
    t.teardown(() => a.close());
    const b = await connect(server, { token: 'b-writer', namespace: 'beta' });
    t.teardown(() => b.close());
    const d = await connect(server, { token: 'd-writer' });
    t.teardown(() => d.close());
    await a.put('k', 'of alpha');
    t.is(await b.get('k'), undefined);
    t.is(await d.get('k'), undefined);
    await b.put('k', 'of beta');
    await b.incr('n', 5);
    t.is((await a.get('k'))?.toString(), 'of alpha');
    t.is((await b.get('k'))?.toString(), 'of beta');
    t.is(await a.incr('n'), 1n, 'alpha has its own counter');
    t.true(await b.delete('k'));
    t.is((await a.get('k'))?.toString(), 'of alpha', 'a delete in beta leaves alpha alone');
    await eventually(() => server.stats('alpha').items === 2 && server.stats('beta').items === 1, 'each namespace counts its own items');
    t.is(server.stats().items, 0, 'the default namespace holds nothing');
    t.deepEqual([server.stats('alpha').clients, server.stats('beta').clients, server.stats().clients], [1, 1, 1]);
    t.is(server.namespace('alpha').layout.regionBytes, 16 << 20);
    t.throws(() => server.stats('gamma'), { instanceOf: KvConfigError, message: /no namespace 'gamma'/ });
  });

  test(`${scheme}: a client of one namespace cannot reach another's memory with its own rkey or another client's: REM_ACCESS_ERR, nothing changed`, async (t) => {
    const server = await start();
    t.teardown(() => server.close());
    const kv = await connect(server, { token: 'b-writer' });
    t.teardown(() => kv.close());
    await kv.put('k', 'before');
    const thief = await rawClient(t, scheme, server, 'a-writer');
    const victim = await rawClient(t, scheme, server, 'b-other');
    t.is(thief.hello.namespace, 'alpha');
    t.is(victim.hello.namespace, 'beta');
    const beta = server.namespace('beta');
    const { indexOffset } = beta.layout;
    const betaBytes = () => Buffer.from(beta.region);
    const before = betaBytes();
    const own = thief.hello.region;
    const theirs = victim.hello.region;
    t.not(own.rkey, theirs.rkey);
    t.not(own.addr, theirs.addr, 'separate memory');
    // Its own rkey works on its own region...
    t.is(await thief.post({ opcode: Opcode.READ, length: 64, remoteAddr: own.addr + BigInt(indexOffset), rkey: own.rkey }), 'SUCCESS');
    // ...and reaches nothing of beta's: not at beta's addresses, not past its own region's end.
    thief.scratch.fill(0x5a, 0, 64);
    t.is(await thief.post({ opcode: Opcode.READ, length: 64, remoteAddr: theirs.addr + BigInt(indexOffset), rkey: own.rkey }), 'REM_ACCESS_ERR');
    const thief2 = await rawClient(t, scheme, server, 'a-writer');
    t.is(await thief2.post({ opcode: Opcode.WRITE, length: 64, remoteAddr: theirs.addr + BigInt(indexOffset), rkey: thief2.hello.region.rkey }), 'REM_ACCESS_ERR');
    const thief3 = await rawClient(t, scheme, server, 'a-writer');
    t.is(await thief3.post({ opcode: Opcode.READ, length: 64, remoteAddr: own.addr + own.length, rkey: thief3.hello.region.rkey }), 'REM_ACCESS_ERR');
    const probe = new Provider(scheme);
    const windows = probe.deviceInfo.memoryWindows;
    probe.close();
    if (windows) {
      // beta's client's rkey, on alpha's connection: refused by the device, READ and WRITE alike.
      const thief4 = await rawClient(t, scheme, server, 'a-writer');
      t.is(await thief4.post({ opcode: Opcode.READ, length: 64, remoteAddr: theirs.addr + BigInt(indexOffset), rkey: theirs.rkey }), 'REM_ACCESS_ERR');
      const thief5 = await rawClient(t, scheme, server, 'a-writer');
      thief5.scratch.fill(0x5a, 0, 64);
      t.is(await thief5.post({ opcode: Opcode.WRITE, length: 64, remoteAddr: theirs.addr + BigInt(indexOffset), rkey: theirs.rkey }), 'REM_ACCESS_ERR');
    }
    t.true(betaBytes().subarray(indexOffset).equals(before.subarray(indexOffset)), 'beta\'s index and heap are unchanged');
    // beta's clients and the server go on.
    t.is(await victim.post({ opcode: Opcode.READ, length: 64, remoteAddr: theirs.addr + BigInt(indexOffset), rkey: theirs.rkey }), 'SUCCESS');
    t.is((await kv.get('k'))?.toString(), 'before');
    await kv.put('k', 'after');
    t.is((await kv.get('k'))?.toString(), 'after');
  });

  test.serial(`${scheme}: without memory windows the server warns that namespaces share a protection domain; a client's own rkey still reaches no other namespace`, async (t) => {
    const warnings: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(String(JSON.parse(line).msg)) });
    process.env.RKV_NO_MEMORY_WINDOWS = '1';
    let server: KvServer;
    try {
      server = await start({ logger });
    } finally {
      delete process.env.RKV_NO_MEMORY_WINDOWS;
    }
    t.teardown(() => server.close());
    t.true(warnings.includes('no memory windows: namespaces are not isolated from a client that finds another namespace\'s rkey'), warnings.join('\n'));
    const thief = await rawClient(t, scheme, server, 'a-writer');
    const victim = await rawClient(t, scheme, server, 'b-writer');
    const beta = server.namespace('beta');
    const before = Buffer.from(beta.region);
    thief.scratch.fill(0x5a, 0, 64);
    const at = victim.hello.region.addr + BigInt(beta.layout.indexOffset);
    t.is(await thief.post({ opcode: Opcode.WRITE, length: 64, remoteAddr: at, rkey: thief.hello.region.rkey }), 'REM_ACCESS_ERR');
    t.true(Buffer.from(beta.region).equals(before), 'beta unchanged');
    t.is(await victim.post({ opcode: Opcode.READ, length: 64, remoteAddr: at, rkey: victim.hello.region.rkey }), 'SUCCESS');
  });

  test(`${scheme}: a token reload that adds a namespace's token lets a new client in, and leaves the other namespaces' clients alone`, async (t) => {
    const server = await start({ tokens: [TOKENS[0]!] });
    t.teardown(() => server.close());
    const a = await connect(server, { token: 'a-writer' });
    t.teardown(() => a.close());
    await a.put('k', 'v');
    const refused = await t.throwsAsync(connect(server, { token: 'b-writer', reconnect: false }));
    t.true(refused instanceof KvAuthError, String(refused));
    const statuses: string[] = [];
    a.on('status', (s) => statuses.push(s));
    // Through kv-server's own reload path: a file with a namespace it does not host is refused, the old tokens stay.
    const file = join(mkdtempSync(join(tmpdir(), 'rkv-ns-')), 'tokens');
    writeFileSync(file, 'a-writer write alpha\nb-writer write gamma\n', { mode: 0o600 });
    const logged: string[] = [];
    const logger = { info: () => undefined, warn: () => undefined, error: (o: { err: string }) => void logged.push(o.err) } as unknown as Parameters<typeof reloadTokens>[2];
    t.false(reloadTokens(file, server, logger));
    t.regex(logged[0] ?? '', /namespace 'gamma' is not hosted by this server \(it hosts default, alpha, beta\)/);
    t.true((await t.throwsAsync(connect(server, { token: 'b-writer', reconnect: false }))) instanceof KvAuthError, 'still refused');
    writeFileSync(file, 'a-writer write alpha\nb-writer write beta\n');
    t.true(reloadTokens(file, server, logger));
    const b = await connect(server, { token: 'b-writer' });
    t.teardown(() => b.close());
    await b.put('k', 'of beta');
    t.is((await b.get('k'))?.toString(), 'of beta');
    t.is((await a.get('k'))?.toString(), 'v');
    await a.put('k', 'still writing');
    t.deepEqual(statuses, [], 'alpha\'s client never left ready');
    t.is(server.stats('alpha').fencedClients, 0);
    // A token moved to another namespace: its client is fenced, the others are not.
    t.is(server.setTokens([{ token: 'a-writer', role: 'write', namespace: 'beta' }, TOKENS[1]!]), 1);
    await eventually(() => server.stats('alpha').fencedClients === 1, 'the moved token\'s client is fenced');
    t.is((await b.get('k'))?.toString(), 'of beta');
    t.is(b.status, 'ready');
  });

  test(`${scheme}: a namespace the server does not host: KV_NO_NAMESPACE for a client that names it, KvConfigError for a token of it`, async (t) => {
    const server = await start();
    t.teardown(() => server.close());
    const none = await t.throwsAsync(connect(server, { token: 'a-writer', namespace: 'gamma', reconnect: false }));
    t.true(none instanceof KvNamespaceError, String(none));
    t.is((none as KvNamespaceError).code, 'KV_NO_NAMESPACE');
    t.regex(none!.message, /hosts no namespace 'gamma'/);
    const other = await t.throwsAsync(connect(server, { token: 'a-writer', namespace: 'beta', reconnect: false }));
    t.true(other instanceof KvAuthError, 'a token of alpha does not open beta');
    const bad = await t.throwsAsync(connect(server, { token: 'a-writer', namespace: 'no/such' }));
    t.is((bad as KvNamespaceError).code, 'KV_INVALID_ARGUMENT');
    const kv = await connect(server, { token: 'a-writer', namespace: 'alpha' });
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    // Tokens for a namespace not hosted: refused at start and on replace (the old tokens stay).
    await t.throwsAsync(start({ listen: [listenUrl(scheme)], tokens: [{ token: 'x', role: 'write', namespace: 'gamma' }] }), { instanceOf: KvConfigError, message: /namespace 'gamma' is not hosted/ });
    t.throws(() => server.setTokens([{ token: 'x', role: 'write', namespace: 'gamma' }]), { instanceOf: KvConfigError });
    const again = await connect(server, { token: 'b-writer' });
    t.teardown(() => again.close());
    t.is(await again.get('k'), undefined);
    await t.throwsAsync(start({ namespaces: [{ name: 'default', memoryBytes: 1 << 20 }] }), { instanceOf: KvConfigError, message: /'default' is always hosted/ });
  });

  test(`${scheme}: with a region file, each namespace keeps its own next to it, and a restart serves each its data`, async (t) => {
    const file = join(mkdtempSync(join(tmpdir(), 'rkv-ns-region-')), 'region');
    const first = await start({ regionFile: file });
    for (const [token, value] of [['a-writer', 'alpha'], ['b-writer', 'beta'], ['d-writer', 'default']] as const) {
      const kv = await connect(first, { token });
      await kv.put('k', value);
      await kv.close();
    }
    await first.close();
    t.true(existsSync(file) && existsSync(`${file}.alpha`) && existsSync(`${file}.beta`));
    const second = await start({ regionFile: file });
    t.teardown(() => second.close());
    for (const [token, value] of [['a-writer', 'alpha'], ['b-writer', 'beta'], ['d-writer', 'default']] as const) {
      const kv: KvClient = await connect(second, { token });
      t.teardown(() => kv.close());
      t.is((await kv.get('k'))?.toString(), value);
    }
  });
}
