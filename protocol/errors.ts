// The one error family of rdma-kv. Every failure a caller can see is a KvError
// with a stable string `code`; retryable ones carry the `retryable` symbol so
// retry policies never parse messages (microsoft/etcd3's pattern).
// A missing key is not an error: get() resolves undefined.
import { KvStatus, statusName } from './constants.js';

/** Marks errors that may succeed when tried again (a server back, a lock freed). */
export const retryable: unique symbol = Symbol('rdma-kv.retryable');

export type KvErrorCode =
  | 'KV_TABLE_FULL'
  | 'KV_OUT_OF_MEMORY'
  | 'KV_VALUE_TOO_LARGE'
  | 'KV_KEY_TOO_LARGE'
  | 'KV_TIMEOUT'
  | 'KV_DISCONNECTED'
  | 'KV_AUTH'
  | 'KV_NO_NAMESPACE'
  | 'KV_PROTOCOL'
  | 'KV_LOCK_CONTENDED'
  | 'KV_TYPE_MISMATCH'
  | 'KV_VERSION_MISMATCH'
  | 'KV_CORRUPT'
  | 'KV_INVALID_ARGUMENT'
  | 'KV_READ_ONLY'
  | 'KV_BUFFER_TOO_SMALL'
  | 'KV_BAD_BUFFER'
  | 'KV_EPOCH_MOVED'
  | 'KV_READ_LEASE_LAPSED'
  | 'KV_INTERNAL'
  | `RDMA_${string}`;

export class KvError extends Error {
  readonly code: KvErrorCode;
  readonly [retryable]: boolean;
  constructor(code: KvErrorCode, message: string, isRetryable = false) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this[retryable] = isRetryable;
  }
}

export class KvTableFullError extends KvError {
  constructor(message = 'both buckets of the key and every displacement target are full') {
    super('KV_TABLE_FULL', message);
  }
}
export class KvOutOfMemoryError extends KvError {
  constructor(message = 'the server has no free heap block of this size') {
    super('KV_OUT_OF_MEMORY', message, true);
  }
}
export class KvValueTooLargeError extends KvError {
  constructor(message: string) {
    super('KV_VALUE_TOO_LARGE', message);
  }
}
export class KvKeyTooLargeError extends KvError {
  constructor(message: string) {
    super('KV_KEY_TOO_LARGE', message);
  }
}
export class KvTimeoutError extends KvError {
  constructor(message: string) {
    super('KV_TIMEOUT', message, true);
  }
}
export class KvDisconnectedError extends KvError {
  constructor(message: string) {
    super('KV_DISCONNECTED', message, true);
  }
}
export class KvAuthError extends KvError {
  constructor(message = 'the server rejected the token') {
    super('KV_AUTH', message);
  }
}
/** The client named a namespace (KvClientOptions.namespace) the server does not host. */
export class KvNamespaceError extends KvError {
  constructor(message: string) {
    super('KV_NO_NAMESPACE', message);
  }
}
export class KvProtocolError extends KvError {
  constructor(message: string) {
    super('KV_PROTOCOL', message);
  }
}
export class KvLockContendedError extends KvError {
  constructor(message: string) {
    super('KV_LOCK_CONTENDED', message, true);
  }
}
export class KvTypeMismatchError extends KvError {
  constructor(message: string) {
    super('KV_TYPE_MISMATCH', message);
  }
}
export class KvCorruptError extends KvError {
  constructor(message: string) {
    super('KV_CORRUPT', message, true);
  }
}
export class KvInvalidArgumentError extends KvError {
  constructor(message: string) {
    super('KV_INVALID_ARGUMENT', message);
  }
}
/**
 * The server gave this client a read token: put, delete, cas, incr, lock and putMany are refused
 * before anything is sent (the client's rkey could not write anyway: the NIC would refuse it).
 */
export class KvReadOnlyError extends KvError {
  constructor(message: string) {
    super('KV_READ_ONLY', message);
  }
}
/** An RDMA error completion: `code` is RDMA_<ibv_wc_status name>, e.g. RDMA_REM_ACCESS_ERR. */
export class KvRdmaError extends KvError {
  constructor(
    readonly wcStatus: string,
    message: string,
  ) {
    super(`RDMA_${wcStatus}`, message, true);
  }
}

