/**
 * The binding interface, mirroring YCSB's DB class. A binding may answer synchronously (the
 * harness then never touches the event loop, which keeps the basic binding cheap) or with a
 * promise (network stores).
 *
 * Buffers passed in (`fields`, `result`, `values`) are reused by the caller for the next
 * operation: a binding must not keep references to them after its answer settles.
 */
import type { Properties } from '../properties.js';
import { javaStringHashCode } from '../hash.js';
import type { ReadResult } from './read-result.js';

/** YCSB's Status: a name and a description; OK and BATCHED_OK count as success. */
export class Status {
  /** Position among the well-known statuses, or -1 for a binding's own status. */
  readonly code: number;
  /** Only the OK and BATCHED_OK singletons are success (YCSB compares identity, not names). */
  readonly isOk: boolean;

  constructor(readonly name: string, readonly description: string, code = -1, isOk = false) {
    this.code = code;
    this.isOk = isOk && code >= 0;
  }

  /** Java's Status.hashCode (decides YCSB's print order of return codes). */
  get javaHashCode(): number {
    let result = 1;
    result = (Math.imul(31, result) + javaStringHashCode(this.description)) | 0;
    result = (Math.imul(31, result) + javaStringHashCode(this.name)) | 0;
    return result;
  }

  static readonly OK = new Status('OK', 'The operation completed successfully.', 0, true);
  static readonly ERROR = new Status('ERROR', 'The operation failed.', 1);
  static readonly NOT_FOUND = new Status('NOT_FOUND', 'The requested record was not found.', 2);
  static readonly NOT_IMPLEMENTED = new Status('NOT_IMPLEMENTED', 'The operation is not implemented for the current binding.', 3);
  static readonly UNEXPECTED_STATE = new Status('UNEXPECTED_STATE', 'The operation reported success, but the result was not as expected.', 4);
  static readonly BAD_REQUEST = new Status('BAD_REQUEST', 'The request was not valid.', 5);
  static readonly FORBIDDEN = new Status('FORBIDDEN', 'The operation is forbidden.', 6);
  static readonly SERVICE_UNAVAILABLE = new Status('SERVICE_UNAVAILABLE', 'Dependant service for the current binding is not available.', 7);
  static readonly BATCHED_OK = new Status('BATCHED_OK', 'The operation has been batched by the binding to be executed later.', 8, true);

  static readonly WELL_KNOWN: readonly Status[] = [
    Status.OK, Status.ERROR, Status.NOT_FOUND, Status.NOT_IMPLEMENTED, Status.UNEXPECTED_STATE,
    Status.BAD_REQUEST, Status.FORBIDDEN, Status.SERVICE_UNAVAILABLE, Status.BATCHED_OK,
  ];
}

/** Field values of an insert or update. Values are produced on demand (see LazyFieldValues). */
export interface FieldValues {
  readonly size: number;
  fieldName(i: number): string;
  /** The i-th value as text (YCSB's values are printable ASCII). */
  fieldValue(i: number): string;
  /**
   * Optional, both or neither: the i-th value's length in bytes, and a copy of its bytes at
   * target[offset…] (returns the count), without making a string. Only for values that are
   * ASCII (so bytes and UTF-16 units are the same count); the same value fieldValue(i) gives.
   */
  valueLength?(i: number): number;
  writeValue?(i: number, target: Buffer, offset: number): number;
}

export type MaybePromise<T> = T | Promise<T>;

export interface DB {
  /** Called once per client thread before the first operation. */
  init(props: Properties): MaybePromise<void>;
  /** Called once per client thread after the last operation. */
  cleanup(): MaybePromise<void>;
  /** `fields` null means all fields; fill `result`. */
  read(table: string, key: string, fields: readonly string[] | null, result: ReadResult): MaybePromise<Status>;
  /** Up to `recordCount` records in key order from `startKey`; push one ReadResult per record. */
  scan(table: string, startKey: string, recordCount: number, fields: readonly string[] | null, result: ReadResult[]): MaybePromise<Status>;
  update(table: string, key: string, values: FieldValues): MaybePromise<Status>;
  insert(table: string, key: string, values: FieldValues): MaybePromise<Status>;
  delete(table: string, key: string): MaybePromise<Status>;
}

/** Copies field values into a plain object (for bindings that serialise a whole record). */
export function fieldValuesToObject(values: FieldValues): { [field: string]: string } {
  const out: { [field: string]: string } = {};
  for (let i = 0; i < values.size; i++) out[values.fieldName(i)] = values.fieldValue(i);
  return out;
}

export function isPromise<T>(value: MaybePromise<T>): value is Promise<T> {
  return typeof value === 'object' && value !== null && typeof (value as Promise<T>).then === 'function';
}
