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
  /** A replicated write's backups: each one's connection and granted block (4 units). */
  backups?: readonly { connection: number; block: number }[];
  /** CAS: OpLayout.EXPECTED_VERSION. */
  expectedVersion?: bigint;
  /** INCR: OpLayout.DELTA (0 when absent: reads the counter, creating it at 0 if missing). */
  delta?: bigint;
  /** UNLOCK: OpLayout.TOKEN, the token its LOCK answered. */
  token?: number;
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
    if (op.expectedVersion !== undefined) {
      core.opWords[o + OpLayout.EXPECTED_VERSION_LO] = Number(op.expectedVersion & 0xffffffffn);
      core.opWords[o + OpLayout.EXPECTED_VERSION_HI] = Number(op.expectedVersion >> 32n);
    }
    if (op.delta !== undefined) {
      core.opWords[o + OpLayout.DELTA_LO] = Number(op.delta & 0xffffffffn);
      core.opWords[o + OpLayout.DELTA_HI] = Number(op.delta >> 32n);
    }
    if (op.token !== undefined) core.opWords[o + OpLayout.TOKEN] = op.token;
    core.opWords[o + OpLayout.BACKUPS] = op.backups?.length ?? 0;
    op.backups?.forEach((backup, k) => {
      const b = o + OpLayout.BACKUP_0 + k * OpLayout.BACKUP_WORDS;
      core.opWords[b + OpLayout.BACKUP_CONNECTION] = backup.connection;
      core.opWords[b + OpLayout.BACKUP_BLOCK] = backup.block;
      core.opWords[b + OpLayout.BACKUP_BLOCK_UNITS] = 4;
    });
  });
}
