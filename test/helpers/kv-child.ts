// A client process for the KV suites, driven by argv, reporting over IPC.
//   model  URL PREFIX COUNT SEED    random put/get/delete on own keys vs a Map
//   write  URL WRITER KEYS MS       self-validating writes to hot keys
//   read   URL KEYS MS              reads hot keys, validates every value
//   incr   URL KEY COUNT            COUNT increments of one counter, 16 at a time
//   locked URL LOCK KEY COUNT       COUNT times: lock, get+put KEY + 1 (not atomic), unlock
//   hold   URL LOCK                 take the lock, report, and wait to be killed
//   puts   URL PREFIX COUNT BYTES   put PREFIX0..COUNT-1 (BYTES each), report, and wait to be killed
//   lin    URL PROCESS COUNT FILE   random get/put/delete/cas on 3 keys, history in FILE
//   churn  URL PROCESS ROLE KEYS MS FILE  for MS ms: ROLE w: random get/put/delete/cas on keys f0..KEYS-1 and
//                                   lock/unlock of the lock flock, r: gets, history in FILE; failed ops are
//                                   recorded and it goes on
//   linatomic URL PROCESS COUNT FILE random incr of one counter and lock/unlock of one lock, history in FILE
//   put    URL KEY VALUE            one put; reports { acked } or its error, then exits
//   paused URL KEY FILE             puts KEY = 'before' (history in FILE), reports { ready }; on the message 'go'
//                                   (sent after a 'stop' and a SIGCONT), a get, a put of 'after-pause' and a
//                                   get, reported as { read, put, readAfter }, then exits
//   del    URL KEY                  one delete; reports { deleted } or its error, then exits
//   putget URL KEY VALUE            a put, then a get of the key (its location cache's hit); reports
//                                   { value, locationCache } (its stats after the get), then exits
//   putgetinto URL KEY VALUE        the same with getInto a registered buffer
//   large  URL KEY BYTES MS         rewrites KEY from a registered buffer, every 4 KiB page stamped with the write's number
//   hammer URL WRITER KEYS          puts "WRITER:seq" into random keys k0..KEYS-1, 8 at a time, reporting each
//                                   acknowledged one ({ acked: [key, value] }), until killed
//   closing URL                     connects with a 10-minute timeout, reports { ready }; on the message 'again' starts a
//                                   connect while one may run (as a member's new registration does); on 'close' closes
//                                   and reports { closed: status }, then ends by itself (the test waits for its exit)
// URL may be etcd+http://HOST:PORT/PREFIX: the cluster registered under PREFIX in that etcd.
import { KvClient } from '../../client/index.js';
import { CHURN_LOCK, selfValidating, validate } from './values.js';
import { loadPollMode, slow, testTimeoutMs } from './providers.js';
import { rng } from './random.js';

const [mode, url, ...args] = process.argv.slice(2);
const send = (m: object): void => void process.send?.(m);

// Any mode: the message 'stop' makes the process SIGSTOP itself from the event loop, so it
// goes silent between two calls into the addon, never inside a post. (A SIGSTOP from outside
// can land inside a post on shm, and exact fencing then waits for the process to resume:
// test/kv/fencing.test.ts pauses a writer there on purpose.)
process.on('message', (m) => {
  if (m === 'stop') process.kill(process.pid, 'SIGSTOP');
  if (m === 'why') send({ why: whyAlive() });
});

/** The message 'why': what the process still holds (its client's internals read as a test may), for a child that does not exit. */
let client: KvClient | undefined;
/** What the process awaits now (churn: each op; any mode: the final close), for 'why'. */
let awaiting: { what: string; since: number } | undefined;
function whyAlive(): Record<string, unknown> {
  type Internals = { servers: Map<string, { url: string; status: string }>; hosts: { hosts: Map<string, Record<string, unknown> & { queue: { inflightCount: number } }> } };
  const kv = client as unknown as Internals | undefined;
  return {
    status: client?.status,
    awaiting: awaiting && `${awaiting.what} for ${Date.now() - awaiting.since} ms`,
    resources: process.getActiveResourcesInfo(),
    servers: kv ? [...kv.servers.values()].map((s) => `${s.url} ${s.status}`) : [],
    hosts: kv ? [...kv.hosts.hosts].map(([scheme, h]) => ({ scheme, links: h.attached, settingUp: h.settingUp, closing: h.closing, released: h.released, inflight: h.queue.inflightCount })) : [],
  };
}

