// The heap's and the grants' u32 -> u32 table (server/store/unit-table.ts) against a Map:
// the same answers through growth, deletes that shift probe runs back, keys that collide,
// and keys a client's message may carry that are not unit offsets at all.
import test from 'ava';

import { UnitTable } from '../../server/store/unit-table.js';

/** A deterministic generator. */
function random(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return x / 2 ** 32;
  };
}

function same(t: import('ava').ExecutionContext, table: UnitTable, model: Map<number, number>): void {
  t.is(table.size, model.size);
  const entries = table.entries();
  t.is(entries.length, model.size);
  t.is(entries.filter(([key, value]) => model.get(key) !== value).length, 0);
}

for (const [name, range] of [
  ['a few keys (long probe runs, many collisions)', 300],
  ['keys spread over 2^32', 2 ** 32 - 1],
] as const) {
  test(`random sets and deletes answer as a Map does: ${name}`, (t) => {
    const table = new UnitTable();
    const model = new Map<number, number>();
    const next = random(range);
    let wrong = 0; // answers that differ from the Map's (counted: an assertion per step is slow)
    for (let step = 0; step < 200_000; step++) {
      const key = Math.floor(next() * range);
      const r = next();
      if (r < 0.5) {
        const value = Math.floor(next() * 2 ** 32);
        table.set(key, value);
        model.set(key, value);
      } else if (r < 0.9) {
        if (table.delete(key) !== model.delete(key)) wrong++;
      } else if (table.get(key) !== model.get(key) || table.has(key) !== model.has(key)) {
        wrong++;
      }
      if (step % 20_000 === 0) same(t, table, model);
    }
    same(t, table, model);
    for (const key of model.keys()) if (table.get(key) !== model.get(key)) wrong++;
    for (const key of [...model.keys()]) {
      if (!table.delete(key)) wrong++;
      model.delete(key);
    }
    t.is(wrong, 0);
    same(t, table, model);
  });
}

test('keys that are not u32 unit offsets are never found, never deleted, and refused by set', (t) => {
  const table = new UnitTable();
  table.set(5, 1);
  table.set(0, 2);
  for (const bad of [-5, 5.5, 2 ** 32, 2 ** 32 - 1, Number.NaN, Infinity, '5' as unknown as number, undefined as unknown as number, null as unknown as number]) {
    t.is(table.get(bad), undefined);
    t.false(table.has(bad));
    t.false(table.delete(bad));
    t.throws(() => table.set(bad, 1), { instanceOf: RangeError });
  }
  t.is(table.get(5), 1);
  t.is(table.get(0), 2);
  t.is(table.size, 2);
});

test('clear empties it; entries() is a copy the table may change under', (t) => {
  const table = new UnitTable();
  for (let k = 0; k < 1000; k++) table.set(k * 64, k);
  const entries = table.entries();
  for (const [key] of entries) table.delete(key);
  t.is(entries.length, 1000);
  t.is(table.size, 0);
  for (let k = 0; k < 10; k++) table.set(k, k);
  table.clear();
  t.is(table.size, 0);
  t.is(table.get(3), undefined);
  table.set(3, 4);
  t.is(table.get(3), 4);
});
