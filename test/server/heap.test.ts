// The heap allocator on its own, with a clock the test moves: blocks never overlap, freed
// memory merges back into one extent, and forged or repeated retires are refused.
import test from 'ava';

import { sizeClasses } from '../../protocol/size-classes.js';
import { Heap } from '../../server/store/heap.js';

const classes = sizeClasses(16401); // the default --max-value's classes
const GRACE = 10;

function heapWithClock(units: number) {
  const clock = { now: 0 };
  return { heap: new Heap(units, classes, GRACE, () => clock.now), clock };
}

/** A deterministic generator. */
function random(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0; // imul: a plain product loses its low bits past 2^53
    return x / 2 ** 32;
  };
}

test('random grants, retires and returns: no two blocks overlap, and once all is freed the heap is one free extent again', (t) => {
  const units = 200_000;
  const { heap, clock } = heapWithClock(units);
  const ownerOf = new Int32Array(units).fill(-1); // which block covers each unit
  const out: Array<{ cls: number; block: number }> = [];
  const next = random(7);
  const release = (i: number) => {
    const { cls, block } = out[i]!;
    out[i] = out[out.length - 1]!;
    out.pop();
    ownerOf.fill(-1, block, block + classes[cls]!);
  };
  for (let step = 0; step < 100_000; step++) {
    const action = next();
    if (action < 0.5) {
      const cls = Math.floor(next() ** 3 * classes.length); // small classes more often
      for (const block of heap.grant(cls, 1 + Math.floor(next() * 8))) {
        for (let u = block; u < block + classes[cls]!; u++) {
          if (ownerOf[u] !== -1) return t.fail(`step ${step}: block ${block} overlaps block ${ownerOf[u]} at unit ${u}`);
          ownerOf[u] = block;
        }
        out.push({ cls, block });
      }
    } else if (action < 0.8 && out.length > 0) {
      const i = Math.floor(next() * out.length);
      const { cls, block } = out[i]!;
      if (!heap.retire(cls, block)) return t.fail(`step ${step}: retiring granted block ${block} was refused`);
      if (heap.retire(cls, block)) return t.fail(`step ${step}: block ${block} was retired twice`);
      release(i);
    } else if (action < 0.9 && out.length > 0) {
      const i = Math.floor(next() * out.length);
      if (!heap.giveBack(out[i]!.cls, out[i]!.block)) return t.fail(`step ${step}: giving back a granted block was refused`);
      release(i);
    } else {
      clock.now += GRACE / 2;
      heap.reclaim();
    }
  }
  while (out.length > 0) {
    t.true(heap.giveBack(out[0]!.cls, out[0]!.block));
    release(0);
  }
  clock.now += GRACE;
  heap.reclaim();
  heap.merge(); // the recycled blocks too
  const stats = heap.stats();
  t.is(stats.usedBytes, 0);
  t.is(stats.waitingForGrace, 0);
  t.is(stats.freeBlocks, 1, 'every freed block merged with its neighbours');
  t.deepEqual(heap.grant(classes.length - 1, units), Array.from({ length: Math.floor(units / classes.at(-1)!) }, (_, i) => i * classes.at(-1)!), 'the largest blocks fill the heap from its start');
});

test('a block freed by one size class serves another once its grace period has passed', (t) => {
  const largest = classes.length - 1;
  const { heap, clock } = heapWithClock(classes[largest]!);
  const [block] = heap.grant(largest, 1);
  t.is(block, 0);
  t.deepEqual(heap.grant(0, 1), [], 'the heap is full');
  t.true(heap.retire(largest, block!));
  clock.now += GRACE - 1;
  heap.reclaim();
  t.deepEqual(heap.grant(0, 1), [], 'not before the grace period has passed');
  clock.now += 1;
  heap.reclaim();
  t.is(heap.grant(0, 64).length, 64, 'then as 1-unit blocks');
  t.is(heap.grant(2, 64).length, 64, 'and 3-unit blocks');
});

test('retires and returns are refused unless the block is out and of exactly that class', (t) => {
  const { heap } = heapWithClock(10_000);
  const [a, b] = heap.grant(3, 2); // 4 units each, side by side
  t.is(b, a! + 4);
  t.false(heap.retire(4, a!), 'a larger class would take in its neighbour');
  t.false(heap.retire(2, a!), 'a smaller class would leave a piece nobody owns');
  t.false(heap.retire(3, a! + 1), 'not where a block starts');
  t.false(heap.retire(3, 5_000), 'never granted');
  t.false(heap.retire(-1, a!));
  t.false(heap.retire(3, 1.5));
  t.true(heap.retire(3, a!));
  t.false(heap.retire(3, a!), 'already retired');
  t.false(heap.giveBack(3, a!), 'retired, so not out');
  t.true(heap.giveBack(3, b!));
  t.false(heap.giveBack(3, b!), 'already given back');
});

test('rebuild: live blocks stay taken, the gaps become free extents, and slots that overlap or run past the heap are left out', (t) => {
  const units = 100_000;
  const { heap } = heapWithClock(units);
  heap.rebuild([
    { block: 10, units: 3 },
    { block: 100, units: 16_401 },
    { block: 5, units: 2 },
    { block: 11, units: 1 }, // inside the block at 10
    { block: units - 1, units: 5 }, // past the end
  ]);
  const stats = heap.stats();
  t.is(stats.usedBytes, (3 + 16_401 + 2) * 64);
  t.is(stats.freeBlocks, 4, '[0, 5), [7, 10), [13, 100) and the rest');
  t.true(heap.retire(heap.classOfUnits(3), 10));
  t.false(heap.retire(heap.classOfUnits(1), 11), 'the overlapping slot was never taken');
  t.false(heap.retire(heap.classOfUnits(5), units - 1));
  t.deepEqual(heap.grant(0, 7), [7, 8, 9, 0, 1, 2, 3], 'the gaps, the smallest extent that fits first');
});

test('a freed block is recycled for the next grant of its class; a grant that finds no free extent merges the recycled blocks and looks again', (t) => {
  const { heap, clock } = heapWithClock(100_000);
  const [a, b] = heap.grant(3, 2); // 4 units each, side by side at the heap's start
  t.deepEqual([a, b], [0, 4]);
  t.true(heap.retire(3, a!));
  t.true(heap.retire(3, b!));
  clock.now += GRACE;
  heap.reclaim();
  t.deepEqual(heap.grant(3, 1), [4], 'the block freed last, not the front of a merged extent');
  t.deepEqual(heap.grant(3, 2), [0, 8], 'then the other, then a cut from the free extent');

  // A full heap of 4-unit blocks: two side by side come back, and a 7-unit grant gets them merged.
  const small = heapWithClock(512); // recycles up to 512 / 4 = 128 units unmerged
  t.is(small.heap.grant(3, 200).length, 128, 'the heap is full');
  t.true(small.heap.retire(3, 0));
  t.true(small.heap.retire(3, 4));
  small.clock.now += GRACE;
  small.heap.reclaim();
  t.is(small.heap.stats().freeBlocks, 2, 'recycled, not merged');
  t.deepEqual(small.heap.grant(5, 1), [0], 'merged into [0, 8) for a class no recycled block is of');
  t.deepEqual(small.heap.grant(0, 2), [7], 'and the unit left over');
});
