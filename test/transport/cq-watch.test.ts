// CompletionQueue.watch: the event loop of the watching thread polls the CQ's event fd
// (native/binding/transport_binding.cc, CqWatcher). Moderated, as the server watches its CQ:
// an event calls back at once; while the callback finds completions it is called again by a
// timer, not by events (the CQ stays unarmed); a callback that finds none has the CQ armed and
// is called once more; then nothing until the next completion.
import { spawnSync } from 'node:child_process';

import test from 'ava';

import { Opcode } from '../../native/index.js';
import { type Pair, connectPair } from '../helpers/pair.js';
import { providersUnderTest, slow } from '../helpers/providers.js';

const addon = new URL('../../native/index.js', import.meta.url).href;

interface Call {
  at: number;
  found: number;
}

/** A SEND of 8 bytes from the client to the server (one RECV completion there). */
function send(p: Pair, wrId: number): void {
  p.clientConn.postSend([{ wrId, opcode: Opcode.SEND, flags: 0, local: p.scratch, length: 8 }]);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: moderated watch: completions that arrive while it is busy are taken by its timer, and when a pass finds none it arms and goes quiet`, async (t) => {
    const p = await connectPair(scheme, { serverRecvs: 64, recvBytes: 64 });
    t.teardown(() => p.close());
    const moderationUs = 50_000;
    const calls: Call[] = [];
    let burst = true;
    let done!: () => void;
    const quiet = new Promise<void>((resolve) => (done = resolve));
    p.serverCq.watch(() => {
      const found = p.serverCq.pollRaw();
      calls.push({ at: performance.now(), found });
      if (burst) {
        burst = false;
        for (let i = 0; i < 20; i++) send(p, 100 + i); // arrive while busy: no event may call back for them
      }
      if (found === 0 && calls.length >= 2 && calls.at(-2)!.found === 0) done();
      return found;
    }, moderationUs);
    t.teardown(() => p.serverCq.unwatch());
    p.serverCq.arm();
    send(p, 1);
    await quiet;
    t.is(calls.reduce((sum, c) => sum + c.found, 0), 21, 'every completion was taken');
    t.is(calls[0]!.found, 1, 'the event called back at once');
    // Every call after one that found something is the timer's: at least moderationUs later.
    for (let i = 1; i < calls.length; i++) {
      if (calls[i - 1]!.found > 0) t.true(calls[i]!.at - calls[i - 1]!.at >= moderationUs / 1000 - 1, `call ${i} came ${calls[i]!.at - calls[i - 1]!.at} ms after a busy one`);
    }
    t.deepEqual(calls.slice(-2).map((c) => c.found), [0, 0], 'a pass that finds none, then one more after arming');
    // Armed and quiet: nothing calls back until the next completion, which does at once.
    const before = calls.length;
    await sleep(slow(100));
    t.is(calls.length, before, 'no call while nothing arrives');
    send(p, 2);
    const deadline = Date.now() + slow(10_000);
    while (calls.length === before && Date.now() < deadline) await sleep(1);
    t.is(calls[before]?.found, 1, 'a completion after a quiet spell calls back (an event)');
  });

  test(`${scheme}: moderated watch: a callback that returns no count (or a negative one) found nothing: the CQ is armed and the next completion calls back`, async (t) => {
    const p = await connectPair(scheme, { serverRecvs: 8, recvBytes: 64 });
    t.teardown(() => p.close());
    const returns: unknown[] = [-1, undefined, 'many'];
    let taken = 0;
    let calls = 0;
    p.serverCq.watch(() => {
      taken += p.serverCq.pollRaw();
      return returns[calls++ % returns.length] as number;
    }, 1000);
    t.teardown(() => p.serverCq.unwatch());
    p.serverCq.arm();
    for (let sent = 1; sent <= 3; sent++) {
      send(p, sent);
      const deadline = Date.now() + slow(10_000);
      while (taken < sent && Date.now() < deadline) await sleep(1);
      t.is(taken, sent, `completion ${sent} called back`);
    }
  });

  test(`${scheme}: unwatch() from inside the callback: it is not called again`, async (t) => {
    const p = await connectPair(scheme, { serverRecvs: 8, recvBytes: 64 });
    t.teardown(() => p.close());
    let calls = 0;
    p.serverCq.watch(() => {
      calls++;
      const found = p.serverCq.pollRaw();
      p.serverCq.unwatch();
      return found;
    }, 1000);
    p.serverCq.arm();
    send(p, 1);
    const deadline = Date.now() + slow(10_000);
    while (calls === 0 && Date.now() < deadline) await sleep(1);
    t.is(calls, 1);
    p.serverCq.arm();
    send(p, 2);
    await sleep(slow(100));
    t.is(calls, 1, 'neither its timer nor a new event called back');
    p.serverCq.watch(() => 0); // and the CQ can be watched again
    p.serverCq.unwatch();
  });

  for (const moderationUs of [0, 1000]) {
    test(`${scheme}: ${moderationUs ? 'moderated' : 'plain'} watch: when its event fd fails (POLLERR), a timer polls the CQ instead: every completion still calls back, and the failure is told once`, async (t) => {
      const p = await connectPair(scheme, { serverRecvs: 64, recvBytes: 64 });
      t.teardown(() => p.close());
      let taken = 0;
      const failures: string[] = [];
      p.serverCq.watch(
        () => {
          const found = p.serverCq.pollRaw();
          taken += found;
          if (!moderationUs) p.serverCq.arm(); // as the client's callback does
          return found;
        },
        moderationUs,
        (reason) => failures.push(reason),
      );
      t.teardown(() => p.serverCq.unwatch());
      p.serverCq.arm();
      send(p, 1);
      const until = async (n: number): Promise<void> => {
        const deadline = Date.now() + slow(10_000);
        while (taken < n && Date.now() < deadline) await sleep(1);
      };
      await until(1);
      t.is(taken, 1, 'called back by its event');
      // What libuv does on POLLERR: stops polling the fd, calls back with UV_EBADF. The fd's
      // events are gone from then on (an event now would not call back).
      p.serverCq.native.failEventsForTest();
      t.is(failures.length, 1);
      t.regex(failures[0]!, /event fd failed \(bad file descriptor\): polling the CQ every 1000 µs instead/);
      for (let i = 0; i < 20; i++) send(p, 100 + i);
      await until(21);
      t.is(taken, 21, 'every completion after the failure was taken');
      // Long enough for the old behaviour's moderation timer to have found nothing twice and stopped
      // (it armed the CQ, whose events no longer call back): a completion now is the fallback's to take.
      await sleep(slow(20));
      send(p, 200); // later, alone: the timer still ticks
      await until(22);
      t.is(taken, 22);
      t.is(failures.length, 1, 'told once');
    });
  }
}

test('shm: a watch callback that throws reaches process "uncaughtException", and the next event still calls back', (t) => {
  const script = `import { Provider, Opcode } from '${addon}';
    import { connectPair } from '${new URL('../helpers/pair.js', import.meta.url).href}';
    const p = await connectPair('shm', { serverRecvs: 8, recvBytes: 64 });
    let calls = 0;
    process.on('uncaughtException', (error) => {
      console.log('caught ' + error.message);
      p.serverCq.arm();
      p.clientConn.postSend([{ wrId: 2, opcode: Opcode.SEND, flags: 0, local: p.scratch, length: 8 }]);
    });
    p.serverCq.watch(() => {
      calls++;
      const found = p.serverCq.pollRaw();
      if (calls === 1) throw new Error('from the callback');
      if (found > 0) { console.log('called again'); p.serverCq.unwatch(); p.close(); }
      return 0;
    });
    p.serverCq.arm();
    p.clientConn.postSend([{ wrId: 1, opcode: Opcode.SEND, flags: 0, local: p.scratch, length: 8 }]);`;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', env: { ...process.env, RKV_QUIET: '1' }, timeout: 60_000 });
  t.deepEqual(run.stdout.trim().split('\n'), ['caught from the callback', 'called again'], run.stderr);
  t.is(run.status, 0, run.stderr);
});
