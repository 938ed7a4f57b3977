// A departed client's blocks are taken back (server/recovery/held-blocks.ts),
// but not one that has gone on to another client since. Such a block was
// published by the departed client without a notice (it died between its slot
// WRITE and its record), superseded by another client's PUT of the same key
// (whose notice retired it), freed after the grace period and granted again.
// The departed client's record of it is stale: taking it back would free a
// block another client holds, and two PUTs would then write their items into
// the same block (the first one's key no longer reads).
//
// Reached on purpose, in order: the departed client's notice is forgotten by
// the server (as failures.test.ts does), a second client's PUT supersedes the
// item, and a third client's next grant takes the freed block (a grant hands
// out the freed blocks of its class first) before the first client leaves.
// Before the fix, its departure retired the block the third client held: a
// fourth client was granted it too, and the key it wrote there read back as
// missing once the third client wrote its own item into the block.
import { Buffer } from 'node:buffer';

import test from 'ava';

import type { KvClient } from '../../client/index.js';
import type { ClientTable, Client } from '../../server/sessions/clients.js';
import type { Departures } from '../../server/recovery/departures.js';
import type { RegionStore } from '../../server/store/region.js';
import { connect, startServer } from '../helpers/kv.js';
import { findSlotIn, slotOfKeyIn } from '../helpers/region-file.js';
import { eventually, providersUnderTest } from '../helpers/providers.js';

const VALUE_BYTES = 20 << 10; // grants of a few dozen blocks: the test's client reaches P within a few rounds

/** The server's main namespace: what this test reaches into (not a public API). */
interface Namespace {
  clients: ClientTable;
  store: RegionStore;
  departures: Departures;
}

function valueOf(tag: string): Buffer {
  const v = Buffer.alloc(VALUE_BYTES, tag);
  v.write(tag, 0);
  return v;
}

for (const scheme of providersUnderTest()) {
  test.serial(`${scheme}: a departed client's block that was published without a notice, superseded, freed and granted again is not taken back from its new holder`, async (t) => {
    const server = await startServer(scheme);
    t.teardown(() => server.close());
    const ns = (server as unknown as { main: Namespace }).main;
    const { heap } = ns.store;
    const known = new Set<Client>();
    const connectSide = async (): Promise<[KvClient, Client]> => {
      const kv = await connect(server);
      t.teardown(() => kv.close());
      const side = [...ns.clients.values()].find((c) => !known.has(c))!;
      known.add(side);
      return [kv, side];
    };

    // 1. D publishes K's item in block P; the server then forgets D's notice, so P counts as D's, unpublished.
    const [d, dSide] = await connectSide();
    await d.put('K', valueOf('d'));
    const P = slotOfKeyIn(server.region, 'K').block;
    await eventually(() => !dSide.held.has(P), "D's notice is drained");
    const cls = heap.classes.findIndex((units) => units >= slotOfKeyIn(server.region, 'K').units); // the smallest that fits
    t.true(cls >= 0 && heap.isGranted(cls, P));
    dSide.held.set(P, cls);

    // 2. G takes its first blocks of the class while P is still out.
    const [g, gSide] = await connectSide();
    await g.put('g0', valueOf('g0'));

    // 3. L's PUT of K supersedes P; its notice retires P, free after the grace period.
    const [l] = await connectSide();
    await l.put('K', valueOf('l'));
    await eventually(() => !heap.isGranted(cls, P), 'P is retired by L\'s notice');
    await eventually(() => heap.stats().waitingForGrace === 0, 'the grace period passes');

    // 4. G's next grant of the class (asked for ahead of need) hands out the freed blocks first: P.
    await g.put('g1', valueOf('g1'));
    await eventually(() => gSide.held.has(P), 'G holds P, unused');
    t.true(heap.isGranted(cls, P));

    // 5. D leaves; its departure takes back what it held.
    await d.close();
    await eventually(() => !ns.clients.has(dSide), 'D is gone');
    await ns.departures.settled();
    t.true(gSide.held.has(P), 'G still holds P');
    t.true(heap.isGranted(cls, P), "D's departure left P granted: G holds it");

    // 6. What a second holder of P would do: H's first block of the class (a freed one first), then
    //    G's PUTs until one lands in P (G's pool hands its blocks out in the order they were granted).
    await eventually(() => heap.stats().waitingForGrace === 0, 'the grace period passes again');
    const [h] = await connectSide();
    await h.put('h0', valueOf('h0'));
    const written: string[] = ['g0', 'g1', 'h0'];
    for (let round = 0; round < 40 && !written.some((key) => findSlotIn(server.region, key)?.block === P && key.startsWith('g')); round++) {
      const keys = Array.from({ length: 4 }, (_, i) => `g${2 + 4 * round + i}`);
      await Promise.all(keys.map((key) => g.put(key, valueOf(key))));
      written.push(...keys);
    }
    t.true(written.some((key) => key.startsWith('g') && findSlotIn(server.region, key)?.block === P), 'G wrote an item into P');
    t.true((await h.get('K'))?.equals(valueOf('l')), 'K reads back what L wrote');
    for (const key of written) t.true((await h.get(key))?.equals(valueOf(key)), `${key} reads back what was written`);
  });
}