/**
 * A value does not fit where it was to land: the buffer given to getInto(), or (get() of a value
 * larger than the client's scratch holds) no buffer at all. `needed` is the value's length.
 */
export class KvBufferTooSmallError extends KvError {
  constructor(
    readonly needed: number,
    message: string,
  ) {
    super('KV_BUFFER_TOO_SMALL', message);
  }
}

/** A registered buffer (allocBuffer) used after free(), or a range outside it. */
export class KvBadBufferError extends KvError {
  constructor(message: string) {
    super('KV_BAD_BUFFER', message);
  }
}

/**
 * A defect of the client itself: handing out an op's result threw. The op fails with this (its
 * `cause` is what was thrown) instead of never settling; the other ops of that hand-out are
 * delivered as usual. Worth a bug report.
 */
export class KvInternalError extends KvError {
  constructor(message: string, cause: unknown) {
    super('KV_INTERNAL', message);
    this.cause = cause;
  }
}

export function isRetryable(error: unknown): boolean {
  return error instanceof KvError && error[retryable];
}

/** The error for a native result status (OK and NOT_FOUND are not errors); `lost`: why the op's connection is gone, where known. */
export function errorForStatus(status: number, detail: number, what: string, lost?: string): KvError {
  switch (status) {
    case KvStatus.TABLE_FULL: return new KvTableFullError(`${what}: both buckets of the key and every displacement target are full`);
    case KvStatus.OUT_OF_MEMORY: return new KvOutOfMemoryError(`${what}: the server's heap is full`);
    case KvStatus.VALUE_TOO_LARGE: return new KvValueTooLargeError(`${what}: value too large`);
    case KvStatus.KEY_TOO_LARGE: return new KvKeyTooLargeError(`${what}: key too large`);
    case KvStatus.TIMEOUT: return new KvTimeoutError(`${what}: timed out (${detail} retries)`);
    case KvStatus.DISCONNECTED: return new KvDisconnectedError(`${what}: the connection to the server is gone${lost ? ` (${lost})` : ''}`);
    case KvStatus.LOCK_CONTENDED: return new KvLockContendedError(`${what}: the key's buckets stayed locked (${detail} tries)`);
    case KvStatus.TYPE_MISMATCH: return new KvTypeMismatchError(`${what}: the key holds another kind of item (bytes, a counter, a lock) than this operation works on`);
    case KvStatus.VERSION_MISMATCH: return new KvError('KV_VERSION_MISMATCH', `${what}: the version did not match`);
    case KvStatus.CORRUPT:
      return new KvCorruptError(detail > 0 ? `${what}: the item failed its checksum ${detail} times` : `${what}: the server's region holds damage where this key lives (a slot outside the heap, or an epoch word in no known state)`);
    case KvStatus.EPOCH_MOVED: return new KvError('KV_EPOCH_MOVED', `${what}: the key's hash slot is at epoch ${detail} on this server, not at the writer's; nothing was written (refresh the configuration)`, true);
    case KvStatus.READ_LEASE_LAPSED: return new KvError('KV_READ_LEASE_LAPSED', `${what}: the server's read lease had lapsed when the answer came (it may be cut off from etcd, and another replica may have taken over): no answer is given, since it could be stale (a get changed nothing; an incr may have added its delta)`, true);
    case KvStatus.BUFFER_TOO_SMALL: return new KvBufferTooSmallError(detail, `${what}: the value is ${detail} bytes: it needs a buffer of at least ${detail} bytes (getInto with an allocBuffer of that size)`);
    case KvStatus.BAD_BUFFER: return new KvBadBufferError(`${what}: the registered buffer was freed, or the range lies outside it`);
    case KvStatus.RDMA_ERROR: {
      const name = statusName(detail);
      return new KvRdmaError(name, `${what}: RDMA error completion ${name}`);
    }
    default: return new KvProtocolError(`${what}: protocol error (status ${status})`);
  }
}
