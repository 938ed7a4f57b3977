// The checker against brute force on random small histories (up to 8
// operations of 2-3 processes, some indeterminate): the Wing-Gong-Lowe search
// with its cache, linked list and +infinity returns must give the same answer
// as trying every order consistent with real time. Each history is built from
// a sequential run (so it is linearizable), and half of them get one output
// corrupted (so many are not). Pure: no server.
import test from 'ava';
import fc from 'fast-check';

import { type Model, type Operation, UNKNOWN, isLinearizable } from '../helpers/linearizability.js';
import { type CounterInput, type CounterOutput, type LockInput, type LockOutput, type LockState, type RegisterInput, type RegisterOutput, counterModel, lockModel, registerModel } from '../helpers/linearizability-models.js';

/** Every order of the operations consistent with real time; indeterminate ones may be left out. */
function bruteForce<S, I, O>(ops: Array<Operation<I, O>>, model: Model<S, I, O>): boolean {
  const placed = ops.map(() => false);
  const search = (state: S): boolean => {
    if (ops.every((op, i) => placed[i] || op.ret === undefined)) return true;
    for (let i = 0; i < ops.length; i++) {
      if (placed[i]) continue;
      const op = ops[i]!;
      // Not before an operation that returned before it was called.
      if (ops.some((other, j) => !placed[j] && other.ret !== undefined && other.ret < op.call)) continue;
      const [ok, next] = model.step(state, op.input, op.ret === undefined ? UNKNOWN : op.output);
      if (!ok) continue;
      placed[i] = true;
      const found = search(next);
      placed[i] = false;
      if (found) return true;
    }
    return false;
  };
  return search(model.init);
}

/**
 * A sequential run: an operation chosen by `choice`, its output in `state`
 * and the state after; `pick` chooses among legal behaviours; `lost`: its
 * output will not be seen.
 */
type Run<S, I, O> = (state: S, choice: number, pick: number, lost: boolean) => { input: I; output: O; next: S };

interface Plan {
  processes: number;
  ops: Array<{ process: number; gap: number; length: number; choice: number; pick: number; at: number; lost: number }>;
  corrupt: { index: number; pick: number } | null;
}

const planArbitrary: fc.Arbitrary<Plan> = fc.record({
  processes: fc.integer({ min: 2, max: 3 }),
  ops: fc.array(
    fc.record({
      process: fc.nat(2),
      gap: fc.integer({ min: 1, max: 3 }),
      length: fc.nat(4),
      choice: fc.nat(99),
      pick: fc.nat(3),
      at: fc.nat(99),
      lost: fc.nat(9), // 0 and 1: indeterminate
    }),
    { minLength: 1, maxLength: 8 },
  ),
  corrupt: fc.option(fc.record({ index: fc.nat(7), pick: fc.nat(3) }), { freq: 2 }),
});

/**
 * Builds the history `plan` describes: each process's operations one after
 * another, each taking effect at a point of its interval (an indeterminate one
 * anywhere after its call, or never), with outputs from `run` in that order.
 */
function build<S, I, O>(plan: Plan, init: S, run: Run<S, I, O>, corrupt: (output: O, pick: number) => O): Array<Operation<I, O>> {
  const clock = new Array<number>(plan.processes).fill(0);
  const timed = plan.ops.map((p, i) => {
    const process = p.process % plan.processes;
    const call = clock[process]! + p.gap;
    const ret = call + p.length;
    clock[process] = ret;
    const lost = p.lost < 2;
    // In hundredths; a lost operation's effect may come after everything, or never (at < 20).
    const effect = lost ? (p.at < 20 ? Infinity : call * 100 + (p.at - 20) * 25) : call * 100 + p.at * p.length;
    return { i, call, ret, lost, effect, p };
  });
  const ops = new Array<Operation<I, O>>(timed.length);
  let state = init;
  for (const o of [...timed].sort((a, b) => a.effect - b.effect || a.i - b.i)) {
    const r = run(state, o.p.choice, o.p.pick, o.lost);
    if (o.effect !== Infinity) state = r.next;
    ops[o.i] = o.lost ? { call: BigInt(o.call), ret: undefined, input: r.input } : { call: BigInt(o.call), ret: BigInt(o.ret), input: r.input, output: r.output };
  }
  const target = plan.corrupt && ops[plan.corrupt.index % ops.length];
  if (target && target.ret !== undefined) target.output = corrupt(target.output, plan.corrupt!.pick);
  return ops;
}

const VALUES = ['a', 'b', 'c'];

