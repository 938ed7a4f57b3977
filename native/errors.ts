// Errors of the transport layer, and the names of verbs' numbers in messages.
import { Opcode, WcStatus } from './constants.generated.js';

/** Any failure of the transport layer. `code` is a stable string (ERR_RKV_*, EINVAL, ENOMEM, REJECTED, ...). */
export class TransportError extends Error {
  readonly code: string;
  /** The private data of a rejection. */
  readonly privateData?: Buffer;
  constructor(code: string, message: string, privateData?: Buffer) {
    super(message);
    this.name = 'TransportError';
    this.code = code;
    if (privateData) this.privateData = privateData;
  }
}

/** An error the addon threw (an Error with a string code) as a TransportError; anything else as it is. */
export function transportError(error: unknown): unknown {
  if (error instanceof Error && typeof (error as { code?: unknown }).code === 'string') {
    const e = new TransportError((error as Error & { code: string }).code, error.message);
    const posted = (error as { posted?: number }).posted;
    if (posted !== undefined) Object.assign(e, { posted });
    return e;
  }
  return error;
}

/** Rethrows what the addon threw, as transportError() makes it. */
export function rethrow(error: unknown): never {
  throw transportError(error);
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
