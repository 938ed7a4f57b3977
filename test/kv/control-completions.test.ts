// The session's control SENDs go out through a fixed set of send buffers
// (protocol/send-buffers.ts): a buffer is written again only once its SEND
// completed, and Session.received() hears of that completion. The client
// core hands those completions back with its op results, so the op queue
// must pass every one of them on (ServerClient's onControl), whatever call
// into the core drained them: a submit's, a poll's, or an event's. Were one
// dropped, its buffer would never come back, and after 32 such messages the
// control channel (grants, returns, keepalive) would stall for good.
import test from 'ava';

import type { KvClient } from '../../client/index.js';
import type { ControlMessage, Pong } from '../../protocol/control.js';
import { connect, startServer } from '../helpers/kv.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';

/** What the test reaches into: the one server's session (not a public API). */
interface SessionInside {
  sendControl(message: ControlMessage): void;
  pong(message: Pong): void;
  readonly sendBuffers: { readonly count: number; readonly waiting: number };
}

function sessionOf(kv: KvClient): SessionInside {
  const servers = (kv as unknown as { servers: Map<string, { session: SessionInside }> }).servers;
  return [...servers.values()][0]!.session;
}

/** Counts the pongs the session hears. */
function countPongs(session: SessionInside): { count: number } {
  const pongs = { count: 0 };
  const pong = session.pong.bind(session);
  session.pong = (message) => {
    pongs.count++;
    pong(message);
  };
  return pongs;
}

const PINGS = 200;

for (const scheme of providersUnderTest()) {
  for (const pollMode of ['busy', 'event'] as const) {
    test(`${scheme}, ${pollMode} mode: a burst of control messages several times the send buffers goes out whole while GETs run`, async (t) => {
      const server = await startServer(scheme, { keepaliveMs: 600_000 }); // no keepalive polls: the GETs' calls must do it
      t.teardown(() => server.close());
      const kv = await connect(server, { pollMode });
      t.teardown(() => kv.close());
      await kv.put('k', 'v');
      const session = sessionOf(kv);
      const pongs = countPongs(session);
      for (let i = 0; i < PINGS; i++) session.sendControl({ t: 'ping' });
      t.true(session.sendBuffers.waiting >= PINGS - session.sendBuffers.count, 'more messages than buffers: some wait');
      await eventually(async () => {
        t.is((await kv.get('k'))?.toString(), 'v');
        return pongs.count === PINGS;
      }, `${PINGS} pongs (${pongs.count} so far, ${session.sendBuffers.waiting} pings waiting for a buffer)`);
      t.is(session.sendBuffers.waiting, 0);
      // And the channel still works for what the data path needs: grants for new PUTs.
      await kv.putMany(Array.from({ length: 500 }, (_, i): [string, Buffer] => [`p${i}`, Buffer.alloc(1 + (i % 5) * 700, i)]));
      t.is((await kv.get('p499'))?.length, 1 + 4 * 700);
    });
  }

  test(`${scheme}, event mode: an idle client's control completions wake it (no op in flight, no keepalive)`, async (t) => {
    const server = await startServer(scheme, { keepaliveMs: 600_000 });
    t.teardown(() => server.close());
    const kv = await connect(server, { pollMode: 'event' });
    t.teardown(() => kv.close());
    await kv.put('k', 'v');
    await new Promise((resolve) => setTimeout(resolve, 20)); // idle: the CQ armed
    const session = sessionOf(kv);
    const pongs = countPongs(session);
    for (let i = 0; i < PINGS; i++) session.sendControl({ t: 'ping' });
    await eventually(() => pongs.count === PINGS, `${PINGS} pongs with no op issued (${pongs.count} so far, ${session.sendBuffers.waiting} pings waiting)`);
    t.is(session.sendBuffers.waiting, 0);
  });
}
