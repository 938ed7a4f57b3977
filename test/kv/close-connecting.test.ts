// KvClient.close() while one of its connects is in progress: a reconnect's
// attempt that a server takes in and never answers. close() gives the attempt
// up (an AbortSignal down to the provider's connect), so nothing of the
// client holds the process open. Before, the attempt ran on until its own
// timeout: a test process in the Soft-RoCE guest did not exit after its test
// (docs/softroce-vm.md, "Replicated clusters in the guest"). Two connects can
// be in progress at once (a member's new registration starts one while a
// reconnect's still runs): close() gives up both.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';

import test, { type ExecutionContext } from 'ava';
import { pino } from 'pino';

import { type ConnectionRequest } from '../../native/connection.js';
import { Provider } from '../../native/provider.js';
import { forkKvChild, startServer } from '../helpers/kv.js';
import { type Scheme, eventually, listenUrl, providersUnderTest, slow } from '../helpers/providers.js';

/** A kv-child in mode 'closing' connected to `url`: its messages, and its exit code once it exits. */
async function closingChild(t: ExecutionContext, url: string) {
  const child = forkKvChild(t, ['closing', url]);
  const reports: Array<Record<string, unknown>> = [];
  child.on('message', (m: Record<string, unknown>) => reports.push(m));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  await eventually(() => reports.some((m) => m.ready), 'the child connected');
  return { child, reports, exited };
}

/**
 * A child's client loses its server; at its address a listener takes connect requests in and never
 * answers them. Once `attempts` of the child's connects are held there, the child closes its client:
 * its process must exit (each connect's timeout is 10 minutes).
 */
async function closeWhileConnecting(t: ExecutionContext, scheme: Scheme, attempts: number): Promise<void> {
  const server = await startServer(scheme);
  const url = server.urls[0]!;
  const { child, reports, exited } = await closingChild(t, url);

  await server.close();
  const provider = new Provider(scheme);
  const held: ConnectionRequest[] = [];
  provider.on('connectRequest', (request) => held.push(request));
  const listener = provider.listen(url);
  t.teardown(() => {
    listener.close();
    provider.close();
  });
  await eventually(() => held.length > 0, "one of the child's reconnect attempts reached the listener");
  for (let n = 1; n < attempts; n++) {
    child.send('again'); // another connect while the held one still runs (reconnectNow, as a member's new registration calls it)
    await eventually(() => held.length > n, `connect ${n + 1} reached the listener too`);
  }

  child.send('close');
  const guardMs = slow(30_000); // a guard: without the fix the child lives for the connects' 10 minutes
  const outcome = await Promise.race([exited.then((code) => ({ code })), new Promise((resolve) => setTimeout(() => resolve(`still running after ${guardMs} ms`), guardMs).unref())]);
  t.deepEqual(outcome, { code: 0 }, 'the child exits once its client is closed');
  t.true(reports.some((m) => m.closed === 'closed'));
}

/**
 * A child's client loses its server, which restarts on its region file at the same address and holds connect
 * requests while it recovers. Two of the child's connects are held there (the second started by reconnectNow, as a
 * member's new registration calls it); recovery ends and both are answered. The link keeps one session and closes
 * the other: closed, the client lets its process exit, and the server has no client left.
 */
async function bothAnswered(t: ExecutionContext, scheme: Scheme): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-twice-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'region');
  const first = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile: file });
  const url = first.urls[0]!;
  const { child, reports, exited } = await closingChild(t, url);
  await first.close();

  let held = 0;
  const sink = new Writable({
    write(chunk, _encoding, done) {
      held += String(chunk).split('connection request held"').length - 1;
      done();
    },
  });
  let openGate!: () => void;
  const gate = new Promise<void>((resolve) => (openGate = resolve));
  const starting = startServer(scheme, { listen: [url], regionFile: file, logger: pino({ level: 'debug' }, sink), beforeRecovery: () => gate });
  t.teardown(() => (openGate(), starting.then((server) => server.close())));
  await eventually(() => held >= 1, 'a reconnect attempt is held by the recovering server');
  child.send('again');
  await eventually(() => held >= 2, 'a second attempt, started while the first ran, is held too');
  openGate();
  const server = await starting;
  // Both were served; the link closed the one that came second (before: it kept both, the first unused for good).
  await eventually(() => server.stats().fencedClients === 1 && server.stats().clients === 1, 'the surplus session closed, one kept');
  t.is(reports.filter((m) => 'closed' in m).length, 0, 'the child still runs');

  child.send('close');
  const guardMs = slow(30_000); // a guard: a session left open keeps the child alive (its keepalive pings on)
  const outcome = await Promise.race([exited.then((code) => ({ code })), new Promise((resolve) => setTimeout(() => resolve(`still running after ${guardMs} ms`), guardMs).unref())]);
  t.deepEqual(outcome, { code: 0 }, 'the child exits once its client is closed');
  await eventually(() => server.stats().clients === 0, 'the server has no client left');
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: two connects in progress both answered: the link keeps one session and closes the other`, (t) => bothAnswered(t, scheme));

  test(`${scheme}: close() gives up a connect in progress: the client's process exits, not after the connect's 10-minute timeout`, (t) => closeWhileConnecting(t, scheme, 1));

  test(`${scheme}: close() gives up every connect in progress, also one started while another ran`, (t) => closeWhileConnecting(t, scheme, 2));
}
