/**
 * Counters that YCSB shares between all client threads of a run (the load key sequence, the
 * transaction insert key sequence, the sequential key chooser). kv-bench threads are
 * worker_threads, so the state lives in a SharedArrayBuffer and is updated with Atomics.
 */
import type { NumberGenerator } from './number-generator.js';

/** One 64-bit counter cell in shared memory (a slot of a BigInt64Array). */
export interface SharedCell {
  readonly cells: BigInt64Array;
  readonly index: number;
}

export function newSharedCell(initial = 0): SharedCell {
  const cells = new BigInt64Array(new SharedArrayBuffer(8));
  cells[0] = BigInt(initial);
  return { cells, index: 0 };
}

/** YCSB's CounterGenerator: getAndIncrement on a shared counter. */
export class CounterGenerator implements NumberGenerator {
  constructor(protected readonly counter: SharedCell) {}

  /** Initialises a fresh shared cell for `new CounterGenerator(countstart)`. */
  static initialState(countStart: number): SharedCell {
    return newSharedCell(countStart);
  }

  nextValue(): number {
    return Number(Atomics.add(this.counter.cells, this.counter.index, 1n));
  }

  lastValue(): number {
    return Number(Atomics.load(this.counter.cells, this.counter.index)) - 1;
  }

  mean(): number {
    throw new Error("Can't compute mean of non-stationary distribution!");
  }
}

/** Slots in YCSB's acknowledgement window (2^20). */
export const ACK_WINDOW_SIZE = 1 << 20;
const ACK_WINDOW_MASK = ACK_WINDOW_SIZE - 1;

/** Shared state of an AcknowledgedCounterGenerator. */
export interface AcknowledgedCounterState {
  readonly counter: SharedCell;
  /** [limit] */
  readonly limit: BigInt64Array;
  /** [lock] 0 = free, 1 = held */
  readonly lock: Int32Array;
  /** one byte per window slot: 1 = acknowledged but not yet folded into limit */
  readonly window: Uint8Array;
}

/**
 * YCSB's AcknowledgedCounterGenerator: hands out insert keys, but lastValue() only advances over
 * a contiguous run of acknowledged (completed) inserts, so readers never pick a key whose
 * insert is still in flight.
 */
export class AcknowledgedCounterGenerator extends CounterGenerator {
  constructor(private readonly state: AcknowledgedCounterState) {
    super(state.counter);
  }

  static newState(countStart: number): AcknowledgedCounterState {
    const limit = new BigInt64Array(new SharedArrayBuffer(8));
    limit[0] = BigInt(countStart - 1);
    return {
      counter: newSharedCell(countStart),
      limit,
      lock: new Int32Array(new SharedArrayBuffer(4)),
      window: new Uint8Array(new SharedArrayBuffer(ACK_WINDOW_SIZE)),
    };
  }

  override lastValue(): number {
    return Number(Atomics.load(this.state.limit, 0));
  }

  acknowledge(value: number): void {
    const { window, lock, limit } = this.state;
    const currentSlot = value % ACK_WINDOW_SIZE;
    if (Atomics.load(window, currentSlot) !== 0) throw new Error('Too many unacknowledged insertion keys.');
    Atomics.store(window, currentSlot, 1);
    if (Atomics.compareExchange(lock, 0, 0, 1) !== 0) return; // tryLock failed: the holder will fold us in
    try {
      const current = Number(Atomics.load(limit, 0));
      // As in YCSB, the loop bound compares an index with a slot number; the scan really ends at
      // the first unacknowledged slot.
      const beforeFirstSlot = current & ACK_WINDOW_MASK;
      let index: number;
      for (index = current + 1; index !== beforeFirstSlot; ++index) {
        const slot = index % ACK_WINDOW_SIZE;
        if (Atomics.load(window, slot) === 0) break;
        Atomics.store(window, slot, 0);
      }
      Atomics.store(limit, 0, BigInt(index - 1));
    } finally {
      Atomics.store(lock, 0, 0);
    }
  }
}

/** YCSB's SequentialGenerator: countstart + (shared counter++ % interval). */
export class SequentialGenerator implements NumberGenerator {
  private readonly interval: number;
  private last: number;

  constructor(private readonly counter: SharedCell, private readonly countStart: number, countEnd: number) {
    this.interval = countEnd - countStart + 1;
    this.last = Number(Atomics.load(counter.cells, counter.index));
  }

  nextValue(): number {
    const ret = this.countStart + (Number(Atomics.add(this.counter.cells, this.counter.index, 1n)) % this.interval);
    this.last = ret;
    return ret;
  }

  /** YCSB returns counter + 1 here, not the last value handed out; kept for fidelity. */
  lastValue(): number {
    return Number(Atomics.load(this.counter.cells, this.counter.index)) + 1;
  }

  get lastReturned(): number {
    return this.last;
  }

  mean(): number {
    throw new Error("Can't compute mean of non-stationary distribution!");
  }
}
