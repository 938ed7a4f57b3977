// The backups' side of a replicated write in the op queue (docs/protocol.md,
// "Replicated writes"): the block each backup granted for the new item, taken
// from that backup's session's pools when the op is described, written into
// its descriptor (OpLayout.BACKUP_*), and given back when the core did not take
// the op or did not use the block (ResultLayout.BACKUP_BLOCKS_UNUSED).
//
// Ownership: a taken block is the op's from take() until giveBack() returns
// it or a result says it was published; by slot, as the queue's other arrays.
import { OpLayout } from '../protocol/constants.js';
import type { PendingOp } from './op-records.js';
import type { Session } from './session.js';

const PER_OP = OpLayout.MAX_BACKUPS;

export class BackupBlocks {
  /** By slot × MAX_BACKUPS: each backup's session, block (-1: none) and size class. */
  private readonly sessions: Array<Session | undefined>;
  private readonly blocks: Int32Array;
  private readonly classes: Int32Array;
  /** What take() took for the op being described. */
  private readonly taken = new Int32Array(PER_OP);

  constructor(slots: number) {
    this.sessions = new Array<Session | undefined>(slots * PER_OP).fill(undefined);
    this.blocks = new Int32Array(slots * PER_OP).fill(-1);
    this.classes = new Int32Array(slots * PER_OP);
  }

  /** A block on each backup that needs one; false (none kept) when one has none until its grant arrives. */
  take(work: PendingOp): boolean {
    const sessions = work.backups!;
    const classes = work.backupClasses!;
    for (let b = 0; b < sessions.length; b++) {
      const cls = classes[b]!;
      const block = cls >= 0 ? (sessions[b]!.pools.take(cls) ?? -1) : -1;
      if (cls >= 0 && block < 0) {
        for (let j = 0; j < b; j++) if (this.taken[j]! >= 0) sessions[j]!.pools.giveBack(classes[j]!, this.taken[j]!);
        return false;
      }
      this.taken[b] = block;
    }
    return true;
  }

  /** The descriptor at word `o` (the op in `slot`) names its backups: each one's link and the block take() took there. */
  describe(words: Uint32Array, o: number, slot: number, work: PendingOp): void {
    const sessions = work.backups!;
    words[o + OpLayout.BACKUPS] = sessions.length;
    for (let b = 0; b < sessions.length; b++) {
      const cls = work.backupClasses![b]!;
      const block = this.taken[b]!;
      const w = o + OpLayout.BACKUP_0 + b * OpLayout.BACKUP_WORDS;
      words[w + OpLayout.BACKUP_CONNECTION] = sessions[b]!.link;
      words[w + OpLayout.BACKUP_BLOCK] = block < 0 ? 0 : block;
      words[w + OpLayout.BACKUP_BLOCK_UNITS] = cls >= 0 ? sessions[b]!.pools.unitsOf(cls) : 0;
      this.sessions[slot * PER_OP + b] = sessions[b];
      this.blocks[slot * PER_OP + b] = block;
      this.classes[slot * PER_OP + b] = cls;
    }
  }

  /** Gives back the blocks of the backups whose bit is set in `unused` (all: ~0). */
  giveBack(slot: number, unused: number): void {
    for (let b = 0; b < PER_OP; b++) {
      const at = slot * PER_OP + b;
      if ((unused & (1 << b)) !== 0 && this.blocks[at]! >= 0) this.sessions[at]!.pools.giveBack(this.classes[at]!, this.blocks[at]!);
    }
  }

  /** The op in `slot` is a replicated write. */
  names(slot: number): boolean {
    return this.sessions[slot * PER_OP] !== undefined;
  }

  /** The slot is free again: it names no backup. */
  clear(slot: number): void {
    for (let at = slot * PER_OP; at < (slot + 1) * PER_OP; at++) {
      this.sessions[at] = undefined;
      this.blocks[at] = -1;
    }
  }
}
