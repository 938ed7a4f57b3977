// Errors of the transport layer, and the names of verbs' numbers in messages.
import { Opcode, WcStatus } from './constants.generated.js';

/**
 * Any failure of the transport layer, and whatever the addon throws: native
 * code constructs these itself (native/addon.ts hands this class over when it
 * loads the addon). `code` is a stable string (ERR_RKV_*, ERR_INVALID_ARG_TYPE,
 * EINVAL, ENOMEM, REJECTED, ...).
 */
export class TransportError extends Error {
  readonly code: string;
  /** The private data of a rejection. */
  readonly privateData?: Buffer;
  /** A post that failed part way: how many of its requests were posted (the ones before the failing one). */
  declare readonly posted?: number;
  constructor(code: string, message: string, privateData?: Buffer) {
    super(message);
    this.name = 'TransportError';
    this.code = code;
    if (privateData) this.privateData = privateData;
  }
}

const statusNames = new Map<number, string>(Object.entries(WcStatus).map(([name, value]) => [value, name]));
const opcodeNames = new Map<number, string>(Object.entries(Opcode).map(([name, value]) => [value, name]));
/** "REM_ACCESS_ERR" for 10, as ibv_wc_status names it. */
export function statusName(status: number): string {
  return statusNames.get(status) ?? `UNKNOWN_${status}`;
}
export function opcodeName(opcode: number): string {
  return opcodeNames.get(opcode) ?? `UNKNOWN_${opcode}`;
}