async function main(): Promise<void> {
  const target = url!.startsWith('etcd+') ? { etcd: { hosts: new URL(url!.slice(5)).origin, prefix: new URL(url!.slice(5)).pathname } } : { url: url! };
  const history = mode === 'lin' || mode === 'linatomic' ? args[2] : mode === 'churn' ? args[4] : mode === 'paused' ? args[1] : undefined;
  const options = { ...target, timeoutMs: mode === 'closing' ? 600_000 : testTimeoutMs(), pollMode: loadPollMode() };
  const kv = await KvClient.connect(history ? { ...options, history } : options);
  client = kv;
  if (mode === 'model') {
    const [prefix, count, seed] = [args[0]!, Number(args[1]), Number(args[2])];
    const random = rng(seed);
    const model = new Map<string, Buffer>();
    const mismatches: string[] = [];
    let done = 0;
    while (done < count) {
      // Up to 16 ops at once, each on a different key, so the model's order holds.
      const batch = new Map<string, () => Promise<void>>();
      while (batch.size < 16 && done + batch.size < count) {
        const key = `${prefix}:${Math.floor(random() * 500)}`;
        if (batch.has(key)) continue;
        const dice = random();
        if (dice < 0.45) {
          const value = Buffer.alloc(Math.floor(random() * 3000), Math.floor(random() * 256));
          batch.set(key, async () => {
            await kv.put(key, value);
            model.set(key, value);
          });
        } else if (dice < 0.6) {
          batch.set(key, async () => {
            const existed = await kv.delete(key);
            if (existed !== model.has(key)) mismatches.push(`delete ${key}: store said ${existed}`);
            model.delete(key);
          });
        } else {
          batch.set(key, async () => {
            const got = await kv.get(key);
            const want = model.get(key);
            if ((got === undefined) !== (want === undefined) || (got && want && !got.equals(want))) {
              mismatches.push(`get ${key}: ${got?.length ?? 'missing'} bytes, model ${want?.length ?? 'missing'}`);
            }
          });
        }
      }
      await Promise.all([...batch.values()].map((op) => op()));
      done += batch.size;
    }
    // Finally every key of the model, and nothing else of ours, is in the store.
    for (let i = 0; i < 500; i++) {
      const key = `${prefix}:${i}`;
      const got = await kv.get(key);
      const want = model.get(key);
      if ((got === undefined) !== (want === undefined) || (got && want && !got.equals(want))) mismatches.push(`final ${key}`);
    }
    send({ done, mismatches: mismatches.slice(0, 20), mismatchCount: mismatches.length });
  } else if (mode === 'write' || mode === 'read') {
    const writer = mode === 'write' ? Number(args[0]) : 0;
    const keys = Number(mode === 'write' ? args[1] : args[0]);
    const ms = Number(mode === 'write' ? args[2] : args[1]);
    const random = rng(writer * 7919 + 17);
    const end = Date.now() + ms;
    let ops = 0;
    let seq = 0;
    const bad: string[] = [];
    while (Date.now() < end) {
      const batch = Array.from({ length: 8 }, () => `hot:${Math.floor(random() * keys)}`);
      if (mode === 'write') {
        // Hot keys, plus one key of our own whose acknowledgement we report:
        // whatever kills us, an acknowledged PUT must survive.
        const own = `own:${writer}:${seq}`;
        const ownValue = selfValidating(writer, seq, 64);
        await Promise.all([
          ...batch.map((key) => kv.put(key, selfValidating(writer, ++seq, 12 + Math.floor(random() * 2000)))),
          kv.put(own, ownValue).then(() => send({ acked: own })),
        ]);
      } else {
        const values = await kv.getMany(batch);
        for (const value of values) {
          if (value === undefined) continue;
          const check = validate(value);
          if (typeof check === 'string') bad.push(check);
        }
      }
      ops += batch.length;
    }
    send({ ops, bad: bad.slice(0, 10), badCount: bad.length });
  } else if (mode === 'incr') {
    const [key, count] = [args[0]!, Number(args[1])];
    let done = 0;
    while (done < count) {
      const n = Math.min(16, count - done);
      await Promise.all(Array.from({ length: n }, () => kv.incr(key)));
      done += n;
    }
    send({ done });
  } else if (mode === 'locked') {
    const [name, key, count] = [args[0]!, args[1]!, Number(args[2])];
    const seen: Array<[number, string]> = []; // (value read inside the lock, token)
    for (let i = 0; i < count; i++) {
      const lock = await kv.lock(name, { timeoutMs: slow(30_000) });
      const value = Number((await kv.get(key))?.toString() ?? '0');
      await kv.put(key, String(value + 1));
      seen.push([value, lock.token.toString()]);
      await lock.release();
    }
    send({ seen });
  } else if (mode === 'lin') {
    const [proc, count] = [Number(args[0]), Number(args[1])];
    const random = rng(proc * 31 + 7);
    for (let i = 0; i < count; i++) {
      const key = `lin-${Math.floor(random() * 3)}`;
      const dice = random();
      const value = `p${proc}-${i}`; // unique per write
      if (dice < 0.35) await kv.get(key);
      else if (dice < 0.65) await kv.put(key, value);
      else if (dice < 0.75) await kv.delete(key);
      else {
        const seen = await kv.getWithVersion(key);
        await kv.cas(key, seen?.version ?? 0n, value);
      }
    }
    send({ done: count });
  } else if (mode === 'churn') {
    const [proc, role, keys, ms] = [Number(args[0]), args[1]!, Number(args[2]), Number(args[3])];
    const random = rng(proc * 131 + 11);
    const end = Date.now() + ms;
    const failures: Record<string, number> = {};
    let ok = 0;
    // Failures are in the history (fail events); the checker decides what they may mean.
    const FAILED = Symbol('failed');
    const attempt = <T>(op: Promise<T>, what: string): Promise<T | typeof FAILED> => {
      awaiting = { what, since: Date.now() };
      return op.then(
        (r) => {
          ok++;
          return r;
        },
        (error: { code?: string }) => {
          if (!error.code) throw error;
          failures[error.code] = (failures[error.code] ?? 0) + 1;
          return FAILED;
        },
      );
    };
    for (let i = 0; Date.now() < end; i++) {
      const key = `f${Math.floor(random() * keys)}`;
      const dice = role === 'r' ? 0 : random();
      const value = `p${proc}-${i}`;
      if (dice < 0.3) await attempt(kv.get(key), `get ${key}`);
      else if (dice < 0.7) await attempt(kv.put(key, value), `put ${key}`);
      else if (dice < 0.8) await attempt(kv.delete(key), `delete ${key}`);
      else if (dice < 0.9) {
        const seen = await attempt(kv.getWithVersion(key), `getWithVersion ${key}`);
        if (seen !== FAILED) await attempt(kv.cas(key, seen?.version ?? 0n, value), `cas ${key}`);
      } else {
        const lock = await attempt(kv.lock(CHURN_LOCK, { timeoutMs: 300 }), 'lock');
        if (lock !== FAILED) await attempt(lock.release(), 'unlock');
      }
      awaiting = { what: 'the 2 ms pause', since: Date.now() };
      await new Promise((resolve) => setTimeout(resolve, 2)); // bounded histories: about 300 ops/s per process
    }
    send({ ok, failures });
  } else if (mode === 'linatomic') {
    const [proc, count] = [Number(args[0]), Number(args[1])];
    const random = rng(proc * 17 + 3);
    let held: { release: () => Promise<void> } | undefined;
    for (let i = 0; i < count; i++) {
      const dice = random();
      // Reads (incr 0), increments, and now and then a decrement (counters wrap modulo 2^63).
      if (dice < 0.5) await kv.incr('lin-ctr', dice < 0.15 ? 0 : dice < 0.2 ? -3 : 1 + Math.floor(random() * 4));
      else if (held) {
        await held.release();
        held = undefined;
      }
      else held = await kv.lock('lin-lock', { timeoutMs: 5 }).catch((e: { code?: string }) => (e.code === 'KV_LOCK_CONTENDED' ? undefined : Promise.reject(e)));
    }
    await held?.release();
    send({ done: count });
  } else if (mode === 'puts') {
    const [prefix, count, bytes] = [args[0]!, Number(args[1]), Number(args[2])];
    await Promise.all(Array.from({ length: count }, (_, i) => kv.put(`${prefix}${i}`, Buffer.alloc(bytes, i))));
    send({ done: count });
    setInterval(() => {}, 1 << 30); // holding its unused granted blocks, as a crashed client would
    return;
  } else if (mode === 'paused') {
    const key = args[0]!;
    await kv.put(key, 'before');
    const go = new Promise<void>((resolve) => process.on('message', (m) => m === 'go' && resolve()));
    send({ ready: true });
    await go;
    const failed = (error: { code?: string }) => `error ${error.code}`;
    const get = () => kv.get(key).then((v) => (v === undefined ? 'missing' : String(v)), failed);
    const read = await get();
    const put = await kv.put(key, 'after-pause').then(() => 'ok', failed);
    const readAfter = await get();
    send({ read, put, readAfter });
  } else if (mode === 'put') {
    const [key, value] = [args[0]!, args[1]!];
    const outcome = await kv.put(key, value).then(() => ({ acked: true }), (error: Error) => ({ acked: false, failed: error.name }));
    send(outcome);
  } else if (mode === 'putget' || mode === 'putgetinto') {
    const [key, value] = [args[0]!, args[1]!];
    await kv.put(key, value);
    let read: Buffer | undefined;
    if (mode === 'putget') {
      read = await kv.get(key);
    } else {
      const buffer = kv.allocBuffer(64 << 10);
      const length = await kv.getInto(key, buffer);
      read = length === undefined ? undefined : buffer.subarray(0, length);
    }
    send({ value: read?.toString(), locationCache: kv.stats().locationCache });
  } else if (mode === 'hammer') {
    const [writer, keys] = [Number(args[0]), Number(args[1])];
    const random = rng(writer + 1);
    send({ ready: true });
    for (let seq = 0; ; ) {
      await Promise.all(Array.from({ length: 8 }, async () => {
        const key = `k${Math.floor(random() * keys)}`;
        const value = `${writer}:${seq++}`;
        await kv.put(key, value);
        send({ acked: [key, value] });
      }));
    }
  } else if (mode === 'del') {
    send(await kv.delete(args[0]!).then((deleted) => ({ deleted }), (error: Error) => ({ failed: error.name })));
  } else if (mode === 'large') {
    const [key, bytes, ms] = [args[0]!, Number(args[1]), Number(args[2])];
    const value = kv.allocBuffer(bytes);
    const end = Date.now() + ms;
    let writes = 0;
    while (Date.now() < end) {
      writes++;
      for (let at = 0; at < bytes; at += 4096) value.writeUInt32LE(writes, at);
      await kv.put(key, value);
      // Each rewrite retires a block for the grace period: at most ~200 rewrites a second
      // keep the retired ones well inside the heap (a 3 MiB value, 200 ms: ~40 blocks).
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    send({ writes });
  } else if (mode === 'closing') {
    const close = new Promise<void>((resolve) => process.on('message', (m) => m === 'close' && resolve()));
    const servers = (kv as unknown as { servers: Map<string, { reconnectNow(): void }> }).servers; // KvClient's own (private)
    process.on('message', (m) => m === 'again' && [...servers.values()].forEach((server) => server.reconnectNow()));
    send({ ready: true });
    await close;
    await kv.close();
    send({ closed: kv.status });
    return;
  } else if (mode === 'hold') {
    const lock = await kv.lock(args[0]!);
    send({ token: lock.token.toString() });
    setInterval(() => {}, 1 << 30);
    return;
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  awaiting = { what: 'close()', since: Date.now() };
  await kv.close();
}

// A failed child exits at once: its client may still hold timers (keepalive,
// reconnects) that would keep it, and the test worker waiting on it, alive.
main().catch((error: Error) => {
  if (process.send) process.send({ error: `${error.name}: ${error.message}` }, () => process.exit(1));
  else process.exit(1);
});
// Nobody to report to: the test is over (or its worker was killed). The
// listener would hold the channel, and so the process, open: unref it.
process.on('disconnect', () => process.exit(1));
process.channel?.unref();
