// Sequential specifications for the linearizability checker: a register
// (get/put/delete/cas), a counter (incr, which is also the read: incr by 0)
// and a lock with fencing tokens. Each accepts UNKNOWN (an indeterminate
// operation) as taking effect with whatever output the state gives.
import { type Model, UNKNOWN } from './linearizability.js';

// ---- the key-value register ----

export type RegisterInput = { f: 'get' } | { f: 'put'; value: string } | { f: 'delete' } | { f: 'cas'; expected: string | null; value: string };
export type RegisterOutput = string | null | boolean | undefined;

export const registerModel: Model<string | null, RegisterInput, RegisterOutput> = {
  init: null,
  step(state, input, output) {
    const unknown = output === UNKNOWN;
    switch (input.f) {
      case 'get':
        return [unknown || state === output, state];
      case 'put':
        return [true, input.value];
      case 'delete':
        return [unknown || (state !== null) === output, null];
      case 'cas':
        if (unknown) return [true, state === input.expected ? input.value : state];
        return output ? [state === input.expected, input.value] : [state !== input.expected, state];
    }
  },
  key: (state) => (state === null ? '\u0000' : state),
};

// ---- the counter: incr adds a delta once and answers the sum (KvClient.incr) ----

/** delta: the unsigned 64-bit word added, as the history records it (a negative d is 2^64 + d). */
export type CounterInput = { f: 'incr'; delta: bigint } | { f: 'delete' };
/** incr: the new value; delete: whether the counter existed. */
export type CounterOutput = bigint | boolean;

/** A counter word holds value << 1, so counters count modulo 2^63 (docs/protocol.md, INCR). */
const COUNTER_MODULUS = 1n << 63n;

/** null: no counter (incr creates it at its delta). */
export const counterModel: Model<bigint | null, CounterInput, CounterOutput> = {
  init: null,
  step(state, input, output) {
    if (input.f === 'delete') return [output === UNKNOWN || (state !== null) === output, null];
    const next = ((state ?? 0n) + input.delta) % COUNTER_MODULUS;
    return [output === UNKNOWN || output === next, next];
  },
  key: (state) => (state === null ? '-' : state.toString()),
};

// ---- the lock: tokens only grow, and holders never overlap ----

/** unlock gives back the token its lock returned. */
export type LockInput = { f: 'lock' } | { f: 'unlock'; token: bigint };
/** lock: the fencing token, or null when it gave up (KV_LOCK_CONTENDED); unlock: whether it released the lock (false: it was no longer held with that token). */
export type LockOutput = bigint | null | boolean;

/** token: the last acquisition's (a lower bound when that one was indeterminate); held: whether it still holds. */
export interface LockState {
  token: bigint;
  held: boolean;
}

/**
 * fencing: a holder may lose the lock without unlocking it (the server fences a
 * client it takes for dead or stalled and releases its locks): a lock may then
 * take a held lock, and the old holder's unlock must answer false. Without it,
 * only an unlock frees the lock. Either way a token must exceed every earlier
 * one, and an unlock answers true only while its token holds the lock. An
 * unlock's token must be one a completed lock returned (no client learns
 * another): an indeterminate lock's token is known only to exceed the last.
 */
export function lockModel(options: { fencing: boolean }): Model<LockState, LockInput, LockOutput> {
  return {
    init: { token: 0n, held: false },
    step(state, input, output) {
      if (input.f === 'unlock') {
        const releases = state.held && state.token === input.token;
        const next = releases ? { token: state.token, held: false } : state;
        return [output === UNKNOWN || output === releases, next];
      }
      const free = !state.held || options.fencing;
      // An unseen token is at least the next one: the weakest bound for later tokens.
      if (output === UNKNOWN) return [free, { token: state.token + 1n, held: true }];
      // Gave up: the lock was held when it last tried.
      if (output === null) return [state.held, state];
      if (typeof output !== 'bigint') return [false, state];
      return [free && output > state.token, { token: output, held: true }];
    },
    key: (state) => `${state.token}${state.held ? '+' : '-'}`,
  };
}
