// Turns KvClient histories (HistoryEvent, all processes) into per-key
// operations for the linearizability checker, one reader per model.
import type { HistoryEvent } from '../../client/index.js';
import type { Operation } from './linearizability.js';
import type { CounterInput, CounterOutput, LockInput, LockOutput, RegisterInput, RegisterOutput } from './linearizability-models.js';

export type ProcessEvent = HistoryEvent & { process: number };

/**
 * What may have taken effect without saying so. By default nothing: every
 * request that was sent must complete (a test without faults), and anything
 * else throws. A test that injects faults lists the failures that leave an
 * outcome unknown; such an operation, and one whose process died before it
 * completed (with `unfinished`), becomes indeterminate: it may take effect at
 * any time after its call, or never. A request that failed before it was
 * sent (sent: false) never happened and is always dropped.
 */
export interface HistoryOptions {
  /** Error codes of a sent request's failure that leave its outcome unknown. */
  indeterminateErrors?: readonly string[];
  /** An invocation never completed (its process died) is indeterminate rather than an error. */
  unfinished?: boolean;
}

/** For fault tests: a timeout or a lost connection after sending, or a killed process. */
export const MAY_HAVE_TAKEN_EFFECT: HistoryOptions = { indeterminateErrors: ['KV_TIMEOUT', 'KV_DISCONNECTED'], unfinished: true };

/** An invocation and its completion; done undefined: indeterminate. */
interface Completion {
  call: ProcessEvent;
  done: ProcessEvent | undefined;
}

/** Pairs invocations with completions; `definite` lists failures a model reads as an answer (lock: KV_LOCK_CONTENDED). */
function completions(events: ProcessEvent[], options: HistoryOptions, definite: readonly string[] = []): Completion[] {
  const open = new Map<string, ProcessEvent>();
  const out: Completion[] = [];
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
    if (e.type === 'fail' && !definite.includes(e.error!)) {
      if (!options.indeterminateErrors?.includes(e.error!)) throw new Error(`${e.f} ${e.key} failed (${e.error}): the test expects every operation to complete`);
      out.push({ call, done: undefined });
    } else out.push({ call, done: e });
  }
  if (open.size > 0 && !options.unfinished) throw new Error(`${open.size} operations never completed`);
  for (const call of open.values()) out.push({ call, done: undefined });
  return out;
}

function byKey<I, O>(list: Completion[], convert: (c: Completion) => Operation<I, O> | undefined): Map<string, Array<Operation<I, O>>> {
  const keys = new Map<string, Array<Operation<I, O>>>();
  for (const c of list) {
    const op = convert(c);
    if (!op) continue;
    const ops = keys.get(c.call.key) ?? [];
    ops.push(op);
    keys.set(c.call.key, ops);
  }
  return keys;
}

function operation<I, O>(c: Completion, input: I, output: (done: ProcessEvent) => O): Operation<I, O> {
  const call = BigInt(c.call.time);
  return c.done ? { call, ret: BigInt(c.done.time), input, output: output(c.done) } : { call, ret: undefined, input };
}

const notInModel = (c: Completion, model: string) => new Error(`operation ${c.call.f} is not part of the ${model} model`);

/**
 * Register operations (get/put/delete/cas). Every written value must be unique
 * (the test makes them so), which lets a cas's expected version be mapped to
 * the value of the write that produced it: the version a put or cas recorded
 * writing, or one a get read. An indeterminate get says nothing and is dropped.
 */
export function registerHistories(events: ProcessEvent[], options: HistoryOptions = {}): Map<string, Array<Operation<RegisterInput, RegisterOutput>>> {
  const versionValue = new Map<string, string>([['0', '\u0000absent']]);
  const invoked = new Map<string, HistoryEvent>();
  for (const e of events) {
    if (e.type === 'invoke') invoked.set(`${e.process}:${e.id}`, e);
    else if (e.type === 'ok' && e.version) {
      const value = e.f === 'get' ? e.value : e.f === 'put' || e.f === 'cas' ? invoked.get(`${e.process}:${e.id}`)?.value : undefined;
      if (typeof value === 'string') versionValue.set(e.version, value);
    }
  }
  return byKey(completions(events, options), (c) => {
    const call = c.call;
    let input: RegisterInput;
    if (call.f === 'get') {
      if (!c.done) return undefined;
      input = { f: 'get' };
    } else if (call.f === 'put') input = { f: 'put', value: String(call.value) };
    else if (call.f === 'delete') input = { f: 'delete' };
    else if (call.f === 'cas') {
      const expected = versionValue.get(call.expected!);
      if (expected === undefined) throw new Error(`cas expected version ${call.expected}, which no get observed`);
      input = { f: 'cas', expected: expected === '\u0000absent' ? null : expected, value: String(call.value) };
    } else throw notInModel(c, 'register');
    return operation(c, input, (done) => done.value as RegisterOutput);
  });
}

/** Counter operations: incr (a read is incr by 0) and delete. */
export function counterHistories(events: ProcessEvent[], options: HistoryOptions = {}): Map<string, Array<Operation<CounterInput, CounterOutput>>> {
  return byKey(completions(events, options), (c) => {
    if (c.call.f === 'incr') return operation<CounterInput, CounterOutput>(c, { f: 'incr', delta: BigInt(c.call.delta!) }, (done) => BigInt(done.value as string));
    if (c.call.f === 'delete') return operation<CounterInput, CounterOutput>(c, { f: 'delete' }, (done) => done.value as boolean);
    throw notInModel(c, 'counter');
  });
}

/** Lock operations: lock (its token, or null for KV_LOCK_CONTENDED) and unlock (its token; whether it released). */
export function lockHistories(events: ProcessEvent[], options: HistoryOptions = {}): Map<string, Array<Operation<LockInput, LockOutput>>> {
  return byKey(completions(events, options, ['KV_LOCK_CONTENDED']), (c) => {
    if (c.call.f === 'lock') return operation<LockInput, LockOutput>(c, { f: 'lock' }, (done) => (done.type === 'fail' ? null : BigInt(done.version!)));
    if (c.call.f !== 'unlock') throw notInModel(c, 'lock');
    if (c.call.token === undefined) throw new Error('unlock without its token: a history from before the client recorded it');
    return operation<LockInput, LockOutput>(c, { f: 'unlock', token: BigInt(c.call.token) }, (done) => done.value as boolean);
  });
}