const registerRun: Run<string | null, RegisterInput, RegisterOutput> = (state, choice, pick) => {
  const value = VALUES[pick % 3]!;
  if (choice < 30) return { input: { f: 'get' }, output: state, next: state };
  if (choice < 60) return { input: { f: 'put', value }, output: undefined, next: value };
  if (choice < 75) return { input: { f: 'delete' }, output: state !== null, next: null };
  const expected = choice < 90 ? state : pick === 3 ? null : VALUES[(pick + 1) % 3]!; // mostly the current value
  return { input: { f: 'cas', expected, value }, output: state === expected, next: state === expected ? value : state };
};
const registerCorrupt = (output: RegisterOutput, pick: number): RegisterOutput =>
  typeof output === 'boolean' ? !output : output === undefined ? undefined : ([null, ...VALUES].filter((v) => v !== output)[pick % 3] as RegisterOutput);

const counterRun: Run<bigint | null, CounterInput, CounterOutput> = (state, choice, pick) => {
  if (choice < 90) {
    const delta = choice < 35 ? 0n : BigInt.asUintN(64, BigInt(pick === 3 ? -1 : pick + 1));
    const next = ((state ?? 0n) + delta) % (1n << 63n);
    return { input: { f: 'incr', delta }, output: next, next };
  }
  return { input: { f: 'delete' }, output: state !== null, next: null };
};
const counterCorrupt = (output: CounterOutput, pick: number): CounterOutput => (typeof output === 'boolean' ? !output : output + BigInt(pick) + 1n);

/** The lock word, and the last token a completed lock returned (0: none): only such a token is ever unlocked. */
interface LockRunState extends LockState {
  known: bigint;
}

function lockRun(fencing: boolean): Run<LockRunState, LockInput, LockOutput> {
  return (state, choice, pick, lost) => {
    if (choice < 55) {
      // A held lock is taken over (fencing) or given up on.
      if (state.held && !(fencing && pick < 2)) return { input: { f: 'lock' }, output: null, next: state };
      const token = state.token + (pick === 3 ? 2n : 1n); // sometimes a gap
      return { input: { f: 'lock' }, output: token, next: { token, held: true, known: lost ? state.known : token } };
    }
    // Mostly the newest token seen; else one before it (or 0, which no lock returns).
    const token = pick < 3 || state.known === 0n ? state.known : state.known - 1n;
    const releases = state.held && token === state.token;
    return { input: { f: 'unlock', token }, output: releases, next: releases ? { ...state, held: false } : state };
  };
}
const lockCorrupt = (output: LockOutput, pick: number): LockOutput =>
  typeof output === 'boolean' ? !output : output === null ? BigInt(pick + 1) : pick === 0 ? null : output + BigInt(pick) - 2n;

/** G: the run's state, the model's or more. */
interface Case<S, I, O, G = S> {
  name: string;
  model: Model<S, I, O>;
  init: G;
  run: Run<G, I, O>;
  corrupt: (output: O, pick: number) => O;
}

const lockInit: LockRunState = { token: 0n, held: false, known: 0n };

const cases = [
  { name: 'register', model: registerModel, init: null, run: registerRun, corrupt: registerCorrupt } as Case<string | null, RegisterInput, RegisterOutput>,
  { name: 'counter', model: counterModel, init: null, run: counterRun, corrupt: counterCorrupt } as Case<bigint | null, CounterInput, CounterOutput>,
  { name: 'lock', model: lockModel({ fencing: false }), init: lockInit, run: lockRun(false), corrupt: lockCorrupt } as Case<LockState, LockInput, LockOutput, LockRunState>,
  { name: 'fenced lock', model: lockModel({ fencing: true }), init: lockInit, run: lockRun(true), corrupt: lockCorrupt } as Case<LockState, LockInput, LockOutput, LockRunState>,
];

const RUNS = 10_000;

for (const c of cases as Array<Case<unknown, unknown, unknown, unknown>>) {
  test(`${c.name}: the checker and brute force agree on ${RUNS} random histories of up to 8 operations`, (t) => {
    let accepted = 0;
    let rejected = 0;
    let indeterminate = 0;
    let long = 0;
    fc.assert(
      fc.property(planArbitrary, (plan) => {
        const ops = build(plan, c.init, c.run, c.corrupt);
        const expected = bruteForce(ops, c.model);
        if (isLinearizable(ops, c.model) !== expected) return false;
        // Uncorrupted, the history came from a sequential run: the model must agree with the run.
        if (plan.corrupt === null && !expected) return false;
        if (expected) accepted++;
        else rejected++;
        if (ops.some((op) => op.ret === undefined)) indeterminate++;
        if (ops.length >= 6) long++;
        return true;
      }),
      { numRuns: RUNS },
    );
    t.log(`${accepted} linearizable, ${rejected} not; ${indeterminate} with an indeterminate operation, ${long} of 6 to 8 operations`);
    // Both answers are common, so agreement means something.
    t.true(accepted > RUNS / 5 && rejected > RUNS / 20, `${accepted} accepted, ${rejected} rejected`);
  });
}
