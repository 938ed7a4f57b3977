// Versions are unique for the life of a region: a version read before a server
// restart never names a different value written after it, so a stale cas()
// fails; repair's rewrite of an item as it is keeps its version. And a client
// of another protocol version is refused with a message that names both
// versions.
import { mkdtempSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import { KvClient, KvProtocolError } from '../../client/index.js';
import { KvLayout, Superblock } from '../../protocol/constants.js';
import { RejectReason, parseConnectData } from '../../protocol/connect.js';
import { Provider, TransportError } from '../../native/index.js';
import { KvConfigError } from '../../server/options.js';
import { readSuperblock } from '../../server/store/layout.js';
import { writeEmptyRegionOfFormat } from '../helpers/region-file.js';
import { connect, startServer } from '../helpers/kv.js';
import { listenUrl, providersUnderTest, testTimeoutMs } from '../helpers/providers.js';

for (const scheme of providersUnderTest()) {
  for (const fromV1 of [false, true]) {
  test(`${scheme}: a version read before a restart does not match a value written after it (cas fails)${fromV1 ? ', on a region file without a session counter (v1)' : ''}`, async (t) => {
    const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-versions-')), 'region');
    const url = listenUrl(scheme);
    const first = await startServer(scheme, { listen: [url], regionFile });
    const before = await connect(first);
    await before.put('k', 'a');
    const seen = await before.getWithVersion('k');
    t.truthy(seen);
    await before.close();
    await first.close();
    if (fromV1) {
      // A v1 server left no next-session word: the restart must continue above its items' sessions.
      const file = await open(regionFile, 'r+');
      await file.write(Buffer.alloc(8), 0, 8, Superblock.NEXT_SESSION);
      await file.close();
    }

    // The same writes again, by the first client of the restarted server.
    const second = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
    t.teardown(() => second.close());
    const after = await connect(second);
    t.teardown(() => after.close());
    await after.put('k', 'b');
    const now = await after.getWithVersion('k');
    t.not(now!.version, seen!.version, 'the value written after the restart has a version of its own');
    t.false(await after.cas('k', seen!.version, 'c'), 'a cas with the version read before the restart fails');
    t.is((await after.get('k'))?.toString(), 'b');
  });
  }

  test(`${scheme}: versions of sessions of one server run never repeat either`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const versions = new Set<bigint>();
    for (let i = 0; i < 3; i++) {
      const kv = await connect(server);
      await kv.put('k', `v${i}`);
      versions.add((await kv.getWithVersion('k'))!.version);
      await kv.close();
    }
    t.is(versions.size, 3);
  });

  test(`${scheme}: repair's rewrite writes an item again as it is: same value, same version (a CAS on it still succeeds), same TTL; an absent key is not created`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const kv = await connect(server);
    t.teardown(() => kv.close());
    await kv.put('r', 'as it was', { ttlMs: 600_000 });
    const before = (await kv.getWithVersion('r'))!;
    const ttl = await kv.ttl('r');
    const access = kv.repairAccess();
    t.is(await access.rewrite('r'), 'as it was'.length);
    const after = (await kv.getWithVersion('r'))!;
    t.is(after.version, before.version, 'the version is kept');
    t.is(after.value.toString(), 'as it was');
    const left = await kv.ttl('r');
    t.true(left! <= ttl! && left! > ttl! - 60_000, `the TTL is kept (${ttl} then ${left} ms)`);
    t.true(await kv.cas('r', before.version, 'next'), 'a CAS on the version read before the rewrite still succeeds');
    t.false(await access.rewrite('absent'));
    t.is(await kv.get('absent'), undefined);
  });

  test(`${scheme}: a client of another protocol version is refused, and told both versions`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const provider = new Provider(scheme);
    t.teardown(() => provider.close());
    const cq = provider.createCq(16);
    const old = Buffer.alloc(34);
    old[0] = KvLayout.PROTOCOL_VERSION - 1;
    t.is(parseConnectData(old).version, KvLayout.PROTOCOL_VERSION - 1);
    const error = await provider.connect(server.urls[0]!, { cq, privateData: old }).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.true(error instanceof TransportError);
    t.deepEqual([...((error as TransportError).privateData ?? [])], [2, KvLayout.PROTOCOL_VERSION]);
    t.is(server.stats().rejectedConnections, 1);
    // And the client library says it in words.
    const kv = KvClient.connect({ url: server.urls[0]!, timeoutMs: testTimeoutMs() });
    await t.notThrowsAsync(async () => (await kv).close(), 'a client of this version connects');
  });

  test(`${scheme}: a client refused by a server of another protocol version says both versions`, async (t) => {
    // A server of the previous protocol, as far as the handshake goes: it refuses this client's
    // version and names its own in the reject, as accept.ts does.
    const older = KvLayout.PROTOCOL_VERSION - 1;
    const provider = new Provider(scheme);
    t.teardown(() => provider.close());
    const listener = provider.listen(listenUrl(scheme));
    t.teardown(() => listener.close());
    provider.on('connectRequest', (request) => {
      t.is(parseConnectData(request.privateData).version, KvLayout.PROTOCOL_VERSION);
      request.reject(Buffer.from([RejectReason.VERSION, older]));
    });
    const error = await t.throwsAsync(KvClient.connect({ url: listener.url, timeoutMs: testTimeoutMs() }));
    t.true(error instanceof KvProtocolError, String(error));
    t.regex(error!.message, new RegExp(`speaks protocol version ${older}, this client ${KvLayout.PROTOCOL_VERSION}`));
  });
}


