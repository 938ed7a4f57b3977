// The results of one poll() or submit() of the client core, delivered to the
// records they belong to (found by the op id's slot): a single op's promise
// settles, the batches' values are copied into one Buffer of this hand-out, and
// a block the core did not use goes back to the pools of the op's session.
import { Buffer } from 'node:buffer'; // the global Buffer is a getter: a call per use
import type { ClientCore } from '../native/index.js';
import { CopyLayout, KvLayout, KvOp, KvStatus, ResultLayout } from '../protocol/constants.js';
import { errorForStatus, KvBufferTooSmallError, KvInternalError } from '../protocol/errors.js';
import { describe } from './keys.js';
import { opName } from './op-names.js';
import { Answer, Batch, type PendingOp } from './op-records.js';
import type { BackupBlocks } from './backup-blocks.js';
import type { Session } from './session.js';

/** The op queue's slots, as results are delivered to them. */
export interface Slots {
  readonly owners: Array<PendingOp | Batch | undefined>;
  /** By slot: the key index of a batch's op. */
  readonly members: Int32Array;
  readonly blocks: Int32Array;
  readonly classes: Int32Array;
  /** By slot: the session (member) the op runs on. */
  readonly sessions: Array<Session | undefined>;
  /** Retries of the ops that resolved, by KvOp. */
  readonly retried: Float64Array;
  /** The slot of a result's op id, or -1 (a stale id). */
  slotOf(id: number): number;
  release(slot: number): void;
  /** By slot: a replicated write's blocks on its backups. */
  readonly backups: BackupBlocks;
}

// copyWords' entries: a hand-out's batch values from 0, its single GETs' values from SINGLES.
const SINGLES = KvLayout.MAX_INFLIGHT;

/**
 * Delivers the `n` results the core left in resultWords. The batches' GET values of this hand-out
 * share one Buffer (each value a view of it); a single GET's value is its own Buffer, as
 * Buffer.allocUnsafe cuts it (small ones from Node's pool). Every value is copied out of scratch
 * with one copyValues() per target Buffer or pool, before this returns and so before any
 * promise reaction can run.
 */
