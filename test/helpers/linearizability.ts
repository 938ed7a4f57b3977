// A linearizability checker: the Wing & Gong backtracking search with Lowe's
// cache of visited (linearized set, state) pairs, run per key (a history is
// linearizable iff each key's sub-history is: P-compositionality).
// Indeterminate operations (timed out, or cut off after they were sent) are
// handled as Porcupine does: their return is at +infinity and any output is
// accepted, so each may take effect at any point after its call, or never.
// No well-kept npm library does this for arbitrary models, so the standard
// algorithm lives here, with tests of its own that it rejects bad histories
// (test/checker/). The models are in linearizability-models.ts, the reading of
// client histories in history-operations.ts.

/** The output of an indeterminate operation, as a model's step sees it: any output is accepted. */
export const UNKNOWN: unique symbol = Symbol('unknown output');
export type Unknown = typeof UNKNOWN;

/** One operation: `ret` undefined means indeterminate (no output: it may or may not have taken effect). */
export type Operation<I, O> = { call: bigint; input: I } & ({ ret: bigint; output: O } | { ret: undefined });

export interface Model<S, I, O> {
  init: S;
  /**
   * Whether `input` may give `output` in `state`, and the state after. With
   * UNKNOWN the operation takes effect with whatever output `state` gives;
   * false there: it cannot take effect in `state`. (Not taking effect at all
   * is the checker's choice, not the model's.)
   */
  step(state: S, input: I, output: O | Unknown): [boolean, S];
  key(state: S): string;
}

interface Entry {
  op: number;
  isCall: boolean;
  time: bigint | undefined; // undefined: +infinity (an indeterminate operation's return)
  match?: Entry; // a call's return
  prev?: Entry;
  next?: Entry;
}

/** By time; +infinity last; at a tie a call comes first (the two overlap). */
function compareEntries(a: Entry, b: Entry): number {
  if (a.time !== b.time) {
    if (a.time === undefined) return 1;
    if (b.time === undefined) return -1;
    return a.time < b.time ? -1 : 1;
  }
  return a.isCall === b.isCall ? 0 : a.isCall ? -1 : 1;
}

export function isLinearizable<S, I, O>(ops: Array<Operation<I, O>>, model: Model<S, I, O>): boolean {
  const entries: Entry[] = [];
  ops.forEach((op, i) => {
    const call: Entry = { op: i, isCall: true, time: op.call };
    const ret: Entry = { op: i, isCall: false, time: op.ret };
    call.match = ret;
    entries.push(call, ret);
  });
  entries.sort(compareEntries);
  const head: Entry = { op: -1, isCall: false, time: 0n };
  let last = head;
  for (const e of entries) {
    last.next = e;
    e.prev = last;
    last = e;
  }
  const lift = (e: Entry) => {
    e.prev!.next = e.next;
    if (e.next) e.next.prev = e.prev;
    const m = e.match!;
    m.prev!.next = m.next;
    if (m.next) m.next.prev = m.prev;
  };
  const unlift = (e: Entry) => {
    const m = e.match!;
    m.prev!.next = m;
    if (m.next) m.next.prev = m;
    e.prev!.next = e;
    if (e.next) e.next.prev = e;
  };
  let state = model.init;
  let linearized = 0n;
  const cache = new Set<string>();
  const stack: Array<{ entry: Entry; state: S }> = [];
  let entry = head.next;
  while (head.next) {
    if (!entry) return false;
    if (entry.isCall) {
      const op = ops[entry.op]!;
      const [ok, next] = model.step(state, op.input, op.ret === undefined ? UNKNOWN : op.output);
      if (ok) {
        const bits = linearized | (1n << BigInt(entry.op));
        const key = `${bits.toString(36)}|${model.key(next)}`;
        if (!cache.has(key)) {
          cache.add(key);
          stack.push({ entry, state });
          state = next;
          linearized = bits;
          lift(entry);
          entry = head.next;
          continue;
        }
      }
      entry = entry.next;
    } else if (entry.time === undefined) {
      // Returns at +infinity come after every finite one, so every determinate
      // operation is linearized: the indeterminate ones left never took effect.
      return true;
    } else {
      // A return before its call could be linearized: undo the last choice.
      const top = stack.pop();
      if (!top) return false;
      state = top.state;
      linearized &= ~(1n << BigInt(top.entry.op));
      unlift(top.entry);
      entry = top.entry.next;
    }
  }
  return true;
}