test('a region file of another region format is refused at start, naming both formats', async (t) => {
  const scheme = providersUnderTest()[0]!;
  const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-format-')), 'region');
  const server = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  await server.close();
  const older = 2; // formats 3 and 4 are still read (the next test, and epochs.test.ts)
  const file = await open(regionFile, 'r+');
  const word = Buffer.alloc(8);
  word.writeBigUInt64LE(BigInt(older));
  await file.write(word, 0, 8, Superblock.VERSION);
  await file.close();
  const error = await t.throwsAsync(startServer(scheme, { listen: [listenUrl(scheme)], regionFile }));
  t.true(error instanceof KvConfigError, String(error));
  t.regex(error!.message, new RegExp(`holds region format ${older}; this kv-server reads region formats 3, 4 and ${KvLayout.REGION_FORMAT} only`));
});

test('a region file of format 3 (the release before the access table) is served with its data, and refused with --eviction', async (t) => {
  const scheme = providersUnderTest()[0]!;
  const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-format3-')), 'region');
  // What the release before the access table wrote: format 4's layout without an access table, marked format 3.
  const probe = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  const { layout } = probe.namespace('default');
  const seed = readSuperblock(probe.region).seed;
  await probe.close();
  writeEmptyRegionOfFormat(regionFile, layout, seed, 4);
  const first = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  const writer = await connect(first);
  await writer.put('kept', 'from format 3');
  await writer.close();
  await first.close();
  const file = await open(regionFile, 'r+');
  const word = Buffer.alloc(8);
  await file.read(word, 0, 8, Superblock.ACCESS_OFFSET);
  t.is(word.readBigUInt64LE(), 0n, 'no access table: the word format 3 never wrote');
  word.writeBigUInt64LE(3n);
  await file.write(word, 0, 8, Superblock.VERSION);
  await file.close();
  const second = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
  t.teardown(() => second.close());
  const reader = await connect(second);
  t.teardown(() => reader.close());
  t.is((await reader.get('kept'))?.toString(), 'from format 3');
  await second.close();
  const error = await t.throwsAsync(startServer(scheme, { listen: [listenUrl(scheme)], regionFile, eviction: 'lru' }));
  t.true(error instanceof KvConfigError, String(error));
});
