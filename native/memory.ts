// Memory and its registrations: what a work request's local buffer is, and
// what a peer needs to reach a region (its RemoteRegion).
import { type NativeMemory, type NativeMemoryRegion, type NativeWindow, addon } from './addon.js';
import { Access } from './constants.generated.js';

/** Shareable memory (a sealed memfd, or a file that survives restarts). */
export class Memory {
  /** @internal */ readonly native: NativeMemory;
  /** A Buffer over the whole mapping; it keeps the mapping alive while referenced. */
  readonly bytes: Buffer;
  /**
   * `hugePages` (anonymous memory only): hugetlb pages when enough are reserved, else
   * transparent huge pages where the kernel allows them for shmem; `pages` says what it got.
   */
  constructor(length: number, path?: string, options: { hugePages?: boolean } = {}) {
    this.native = new addon.Memory(length, path, options.hugePages === true);
    this.bytes = Buffer.from(this.native.buffer());
  }
  /** The pages it is on ('hugetlb', 'thp': transparent huge pages asked for, '4k'), and why not huge. */
  get pages(): { kind: 'hugetlb' | 'thp' | '4k'; note: string } {
    return { kind: this.native.pageKind, note: this.native.pageNote };
  }
  get length(): number {
    return this.native.length;
  }
  /** A file-backed memory whose file already held data when it was opened. */
  get existed(): boolean {
    return this.native.existed;
  }
}

export class MemoryRegion {
  constructor(
    /** @internal */ readonly native: NativeMemoryRegion,
    readonly memory: Memory,
    readonly offset: number,
  ) {}
  get lkey(): number {
    return this.native.lkey;
  }
  get rkey(): number {
    return this.native.rkey;
  }
  /** The address peers use for this region's first byte. */
  get addr(): bigint {
    return this.native.addr;
  }
  get length(): number {
    return this.native.length;
  }
  /** The region's bytes, as a view of the memory. */
  get bytes(): Buffer {
    return this.memory.bytes.subarray(this.offset, this.offset + this.native.length);
  }
  /** What a peer needs to reach this region: plain, serializable. */
  remote(): RemoteRegion {
    return { addr: this.native.addr, rkey: this.native.rkey, length: this.native.length };
  }
  deregister(): void {
    this.native.deregister();
  }
}

/**
 * A memory window (Connection.bindWindow): an rkey of its own over part of a region, which only
 * the peer of the connection it was bound on can use, with at most its access; any other use
 * fails at the device with REM_ACCESS_ERR. It ends with invalidate() or with its connection
 * (disconnect, failure).
 */
export class MemoryWindow {
  constructor(
    /** @internal */ readonly native: NativeWindow,
    readonly region: MemoryRegion,
  ) {}
  get rkey(): number {
    return this.native.rkey;
  }
  /** The address peers use for the window's first byte. */
  get addr(): bigint {
    return this.native.addr;
  }
  get length(): number {
    return this.native.length;
  }
  get access(): number {
    return this.native.access;
  }
  /** Bound, not yet invalidated (by invalidate() or by its connection's end). */
  get valid(): boolean {
    return this.native.valid;
  }
  /** Once it returns, the peer's requests with this rkey fail with REM_ACCESS_ERR. Idempotent. */
  invalidate(): void {
    this.native.invalidate();
  }
  remote(): RemoteRegion {
    return { addr: this.native.addr, rkey: this.native.rkey, length: this.native.length };
  }
}

/** A peer's region: address, rkey and length (jonhoo/rust-ibverbs' RemoteMemorySlice). */
export interface RemoteRegion {
  addr: bigint;
  rkey: number;
  length: number;
}

export const access = {
  /** Everything a server region offers its clients. */
  REMOTE_ALL: Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC,
} as const;