export function deliverResults(q: Slots, core: ClientCore, n: number): void {
  const words = core.resultWords;
  // First the bytes the batches' values take.
  let batchBytes = 0;
  for (let i = 0, o = 0; i < n; i++, o += ResultLayout.WORDS) {
    const slot = q.slotOf(words[o + ResultLayout.ID]!);
    const owner = slot < 0 ? undefined : q.owners[slot];
    if (owner instanceof Batch && owner.type === KvOp.GET && words[o + ResultLayout.STATUS] === KvStatus.OK) batchBytes += words[o + ResultLayout.VALUE_LEN]!;
  }
  let chunk: Buffer | undefined; // made with the first batch value, even an empty one
  const copies = core.copyWords;
  const entries = copies.length / CopyLayout.WORDS;
  let chunkUsed = 0;
  let copied = 0;
  let pool: ArrayBufferLike | undefined; // the single values' target now: entries [SINGLES, singles)
  let singles: number = SINGLES;
  // The copies come last, but whatever happens in between (a throw would be a defect): no value
  // handed out keeps the uninitialised bytes of Buffer.allocUnsafe.
  try {
    for (let i = 0, o = 0; i < n; i++, o += ResultLayout.WORDS) {
      const slot = q.slotOf(words[o + ResultLayout.ID]!);
      if (slot < 0) continue;
      const owner = q.owners[slot]!;
      try {
        const k = q.members[slot]!;
        const session = q.sessions[slot];
        if (words[o + ResultLayout.BLOCK_UNUSED] && q.blocks[slot]! >= 0) session!.pools.giveBack(q.classes[slot]!, q.blocks[slot]!);
        if (words[o + ResultLayout.BACKUP_BLOCKS_UNUSED]) q.backups.giveBack(slot, words[o + ResultLayout.BACKUP_BLOCKS_UNUSED]!);
        q.release(slot);
        const status = words[o + ResultLayout.STATUS]!;
        // Why its connection went, for the error: the keepalive's reason, or the transport's first error.
        const lost = status === KvStatus.DISCONNECTED ? session?.lostReason ?? (session?.connection.firstError || undefined) : undefined;
        if (status === KvStatus.OK || status === KvStatus.NOT_FOUND || status === KvStatus.VERSION_MISMATCH) q.retried[owner.type] += words[o + ResultLayout.DETAIL]!;
        if (owner instanceof Batch) {
          if (owner.failed) continue;
          if (status === KvStatus.OK && owner.type === KvOp.GET) {
            const len = words[o + ResultLayout.VALUE_LEN]!;
            chunk ??= Buffer.allocUnsafe(batchBytes);
            if (copied === SINGLES) copied = copyOut(core, chunk, 0, copied); // more results than slots: never so far
            const c = copied++ * CopyLayout.WORDS; // its bytes come with copyValues() below
            copies[c + CopyLayout.AT] = words[o + ResultLayout.VALUE_OFFSET]!;
            copies[c + CopyLayout.LENGTH] = len;
            copies[c + CopyLayout.TARGET_START] = chunkUsed;
            owner.out![owner.positions ? owner.positions[k]! : k] = chunk.subarray(chunkUsed, (chunkUsed += len));
          } else if (status !== KvStatus.OK && status !== KvStatus.NOT_FOUND) {
            owner.fail(errorForStatus(status, words[o + ResultLayout.DETAIL]!, `${opName(owner.type)} ${describe(owner.keys[k]!)}`, lost));
            continue;
          }
          if (--owner.left === 0) owner.resolve(owner.out);
          continue;
        }
        if (status === KvStatus.OK || status === KvStatus.NOT_FOUND || (status === KvStatus.VERSION_MISMATCH && owner.mismatchResolves)) {
          let value: Buffer | undefined;
          if (owner.type === KvOp.GET && status === KvStatus.OK && owner.target !== undefined) {
            // getInto a plain Buffer: the value's bytes go there now, in a copyValues() of their own.
            const len = words[o + ResultLayout.VALUE_LEN]!;
            if (len > owner.target.length) {
              owner.reject(new KvBufferTooSmallError(len, `${opName(owner.type)} ${describe(owner.key)}: the value is ${len} bytes, the buffer ${owner.target.length}`));
              continue;
            }
            if (singles === entries) singles = copyOut(core, pool, SINGLES, singles);
            const c = singles * CopyLayout.WORDS; // taken for this one copy, and free again after it
            copies[c + CopyLayout.AT] = words[o + ResultLayout.VALUE_OFFSET]!;
            copies[c + CopyLayout.LENGTH] = len;
            copies[c + CopyLayout.TARGET_START] = 0;
            core.copyValues(owner.target, singles, 1);
          } else if (owner.type === KvOp.GET && status === KvStatus.OK && owner.ext === undefined) {
            const at = words[o + ResultLayout.VALUE_OFFSET]!;
            const len = words[o + ResultLayout.VALUE_LEN]!;
            value = Buffer.allocUnsafe(len); // a copy: scratch is reused
            if (value.buffer !== pool || singles === entries) {
              singles = copyOut(core, pool, SINGLES, singles);
              pool = value.buffer;
            }
            const c = singles++ * CopyLayout.WORDS;
            copies[c + CopyLayout.AT] = at;
            copies[c + CopyLayout.LENGTH] = len;
            copies[c + CopyLayout.TARGET_START] = value.byteOffset;
          }
          if (owner.answer === Answer.VALUE || owner.answer === Answer.NONE) owner.resolve(value); // undefined but for a GET's value
          else if (owner.answer === Answer.LENGTH) owner.resolve(status === KvStatus.OK ? words[o + ResultLayout.VALUE_LEN]! : undefined); // in the registered buffer
          else if (owner.answer === Answer.APPLIED) owner.resolve(status === KvStatus.OK);
          else if (owner.answer === Answer.VERSIONED) owner.resolve(value ? { value, version: versionAt(words, o) } : undefined);
          else {
            const version = versionAt(words, o);
            const retries = words[o + ResultLayout.DETAIL]!;
            const expiry = words[o + ResultLayout.EXPIRY_LO]! + words[o + ResultLayout.EXPIRY_HI]! * 0x100000000;
            owner.resolve(value ? { status, value, version, retries, expiry } : { status, version, retries, expiry, length: words[o + ResultLayout.VALUE_LEN]! });
          }
          owner.recycle(); // nothing holds it now: its slot was released above
        } else {
          owner.reject(errorForStatus(status, words[o + ResultLayout.DETAIL]!, `${opName(owner.type)} ${describe(owner.key)}`, lost));
        }
      } catch (error) {
        failHandOut(q, slot, owner, error); // the hand-out's other results are still delivered
      }
    }
  } finally {
    // Scratch is reused: the values leave it now.
    copyOut(core, chunk, 0, copied);
    copyOut(core, pool, SINGLES, singles);
  }
}

/**
 * Handing out `owner`'s result threw: a defect. The op fails with KvInternalError (the throw its
 * cause) instead of never settling (a batch's op: the whole batch), and its slot is free again.
 * A block it did not use stays out of the pools if the throw came before it was given back.
 */
function failHandOut(q: Slots, slot: number, owner: PendingOp | Batch, error: unknown): void {
  const failure = new KvInternalError(`handing out the result of a ${opName(owner.type)} threw (a defect of the client): ${error instanceof Error ? error.message : String(error)}`, error);
  if (owner instanceof Batch) owner.fail(failure);
  else owner.reject(failure);
  try {
    if (q.owners[slot] === owner) q.release(slot);
  } catch {
    // The release itself is what threw: the slot stays taken, the op has its error.
  }
}

/** Copies copyWords' entries [first, end) into `target`; returns `first` (the entries are free again). */
function copyOut(core: ClientCore, target: Uint8Array | ArrayBufferLike | undefined, first: number, end: number): number {
  if (end > first) core.copyValues(target as Uint8Array | ArrayBuffer, first, end - first);
  return first;
}

/** The 64-bit version of the result at word `o`. */
function versionAt(words: Uint32Array, o: number): bigint {
  const lo = words[o + ResultLayout.VERSION_LO]!;
  const hi = words[o + ResultLayout.VERSION_HI]!;
  return hi === 0 ? BigInt(lo) : BigInt(lo) | (BigInt(hi) << 32n);
}
