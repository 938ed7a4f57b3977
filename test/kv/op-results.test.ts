// deliverResults copies a hand-out's GET values out of scratch after it has settled their
// promises (one copyValues per target). A throw part-way through (a defect, but possible) must
// still leave every value already handed out with its bytes, not Buffer.allocUnsafe's leftovers.
import test from 'ava';

import type { ClientCore } from '../../native/index.js';
import { CopyLayout, KvLayout, KvOp, KvStatus, ResultLayout } from '../../protocol/constants.js';
import { Answer, PendingOp } from '../../client/op-records.js';
import { type Slots, deliverResults } from '../../client/op-results.js';

// A core of plain arrays: scratch, resultWords and copyWords, and copyValues as the binding does it.
function fakeCore(scratch: Buffer, results: number) {
  const copyWords = new Uint32Array(256 * CopyLayout.WORDS);
  return {
    resultWords: new Uint32Array(results * ResultLayout.WORDS),
    copyWords,
    copyValues(target: Uint8Array | ArrayBuffer, first: number, count: number): void {
      const bytes = target instanceof Uint8Array ? target : new Uint8Array(target);
      for (let i = first; i < first + count; i++) {
        const w = i * CopyLayout.WORDS;
        scratch.copy(bytes, copyWords[w + CopyLayout.TARGET_START]!, copyWords[w + CopyLayout.AT]!, copyWords[w + CopyLayout.AT]! + copyWords[w + CopyLayout.LENGTH]!);
      }
    },
  };
}

function slots(ops: PendingOp[], releaseThrowsAt: number): Slots {
  return {
    owners: [...ops],
    members: new Int32Array(KvLayout.MAX_INFLIGHT),
    blocks: new Int32Array(KvLayout.MAX_INFLIGHT).fill(-1),
    classes: new Int32Array(KvLayout.MAX_INFLIGHT).fill(-1),
    sessions: [],
    retried: new Float64Array(16),
    slotOf: (id: number) => (id < ops.length ? id : -1),
    release(slot: number): void {
      if (slot === releaseThrowsAt) throw new Error('a defect in release');
    },
    backups: { giveBack() {} } as unknown as Slots['backups'],
  };
}

const getOp = (key: string) => PendingOp.of(KvOp.GET, key, key.length, undefined, 0, 0n, -1, false, undefined, undefined, 0, 0, false, Answer.VALUE);

test('values already handed out keep their bytes when delivering a later result throws', async (t) => {
  const scratch = Buffer.from('first-value.second-value');
  const core = fakeCore(scratch, 2);
  const ops = [getOp('a'), getOp('b')];
  const w = core.resultWords;
  for (const [i, at, len] of [[0, 0, 11], [1, 12, 12]] as const) {
    const o = i * ResultLayout.WORDS;
    w[o + ResultLayout.ID] = i;
    w[o + ResultLayout.STATUS] = KvStatus.OK;
    w[o + ResultLayout.VALUE_OFFSET] = at;
    w[o + ResultLayout.VALUE_LEN] = len;
  }
  const first = ops[0]!.result;
  t.throws(() => deliverResults(slots(ops, 1), core as unknown as ClientCore, 2), { message: 'a defect in release' });
  t.is((await first as unknown as Buffer).toString(), 'first-value');
});

test('single values of one hand-out each get their own bytes, however many share a pool', async (t) => {
  const n = KvLayout.MAX_INFLIGHT;
  const scratch = Buffer.alloc(n * 100);
  for (let i = 0; i < n; i++) scratch.write(`value ${i} `.repeat(1 + (i % 7)), i * 100);
  const core = fakeCore(scratch, n);
  const ops = Array.from({ length: n }, (_, i) => getOp(`k${i}`));
  for (let i = 0; i < n; i++) {
    const o = i * ResultLayout.WORDS;
    core.resultWords[o + ResultLayout.ID] = i;
    core.resultWords[o + ResultLayout.STATUS] = KvStatus.OK;
    core.resultWords[o + ResultLayout.VALUE_OFFSET] = i * 100;
    core.resultWords[o + ResultLayout.VALUE_LEN] = `value ${i} `.repeat(1 + (i % 7)).length;
  }
  const results = ops.map((op) => op.result);
  deliverResults(slots(ops, -1), core as unknown as ClientCore, n);
  const values = (await Promise.all(results)) as unknown as Buffer[];
  values.forEach((v, i) => t.is(v.toString(), `value ${i} `.repeat(1 + (i % 7)), `value ${i}`));
});
