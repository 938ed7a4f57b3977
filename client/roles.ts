// What the server's hello says this client may do. A read client's rkey is the
// region's READ-only registration: a write would fail at the NIC with
// REM_ACCESS_ERR and break the connection, so every operation but GET is
// refused here, before anything is queued or sent, with KV_READ_ONLY.
import { KvOp } from '../protocol/constants.js';
import type { Hello } from '../protocol/control.js';
import { KvReadOnlyError } from '../protocol/errors.js';
import { opName } from './op-names.js';

/** The error a `type` operation gets from a client with this hello, or undefined: allowed. */
export function roleRefusal(hello: Hello, type: KvOp, url: string): KvReadOnlyError | undefined {
  if (type === KvOp.GET || hello.role !== 'read') return undefined;
  return new KvReadOnlyError(`${opName(type)} refused: ${url} gave this client a read token (get, getMany and getWithVersion only)`);
}
