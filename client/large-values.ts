// Large values: registered, reusable buffers (KvClient.allocBuffer) that the
// client core reads values into and writes values from directly, and the
// registered bounce buffers that carry a large value given as a plain Buffer or
// string (one copy). docs/api.md, "Large values"; docs/protocol.md says how the
// core moves them (header and key through scratch, the value through the buffer).
//
// Ownership: a registered buffer is the caller's from allocBuffer until
// freeBuffer; its registration (not its memory, which lives while a Buffer views
// it) ends at free, or when the last op using it ends if one is in flight. Bounce
// buffers are this module's: borrowed for one op, kept (a few per size) for the next.
import { freeRegistered, registeredBuffer } from '../native/index.js';
import { KvBadBufferError, KvInvalidArgumentError } from '../protocol/errors.js';

interface Registered {
  readonly id: number;
  freed: boolean;
  /** Ops in flight that name it: its registration ends only after the last. */
  uses: number;
}

/** A registered range an op names (OpLayout.EXT_*). */
export interface ExtRef {
  readonly id: number;
  readonly offset: number;
  readonly length: number;
  readonly entry: Registered;
}

const registry = new WeakMap<ArrayBufferLike, Registered>();
/** Whether allocBuffer ever ran: until then no value can be registered, and extOf skips the lookup (every PUT asks). */
let anyRegistered = false;

/** A registered, reusable buffer of `bytes` (1 byte to 4 GiB - 1). */
export function allocBuffer(bytes: number): Buffer {
  if (!Number.isSafeInteger(bytes) || bytes < 1 || bytes > 0xffffffff) {
    throw new KvInvalidArgumentError(`allocBuffer: ${String(bytes)} bytes: a registered buffer is 1 byte to 4 GiB - 1`);
  }
  const { id, buffer } = registeredBuffer(bytes);
  registry.set(buffer.buffer, { id, freed: false, uses: 0 });
  anyRegistered = true;
  return buffer;
}

/** Ends a registered buffer's registration (at once, or when its last op ends). Later ops naming it reject with KV_BAD_BUFFER. */
export function freeBuffer(buffer: Buffer): void {
  const entry = registry.get(buffer.buffer);
  if (!entry || entry.freed) return;
  entry.freed = true;
  if (entry.uses === 0) freeRegistered(entry.id);
}

/** The registered range `buffer` views; 'freed' for a freed one; undefined for a plain Buffer. */
export function extOf(buffer: Buffer): ExtRef | 'freed' | undefined {
  if (!anyRegistered) return undefined;
  const entry = registry.get(buffer.buffer);
  if (!entry) return undefined;
  if (entry.freed) return 'freed';
  return { id: entry.id, offset: buffer.byteOffset, length: buffer.length, entry };
}

export const freedError = (what: string): KvBadBufferError => new KvBadBufferError(`${what}: a registered buffer used after freeBuffer()`);

/**
 * Settles after a turn of the event loop. On shm a large op runs inside its submit (tens of ms
 * for 64 MiB: the copy and its checksum), and the op queue looks at the clock only every 16
 * submits: a caller awaiting large ops back to back would keep timers (keepalive) from running
 * for a second or more. A turn per large op costs microseconds against its milliseconds.
 */
function afterTurn<T>(value: T): Promise<T> {
  return new Promise((resolve) => setImmediate(resolve, value));
}

/** Keeps `ref`'s registration for as long as `op` runs. */
export function holding<T>(ref: ExtRef, op: () => Promise<T>): Promise<T> {
  const entry = ref.entry;
  entry.uses++;
  const done = (): void => {
    if (--entry.uses === 0 && entry.freed) freeRegistered(entry.id);
  };
  return op().then(
    (value) => {
      done();
      return afterTurn(value);
    },
    (error: unknown) => {
      done();
      return afterTurn(undefined).then(() => Promise.reject(error as Error));
    },
  );
}

// ---- bounce buffers --------------------------------------------------------------------

/** Spare bounce buffers by size (powers of two from 1 MiB), at most SPARES each. */
const spares = new Map<number, Buffer[]>();
const SPARES = 2;
const sizeFor = (bytes: number): number => Math.max(1 << 20, 2 ** Math.ceil(Math.log2(Math.max(1, bytes))));

/** A registered buffer of at least `bytes`, for one op. */
export function borrow(bytes: number): Buffer {
  const size = sizeFor(bytes);
  return spares.get(size)?.pop() ?? allocBuffer(size);
}

export function giveBack(buffer: Buffer): void {
  const list = spares.get(buffer.length) ?? [];
  if (list.length < SPARES) {
    list.push(buffer);
    spares.set(buffer.length, list);
  } else {
    freeBuffer(buffer);
  }
}

/** Runs `op` with a borrowed buffer, giving it back when it settles. */
export function withBounce<T>(bytes: number, op: (buffer: Buffer) => Promise<T>): Promise<T> {
  const buffer = borrow(bytes);
  return op(buffer).then(
    (value) => {
      giveBack(buffer);
      return value;
    },
    (error: unknown) => {
      giveBack(buffer);
      throw error;
    },
  );
}
