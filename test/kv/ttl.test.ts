// TTLs (docs/protocol.md, "Expiry"): put and putMany with a TTL, expire,
// persist, ttl; an expired key reads as missing on every read path (the two
// round trips, the location cache's one READ, getMany, getWithVersion, getInto
// and the large-value path), and writes treat it as absent. Expiry is absolute
// time, so a server restarted on its region file keeps it. No test depends on
// wall-clock luck: a TTL is either 1 ms and waited out (20 ms), or an hour or more.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import { type KvClient, KvError, MAX_TTL_MS } from '../../client/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { listenUrl, providersUnderTest } from '../helpers/providers.js';

const HOUR = 3_600_000;
const expired = () => new Promise((r) => setTimeout(r, 20)); // a 1 ms TTL is past after this
/** ttl()'s answer for a TTL of `ms` set just now: at most `ms`, and not less by more than the test's own time. */
const near = (left: number | undefined, ms: number) => left !== undefined && left <= ms && left > ms - 60_000;

async function pair(scheme: Parameters<typeof startServer>[0], t: { teardown: (f: () => unknown) => void }): Promise<[KvClient, KvClient]> {
  const server = await startServer(scheme);
  t.teardown(() => server.close());
  const writer = await connect(server);
  t.teardown(() => writer.close());
  const reader = await connect(server); // its location cache knows nothing: GETs take the two round trips
  t.teardown(() => reader.close());
  return [writer, reader];
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: TTLs from 1 ms to 100 years: ttl() tells what is left, an expired key is gone`, async (t) => {
    const [kv] = await pair(scheme, t);
    const ttls = [1000, 60_000, HOUR, 30 * 24 * HOUR, MAX_TTL_MS];
    for (const ms of ttls) await kv.put(`k${ms}`, `v${ms}`, { ttlMs: ms });
    for (const ms of ttls) t.true(near(await kv.ttl(`k${ms}`), ms), `ttl of k${ms}: ${await kv.ttl(`k${ms}`)}`);
    await kv.put('never', 'v');
    t.is(await kv.ttl('never'), Infinity);
    t.is(await kv.ttl('missing'), undefined);
    await kv.put('short', 'v', { ttlMs: 1 });
    await expired();
    t.is(await kv.ttl('short'), undefined);
    t.is(await kv.get('short'), undefined);
    t.is((await kv.get(`k${HOUR}`))?.toString(), `v${HOUR}`);
  });

  test(`${scheme}: an expired key misses on every read path`, async (t) => {
    const [writer, reader] = await pair(scheme, t);
    const buffer = writer.allocBuffer(4096);
    t.teardown(() => writer.freeBuffer(buffer));
    await writer.putMany([['gone', 'x', { ttlMs: 1 }], ['live', 'y', { ttlMs: HOUR }], ['plain', 'z']]);
    await expired();
    for (const kv of [writer, reader]) {
      // writer: its PUT filled its location cache, so this GET is the one-READ hit.
      const hits = kv.stats().locationCache.hits;
      t.is(await kv.get('gone'), undefined);
      if (kv === writer) t.is(kv.stats().locationCache.hits, hits + 1, 'answered by the cached read');
      t.is(await kv.getWithVersion('gone'), undefined);
      t.deepEqual((await kv.getMany(['gone', 'live', 'plain'])).map((v) => v?.toString()), [undefined, 'y', 'z']);
      t.is(await kv.getInto('gone', buffer), undefined, 'registered buffer: the two-piece read');
      t.is(await kv.getInto('gone', Buffer.alloc(16)), undefined);
      t.is(await kv.getInto('live', buffer), 1);
    }
  });

  test(`${scheme}: a large value expires too (the bounce-buffer path)`, async (t) => {
    const server = await startServer(scheme, { maxValueBytes: 8 << 20 });
    t.teardown(() => server.close());
    const kv = await connect(server, { scratchBytes: 4 << 20 }); // items up to 1 MiB in scratch
    t.teardown(() => kv.close());
    const value = Buffer.alloc(3 << 20, 7);
    await kv.put('big', value, { ttlMs: HOUR });
    t.true(near(await kv.ttl('big'), HOUR));
    t.true(await kv.persist('big'));
    t.is(await kv.ttl('big'), Infinity);
    t.true((await kv.get('big'))?.equals(value));
    t.true(await kv.expire('big', 1));
    await expired();
    t.is(await kv.get('big'), undefined);
    t.is(await kv.ttl('big'), undefined);
  });

  test(`${scheme}: expire and persist rewrite the TTL and keep the value`, async (t) => {
    const [kv, other] = await pair(scheme, t);
    await kv.put('k', 'value');
    const before = await kv.getWithVersion('k');
    t.true(await kv.expire('k', HOUR));
    t.true(near(await other.ttl('k'), HOUR));
    const after = await other.getWithVersion('k');
    t.is(after?.value.toString(), 'value');
    t.not(after?.version, before?.version, 'a new item: the expiry is under the checksum');
    t.true(await kv.persist('k'));
    t.is(await other.ttl('k'), Infinity);
    t.false(await kv.persist('k'), 'no TTL to remove');
    t.false(await kv.expire('missing', HOUR));
    t.false(await kv.persist('missing'));
    t.true(await kv.expire('k', 1));
    await expired();
    t.is(await other.get('k'), undefined);
    t.false(await kv.expire('k', HOUR), 'an expired key cannot be given a TTL: it does not exist');
  });

  test(`${scheme}: writes treat an expired key as absent`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    // The version each put wrote, from the history: a 1 ms TTL leaves no time to read it.
    const versions = new Map<string, bigint>();
    const expiries: string[] = [];
    const kv = await connect(server, {
      history: (e) => {
        if (e.type === 'ok' && e.f === 'put') versions.set(e.key, BigInt(e.version!));
        if (e.type === 'invoke' && e.expiry) expiries.push(e.expiry);
      },
    });
    t.teardown(() => kv.close());
    const start = Date.now();
    for (const key of ['d', 'c0', 'cv', 'n', 'l', 'p']) await kv.put(key, 'old', { ttlMs: 1 });
    const old = { version: versions.get('cv')! };
    t.truthy(old.version);
    t.is(expiries.length, 6, 'the history records each put\'s expiry');
    t.true(expiries.every((e) => Number(e) >= start + 1 && Number(e) <= Date.now() + 1));
    await expired();
    t.false(await kv.delete('d'), 'delete of an expired key: false (and it unlinks the item)');
    t.is(await kv.get('d'), undefined);
    t.true(await kv.cas('c0', 0n, 'new'), 'cas "only if absent" succeeds over an expired item');
    t.is((await kv.get('c0'))?.toString(), 'new');
    t.false(await kv.cas('cv', old!.version, 'new'), 'cas on the expired version fails: the key is absent');
    t.is(await kv.get('cv'), undefined);
    t.is(await kv.incr('n', 5), 5n, 'incr creates its counter over an expired value');
    const lock = await kv.lock('l');
    t.is(lock.token, 1n, 'lock creates its lock item over an expired value');
    await lock.release();
    await kv.put('p', 'fresh');
    t.is(await kv.ttl('p'), Infinity, 'a put without a TTL replaces the expired item, without one');
  });

  test(`${scheme}: counters and locks never expire: expire, persist and ttl on one are KV_TYPE_MISMATCH`, async (t) => {
    const [kv] = await pair(scheme, t);
    await kv.incr('n', 1);
    const held = await kv.lock('l');
    for (const key of ['n', 'l']) {
      for (const call of [() => kv.expire(key, HOUR), () => kv.persist(key), () => kv.ttl(key)]) {
        const error = await t.throwsAsync(call());
        t.is((error as KvError).code, 'KV_TYPE_MISMATCH');
      }
    }
    await held.release();
    t.is(await kv.incr('n', 1), 2n);
  });

  test(`${scheme}: bad TTLs and options reject with KV_INVALID_ARGUMENT, nothing written`, async (t) => {
    const [kv] = await pair(scheme, t);
    const bad: unknown[] = [-1, 0, NaN, 1.5, Infinity, MAX_TTL_MS + 1, 2 ** 64, '100', 100n, null];
    for (const ttlMs of bad) {
      for (const call of [
        () => kv.put('k', 'v', { ttlMs: ttlMs as number }),
        () => kv.expire('k', ttlMs as number),
        () => kv.putMany([['k', 'v', { ttlMs: ttlMs as number }]]),
      ]) {
        let promise: Promise<unknown> | undefined;
        t.notThrows(() => void (promise = call()), 'rejects, never throws');
        const error = await t.throwsAsync(promise!);
        t.true(error instanceof KvError && error.code === 'KV_INVALID_ARGUMENT', `${String(ttlMs)}: ${String(error)}`);
      }
    }
    const options: unknown[] = [null, 5, 'ttl', [1], { ttl: 5 }, { ttlMs: 5, extra: 1 }];
    for (const o of options) {
      const error = await t.throwsAsync(kv.put('k', 'v', o as { ttlMs: number }));
      t.is((error as KvError).code, 'KV_INVALID_ARGUMENT', String(error));
    }
    t.regex((await t.throwsAsync(kv.put('k', 'v', { ttl: 5 } as unknown as { ttlMs: number })))!.message, /did you mean 'ttlMs'/);
    const entry = await t.throwsAsync(kv.putMany([['k', 'v', { ttlMs: 5 }, 'more'] as unknown as [string, string]]));
    t.is((entry as KvError).code, 'KV_INVALID_ARGUMENT');
    t.is(await kv.get('k'), undefined);
    await kv.put('k', 'v', {}); // empty options, and ttlMs: undefined, are no TTL
    await kv.put('k2', 'v', { ttlMs: undefined });
    t.is(await kv.ttl('k'), Infinity);
    t.is(await kv.ttl('k2'), Infinity);
  });

  test(`${scheme}: a server restarted on its region file keeps TTLs (absolute time)`, async (t) => {
    const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-ttl-')), 'region');
    const first = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
    const before = await connect(first);
    await before.put('hour', 'h', { ttlMs: HOUR });
    await before.put('short', 's', { ttlMs: 1 });
    await before.put('never', 'n');
    const setAt = Date.now();
    await before.close();
    await first.close();
    await expired();
    const second = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
    t.teardown(() => second.close());
    const after = await connect(second);
    t.teardown(() => after.close());
    const left = await after.ttl('hour');
    t.true(left !== undefined && left <= HOUR - (Date.now() - setAt) + 1 && left > HOUR - 60_000, `ttl after restart: ${left}`);
    t.is((await after.get('hour'))?.toString(), 'h');
    t.is(await after.get('short'), undefined);
    t.is(await after.ttl('never'), Infinity);
  });
}
