// Restart on a damaged region file: a slot recovery cannot trust (its block
// past the heap, zero or oversized units, an item header that does not match
// it, a block overlapping another item) is skipped, cleared, counted and logged
// once; the server starts and every other key reads back.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';

import test, { type ExecutionContext } from 'ava';
import { pino } from 'pino';

import type { KvError } from '../../client/index.js';
import { KvLayout } from '../../protocol/constants.js';
import { connect, startServer } from '../helpers/kv.js';
import { type Scheme, providersUnderTest } from '../helpers/providers.js';
import { type SlotOfKey, makeSlot, readAt, slotOfKey, superblockOf, writeAt, writeU64At } from '../helpers/region-file.js';

const GOOD = 200;
const goodValue = (i: number) => `value ${i} `.repeat(1 + (i % 30));
const BIG = 'x'.repeat(600); // 10 units: a block another slot can point into

/** A region file holding GOOD keys, 'big' and 'victim', written by a server that is gone again. */
async function writeRegion(scheme: Scheme): Promise<string> {
  const file = join(mkdtempSync(join(tmpdir(), 'rkv-corrupt-')), 'region');
  const server = await startServer(scheme, { regionFile: file });
  const kv = await connect(server);
  for (let i = 0; i < GOOD; i++) await kv.put(`good-${i}`, goodValue(i));
  await kv.put('big', BIG);
  await kv.put('victim', 'the value a damaged slot points to');
  await kv.close();
  await server.close();
  return file;
}

async function restartAndCheck(t: ExecutionContext, scheme: Scheme, file: string, damage: (victim: SlotOfKey) => void, bigMayBeCorrupt = false) {
  damage(slotOfKey(file, 'victim'));
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const server = await startServer(scheme, { regionFile: file, logger: pino({ level: 'info' }, sink) });
  t.teardown(() => server.close());
  t.is(server.stats().recoveredSlotsSkipped, 1);
  t.is(server.stats().items, GOOD + 1);
  const skipped = lines.filter((l) => l.msg === 'recovery skipped slots it cannot trust');
  t.is(skipped.length, 1);
  t.is(skipped[0]?.slots, 1);
  t.log(`skipped: ${JSON.stringify(skipped[0]?.reasons)}`);
  const kv = await connect(server);
  t.teardown(() => kv.close());
  for (let i = 0; i < GOOD; i++) t.is((await kv.get(`good-${i}`))?.toString(), goodValue(i), `good-${i}`);
  if (bigMayBeCorrupt) {
    const big = await kv.get('big').catch((error: KvError) => error.code);
    t.true(big === 'KV_CORRUPT' || big?.toString() === BIG, String(big));
  } else {
    t.is((await kv.get('big'))?.toString(), BIG);
  }
  t.is(await kv.get('victim'), undefined); // the untrusted slot was cleared
  // The key can be written again, and the heap hands out no block that holds a live item.
  await kv.put('victim', 'written again');
  for (let i = 0; i < 300; i++) await kv.put(`new-${i}`, `new value ${i}`);
  t.is((await kv.get('victim'))?.toString(), 'written again');
  for (let i = 0; i < GOOD; i++) t.is((await kv.get(`good-${i}`))?.toString(), goodValue(i), `good-${i} after new writes`);
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a slot whose block lies past the heap is skipped at restart`, async (t) => {
    const file = await writeRegion(scheme);
    const heapUnits = superblockOf(file).heapBytes / 64;
    await restartAndCheck(t, scheme, file, (v) => writeU64At(file, v.slotAt, makeSlot(Number(v.slot >> 48n), v.units, heapUnits + 1000)));
  });

  test(`${scheme}: a slot of zero units is skipped at restart`, async (t) => {
    const file = await writeRegion(scheme);
    await restartAndCheck(t, scheme, file, (v) => writeU64At(file, v.slotAt, makeSlot(Number(v.slot >> 48n), 0, v.block)));
  });

  test(`${scheme}: a slot of 0xffff units is skipped at restart`, async (t) => {
    const file = await writeRegion(scheme);
    await restartAndCheck(t, scheme, file, (v) => writeU64At(file, v.slotAt, makeSlot(Number(v.slot >> 48n), 0xffff, v.block)));
  });

  test(`${scheme}: a slot whose item header is garbage is skipped at restart`, async (t) => {
    const file = await writeRegion(scheme);
    await restartAndCheck(t, scheme, file, (v) => writeAt(file, v.itemAt, Buffer.alloc(KvLayout.ITEM_HEADER_BYTES, 0xff)));
  });

  test(`${scheme}: a slot whose item holds another key is skipped at restart`, async (t) => {
    const file = await writeRegion(scheme);
    await restartAndCheck(t, scheme, file, (v) => writeAt(file, v.itemAt + KvLayout.ITEM_HEADER_BYTES, Buffer.from('V'))); // 'victim' -> 'Victim'
  });

  test(`${scheme}: a slot whose block overlaps another item is skipped at restart`, async (t) => {
    const file = await writeRegion(scheme);
    await restartAndCheck(
      t,
      scheme,
      file,
      (v) => {
        // The victim's item, copied whole into the last units of 'big': a valid-looking item inside another.
        const big = slotOfKey(file, 'big');
        const inside = big.block + big.units - v.units;
        writeAt(file, big.itemAt + (big.units - v.units) * 64, readAt(file, v.itemAt, v.units * 64));
        writeU64At(file, v.slotAt, makeSlot(Number(v.slot >> 48n), v.units, inside));
      },
      true,
    );
  });
}
