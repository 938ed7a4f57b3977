// A session's pools of granted blocks (client/block-pools.ts): the next grant is asked for
// while a batch is still in hand, so a PUT does not wait for a grant's answer (which waits
// out the server's CQ moderation); one request per size class at a time; a batch of one
// (large values) is asked for as the last block is taken.
import test from 'ava';

import { BlockPools } from '../../client/block-pools.js';
import { type ControlMessage, GRANT_BATCH, grantBatch } from '../../protocol/control.js';
import { KvLayout } from '../../protocol/constants.js';

const HEAP = 1 << 30;
const SMALL = 16; // units: 1 KiB blocks
const LARGE = 16_384; // units: 1 MiB blocks, a grant of one

function pools() {
  const sent: ControlMessage[] = [];
  const p = new BlockPools([SMALL, LARGE], HEAP, (m) => void sent.push(m));
  return { p, sent, grants: () => sent.filter((m) => m.t === 'grant') };
}

test('a grant is a batch of up to GRANT_BATCH blocks, asked for again while a batch is still in hand', (t) => {
  const { p, grants } = pools();
  const batch = grantBatch(SMALL * KvLayout.UNIT_BYTES, HEAP);
  t.is(batch, GRANT_BATCH);
  t.is(p.take(0), undefined); // nothing yet: the first grant is asked for
  t.deepEqual(grants(), [{ t: 'grant', c: 0, n: batch }]);
  p.take(0);
  t.is(grants().length, 1, 'one request at a time');
  t.true(p.granted({ t: 'granted', c: 0, blocks: Array.from({ length: batch }, (_, i) => i * SMALL) }));
  t.false(p.awaitingGrants);
  // Once less than a batch is left, the next is asked for: not when the pool runs dry.
  t.not(p.take(0), undefined);
  t.false(p.awaitingGrants);
  t.not(p.take(0), undefined);
  t.true(p.awaitingGrants);
  t.is(grants().length, 2);
  for (let i = 0; i < batch / 2; i++) t.not(p.take(0), undefined);
  t.is(grants().length, 2, 'still one request at a time');
});

test('a size class whose grant is one block asks for the next as its last block is taken, never holding two spares', (t) => {
  const { p, grants } = pools();
  t.is(grantBatch(LARGE * KvLayout.UNIT_BYTES, HEAP), 1);
  t.is(p.take(1), undefined);
  t.is(grants().length, 1);
  t.true(p.granted({ t: 'granted', c: 1, blocks: [0] }));
  t.is(p.take(1), 0);
  t.deepEqual(grants()[1], { t: 'grant', c: 1, n: 1 }, 'the next block is on its way while this one is written');
  t.true(p.granted({ t: 'granted', c: 1, blocks: [16_384] }));
  t.false(p.awaitingGrants, 'one spare block in hand: nothing more is asked for');
  t.is(grants().length, 2);
  t.is(p.take(1), 16_384);
  t.is(grants().length, 3);
});

test('blocks are used oldest grant first: a grant that arrives while blocks are left goes beneath them', (t) => {
  const { p } = pools();
  const batch = grantBatch(SMALL * KvLayout.UNIT_BYTES, HEAP);
  const first = Array.from({ length: batch }, (_, i) => i * SMALL);
  const second = Array.from({ length: batch }, (_, i) => (batch + i) * SMALL);
  t.is(p.take(0), undefined);
  p.granted({ t: 'granted', c: 0, blocks: first });
  const used = [p.take(0)!, p.take(0)!];
  p.granted({ t: 'granted', c: 0, blocks: second }); // asked for by the second take
  for (let i = 2; i < 2 * batch; i++) used.push(p.take(0)!);
  t.deepEqual(used.slice(0, batch).sort((a, b) => a - b), first, 'every block of the first grant before any of the second');
  t.deepEqual(used.slice(batch).sort((a, b) => a - b), second);
});
