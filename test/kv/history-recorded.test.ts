// What the history wrapper (client/history.ts) records of a failed op that
// reached the core: sent: false when the failure proves it changed nothing
// (refused by an epoch word, or a GET answered after its read lease, which
// KvClient runs again), sent: true otherwise (it may have taken effect).
import test from 'ava';

import { type HistoryRecorder, recorded } from '../../client/history.js';
import type { OpRequest } from '../../client/op-records.js';
import type { HistoryEvent } from '../../client/types.js';
import { KvOp } from '../../protocol/constants.js';
import { KvError } from '../../protocol/errors.js';

async function failedEvent(type: KvOp, code: string): Promise<HistoryEvent> {
  const events: HistoryEvent[] = [];
  let id = 0;
  const recorder: HistoryRecorder = { record: (e) => void events.push(e), nextId: () => ++id };
  const op = { type, key: 'k', value: type === KvOp.PUT ? Buffer.from('v') : undefined, arg: 0n } as unknown as OpRequest;
  const error = new KvError(code as KvError['code'], code, true);
  await recorded(recorder, op, () => ({ result: Promise.reject(error), sent: true })).catch(() => undefined);
  return events.find((e) => e.type === 'fail')!;
}

test('a GET answered after its read lease, and a write refused by an epoch word, are recorded as never sent', async (t) => {
  t.is((await failedEvent(KvOp.GET, 'KV_READ_LEASE_LAPSED')).sent, false);
  t.is((await failedEvent(KvOp.PUT, 'KV_EPOCH_MOVED')).sent, false);
});

test('other failures after the op reached the core are recorded as sent (they may have taken effect)', async (t) => {
  t.not((await failedEvent(KvOp.PUT, 'KV_DISCONNECTED')).sent, false);
  t.not((await failedEvent(KvOp.GET, 'KV_TIMEOUT')).sent, false);
  t.not((await failedEvent(KvOp.INCR, 'KV_READ_LEASE_LAPSED')).sent, false, 'an INCR answered after its read lease may have added');
});
