// A linearizability checker: the Wing & Gong backtracking search with Lowe's
// cache of visited (linearized set, state) pairs, run per key (a history is
// linearizable iff each key's sub-history is: P-compositionality).
// No well-kept npm library does this for arbitrary models, so the standard
// algorithm lives here, with tests of its own that it rejects bad histories.
import type { HistoryEvent } from '../../client/index.js';

export interface Operation<I, O> {
  call: bigint;
  ret: bigint;
  input: I;
  output: O;
}

export interface Model<S, I, O> {
  init: S;
  /** Whether `input` may give `output` in `state`, and the state after. */
  step(state: S, input: I, output: O): [boolean, S];
  key(state: S): string;
}

interface Entry {
  op: number;
  isCall: boolean;
  time: bigint;
  match?: Entry; // a call's return
  prev?: Entry;
  next?: Entry;
}

export function isLinearizable<S, I, O>(ops: Array<Operation<I, O>>, model: Model<S, I, O>): boolean {
  const entries: Entry[] = [];
  ops.forEach((op, i) => {
    const call: Entry = { op: i, isCall: true, time: op.call };
    const ret: Entry = { op: i, isCall: false, time: op.ret };
    call.match = ret;
    entries.push(call, ret);
  });
  // By time; at a tie a call comes first (the two overlap).
  entries.sort((a, b) => (a.time < b.time ? -1 : a.time > b.time ? 1 : a.isCall === b.isCall ? 0 : a.isCall ? -1 : 1));
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
      const [ok, next] = model.step(state, op.input, op.output);
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

// ---- the key-value register model, over histories KvClient records ----

export type RegisterInput = { f: 'get' } | { f: 'put'; value: string } | { f: 'delete' } | { f: 'cas'; expected: string | null; value: string };
export type RegisterOutput = string | null | boolean | undefined;

export const registerModel: Model<string | null, RegisterInput, RegisterOutput> = {
  init: null,
  step(state, input, output) {
    switch (input.f) {
      case 'get':
        return [state === output, state];
      case 'put':
        return [true, input.value];
      case 'delete':
        return [(state !== null) === output, null];
      case 'cas':
        return output ? [state === input.expected, input.value] : [state !== input.expected, state];
    }
  },
  key: (state) => (state === null ? '\u0000' : state),
};

/**
 * Turns KvClient histories (all processes) into per-key operations. Every
 * written value must be unique (the test makes them so), which lets a cas's
 * expected version be mapped to the value of the write that produced it: the
 * version a put or cas recorded writing, or one a get read. A request that
 * failed before it was sent (sent: false) never happened and is dropped.
 */
export function registerHistories(events: Array<HistoryEvent & { process: number }>): Map<string, Array<Operation<RegisterInput, RegisterOutput>>> {
  const versionValue = new Map<string, string>([['0', '\u0000absent']]);
  const invoked = new Map<string, HistoryEvent>();
  for (const e of events) {
    if (e.type === 'invoke') invoked.set(`${e.process}:${e.id}`, e);
    else if (e.type === 'ok' && e.version) {
      const value = e.f === 'get' ? e.value : e.f === 'put' || e.f === 'cas' ? invoked.get(`${e.process}:${e.id}`)?.value : undefined;
      if (typeof value === 'string') versionValue.set(e.version, value);
    }
  }
  const open = new Map<string, HistoryEvent>();
  const byKey = new Map<string, Array<Operation<RegisterInput, RegisterOutput>>>();
  for (const e of events) {
    const id = `${e.process}:${e.id}`;
    if (e.type === 'invoke') {
      open.set(id, e);
      continue;
    }
    const call = open.get(id);
    if (!call) throw new Error(`completion without invocation: ${id}`);
    open.delete(id);
    if (e.type === 'fail' && e.sent === false) continue;
    if (e.type === 'fail') throw new Error(`${e.f} ${e.key} failed (${e.error}): the test expects every operation to complete`);
    let input: RegisterInput;
    if (call.f === 'get') input = { f: 'get' };
    else if (call.f === 'put') input = { f: 'put', value: String(call.value) };
    else if (call.f === 'delete') input = { f: 'delete' };
    else if (call.f === 'cas') {
      const expected = versionValue.get(call.expected!);
      if (expected === undefined) throw new Error(`cas expected version ${call.expected}, which no get observed`);
      input = { f: 'cas', expected: expected === '\u0000absent' ? null : expected, value: String(call.value) };
    } else throw new Error(`operation ${call.f} is not part of the register model`);
    const list = byKey.get(call.key) ?? [];
    list.push({ call: BigInt(call.time), ret: BigInt(e.time), input, output: e.value as RegisterOutput });
    byKey.set(call.key, list);
  }
  if (open.size > 0) throw new Error(`${open.size} operations never completed`);
  return byKey;
}
