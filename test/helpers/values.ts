// What kv-child's writers write and lock, apart from the rest of kv.ts: kv-child runs outside
// ava, and kv.ts declares an ava hook.

/** The lock kv-child's churn writers take and release (test/cluster/replicated-helpers.ts checks its history). */
export const CHURN_LOCK = 'flock';

/**
 * A value that proves itself: [writer u32][seq u32][length u32] then bytes
 * derived from all three. A torn read, or bytes nobody wrote, fail validate().
 */
export function selfValidating(writer: number, seq: number, length: number): Buffer {
  const value = Buffer.alloc(Math.max(12, length));
  value.writeUInt32LE(writer, 0);
  value.writeUInt32LE(seq, 4);
  value.writeUInt32LE(value.length, 8);
  let x = (writer * 2654435761 + seq * 40503 + value.length) >>> 0;
  for (let i = 12; i < value.length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    value[i] = x >>> 24;
  }
  return value;
}

export function validate(value: Buffer): { writer: number; seq: number } | string {
  if (value.length < 12) return `short value (${value.length} bytes)`;
  const writer = value.readUInt32LE(0);
  const seq = value.readUInt32LE(4);
  if (value.readUInt32LE(8) !== value.length) return `length field ${value.readUInt32LE(8)} for ${value.length} bytes`;
  return selfValidating(writer, seq, value.length).equals(value) ? { writer, seq } : `bytes of writer ${writer} seq ${seq} do not match`;
}
