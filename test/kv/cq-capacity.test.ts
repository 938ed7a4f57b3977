// The namespace's completion queue is deep enough for every client it admits: each client can
// have CQ_ENTRIES_PER_CLIENT completions outstanding while the server does not poll (its posted
// receive buffers fill with notices and control messages, its send buffers' SENDs complete), and
// an overrun CQ loses every client of the namespace (a real HCA) or completions (rxe). A device
// whose CQs cannot hold --max-clients' worth admits only as many as fit, refusing the rest as FULL.
import test from 'ava';

import { type KvClient } from '../../client/index.js';
import { Provider } from '../../native/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { CQ_ENTRIES_PER_CLIENT, CQ_MARGIN, RECVS_PER_CLIENT, SEND_BUFFERS, clientsFitting, cqEntriesFor } from '../../server/fabric.js';
import { connect, serverLog, startServer } from '../helpers/kv.js';

// The shm provider plays such a device through its test hook (read when a provider is made;
// this file runs in a process of its own). 1300: room for 4 clients (4 × 304 + 64), and above a
// client's own CQ (1024, client/session.ts).
const MAX_CQE = 1300;
process.env.RKV_SHM_TEST_MAX_CQE = String(MAX_CQE);

test('a client may have every receive buffer and every send buffer complete at once: the CQ is sized for all of them', (t) => {
  t.is(CQ_ENTRIES_PER_CLIENT, RECVS_PER_CLIENT + SEND_BUFFERS);
  t.true(RECVS_PER_CLIENT >= KvLayout.RING_RECORDS, 'a full notice ring needs a receive buffer per record');
  t.is(cqEntriesFor(256), 256 * 304 + CQ_MARGIN);
  t.is(clientsFitting(256, 1 << 20), 256);
  // rdma_rxe's max_cqe (RXE_MAX_CQE, 2^15 - 1): the default --max-clients does not fit one CQ.
  t.is(clientsFitting(256, 32767), Math.floor((32767 - CQ_MARGIN) / 304));
  t.true(cqEntriesFor(clientsFitting(256, 32767)) <= 32767);
  t.is(clientsFitting(4, 100), 0);
});

test('shm reports its deepest CQ as deviceInfo.maxCqe and refuses a deeper one', (t) => {
  const provider = new Provider('shm');
  t.teardown(() => provider.close());
  t.is(provider.deviceInfo.maxCqe, MAX_CQE);
  t.notThrows(() => provider.createCq(MAX_CQE));
  t.throws(() => provider.createCq(MAX_CQE + 1), { message: /between 1 and 1300/ });
});

test('shm: a device whose CQ holds 4 clients\' completions admits 4 of --max-clients 6, refuses the 5th as FULL, and admits another once one left', async (t) => {
  const admits = clientsFitting(6, MAX_CQE);
  t.is(admits, 4);
  const server = await startServer('shm', { maxClients: 6 });
  t.teardown(() => server.close());
  t.true(serverLog(server).some((line) => line.includes('4 of --max-clients 6 can connect')), serverLog(server).join('\n'));
  const clients: KvClient[] = [];
  t.teardown(() => Promise.all(clients.map((kv) => kv.close())));
  for (let i = 0; i < admits; i++) clients.push(await connect(server));
  await t.throwsAsync(connect(server), { message: /no free client ring/ });
  t.true(serverLog(server).some((line) => line.includes('as many as shm\'s completion queue can serve')), serverLog(server).join('\n'));
  // Every admitted client works: a full notice ring each, while the server drains on its own schedule.
  await Promise.all(clients.map(async (kv, c) => {
    for (let i = 0; i < KvLayout.RING_RECORDS; i++) await kv.put(`c${c}-${i}`, `v${i}`);
  }));
  for (let c = 0; c < clients.length; c++) t.is((await clients[c]!.get(`c${c}-${KvLayout.RING_RECORDS - 1}`))?.toString(), `v${KvLayout.RING_RECORDS - 1}`);
  // The server returns the ring once it has released the client's locks: then there is room again.
  const departed = new Promise((resolve) => server.once('clientDisconnected', resolve));
  await clients.pop()!.close();
  await departed;
  const another = await connect(server);
  clients.push(another);
  t.is((await another.get('c0-0'))?.toString(), 'v0');
});
