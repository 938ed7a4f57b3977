// Ops written straight into a native client core's opWords and arena, for the
// tests that drive a core without a KvClient (core-connections, epoch-check).
import { type KvOp, OpLayout } from '../../native/constants.generated.js';
import type { ClientCore } from '../../native/index.js';

export interface CoreOp {
  type: KvOp;
  id: number;
  key: string;
  /** OpLayout.CONNECTION (0: the core's first). */
  connection?: number;
  value?: string;
  /** A granted heap block of 4 units (PUT, CAS; INCR and LOCK when they create their item). */
  block?: number;
  /** OpLayout.EPOCH (0: no configuration). */
  epoch?: number;
}

/** Writes `ops` as descriptors 0.. of the core's opWords, keys and values packed into its arena. */
export function writeOps(core: ClientCore, ops: readonly CoreOp[]): void {
  let at = 0;
  ops.forEach((op, i) => {
    const o = i * OpLayout.WORDS;
    core.opWords.fill(0, o, o + OpLayout.WORDS);
    core.opWords[o + OpLayout.TYPE] = op.type;
    core.opWords[o + OpLayout.ID] = op.id;
    core.opWords[o + OpLayout.CONNECTION] = op.connection ?? 0;
    core.opWords[o + OpLayout.EPOCH] = op.epoch ?? 0;
    const key = Buffer.from(op.key);
    core.opWords[o + OpLayout.KEY_OFFSET] = at;
    core.opWords[o + OpLayout.KEY_LEN] = key.copy(core.arena, at);
    at += key.length;
    if (op.value !== undefined) {
      const value = Buffer.from(op.value);
      core.opWords[o + OpLayout.VALUE_OFFSET] = at;
      core.opWords[o + OpLayout.VALUE_LEN] = value.copy(core.arena, at);
      at += value.length;
    }
    if (op.block !== undefined) {
      core.opWords[o + OpLayout.BLOCK] = op.block;
      core.opWords[o + OpLayout.BLOCK_UNITS] = 4;
    }
  });
}
