// Recording a history (KvClientOptions.history) for checking linearizability:
// a wrapper around submission. It writes an operation's invocation before the
// operation is submitted, and its completion when the result comes back. The
// recorder (one per KvClient, shared by its servers) numbers the operations.
import { KvOp, KvStatus } from '../protocol/constants.js';
import { appendFileSync } from 'node:fs';

import { type KvError, KvInvalidArgumentError } from '../protocol/errors.js';
import { show, text } from './keys.js';
import { opName } from './op-names.js';
import type { OpRequest, OpResult, Submission } from './op-queue.js';
import type { HistoryEvent } from './types.js';

export interface HistoryRecorder {
  record(event: HistoryEvent): void;
  nextId(): number;
}

const now = () => process.hrtime.bigint().toString();

/** A recorder appending to the file `history` names (JSON lines), or calling it; a failing write goes to `warn`, never throws. */
export function historyRecorder(history: string | ((event: HistoryEvent) => void), warn: (error: Error) => void): HistoryRecorder {
  const write = typeof history === 'string' ? (event: HistoryEvent) => appendFileSync(history, JSON.stringify(event) + '\n') : history;
  // Recording runs inside submit() and the completion loop: a failing
  // write (a full disk, a throwing callback) must not throw from there.
  const record = (event: HistoryEvent) => {
    try {
      write(event);
    } catch (error) {
      warn(new KvInvalidArgumentError(`history: cannot record an event: ${error instanceof Error ? error.message : show(error)}`));
    }
  };
  let id = 0;
  return { record, nextId: () => ++id };
}

/** submit() of `op`, with the invocation and the completion written to the history. */
export function recorded(recorder: HistoryRecorder, op: OpRequest, submit: () => Submission): Promise<OpResult> {
  const { type, key, value, arg } = op;
  const base = { id: recorder.nextId(), f: opName(type), key: text(key) };
  const invoke: HistoryEvent = { ...base, type: 'invoke', time: now() };
  if (value) invoke.value = text(value);
  if (type === KvOp.CAS) invoke.expected = arg.toString();
  if (type === KvOp.INCR) invoke.delta = arg.toString();
  if (type === KvOp.UNLOCK) invoke.token = arg.toString();
  if (op.expiry) invoke.expiry = String(op.expiry);
  recorder.record(invoke);
  const submitted = submit();
  return submitted.result.then(
    (r) => {
      const done: HistoryEvent = { ...base, type: 'ok', time: now() };
      if (type === KvOp.GET) {
        done.value = r.value ? text(r.value) : null;
        if (r.value) done.version = r.version.toString();
      } else if (type === KvOp.DELETE || type === KvOp.CAS || type === KvOp.UNLOCK) {
        done.value = r.status === KvStatus.OK;
      } else if (type === KvOp.INCR) {
        done.value = r.version.toString();
      }
      // The version written, or the fencing token: a checker need not infer them.
      if ((type === KvOp.PUT || type === KvOp.CAS || type === KvOp.LOCK) && r.status === KvStatus.OK) done.version = r.version.toString();
      recorder.record(done);
      return r;
    },
    (error: Error) => {
      const failed: HistoryEvent = { ...base, type: 'fail', error: (error as KvError).code ?? error.message, time: now() };
      // Failed in the queue, refused by an epoch word before any replica committed, or a GET answered after its
      // read lease (no value given): it cannot have happened, or changed nothing (KvClient runs it again).
      // An INCR answered after its lease may have added: sent.
      const code = (error as KvError).code;
      if (!submitted.sent || code === 'KV_EPOCH_MOVED' || (code === 'KV_READ_LEASE_LAPSED' && type === KvOp.GET)) failed.sent = false;
      recorder.record(failed);
      throw error;
    },
  );
}
