// Work requests and completions as objects, and their words in the batch-raw
// buffers (WrLayout, RecvLayout, WcLayout of constants.def): the hot paths
// write the words themselves; tests and control paths use these.
import { type Opcode, RecvLayout, WcLayout, type WcStatus, WrLayout } from './constants.generated.js';
import { statusName } from './errors.js';
import type { MemoryRegion } from './memory.js';

export interface WorkRequest {
  wrId?: number;
  opcode: Opcode;
  /** SendFlag bits; SIGNALED asks for a completion on success. */
  flags?: number;
  /** The local buffer: a registered region and an offset in it. */
  local?: MemoryRegion;
  localOffset?: number;
  length?: number;
  /** The peer's address (as it published it) and its rkey. */
  remoteAddr?: bigint;
  rkey?: number;
  /** CMP_AND_SWP: the expected value; FETCH_AND_ADD: the addend. */
  compareAdd?: bigint;
  swap?: bigint;
  imm?: number;
}

export interface RecvRequest {
  wrId?: number;
  local: MemoryRegion;
  localOffset?: number;
  length: number;
}

export interface Completion {
  wrId: number;
  status: WcStatus;
  statusName: string;
  opcode: Opcode;
  byteLen: number;
  imm: number;
  flags: number;
  qpNum: number;
}

const MASK32 = 0xffffffffn;

/** Writes one work request into a send buffer at slot `index` (WrLayout). */
export function writeWorkRequest(buffer: Uint32Array, index: number, wr: WorkRequest): void {
  const o = index * WrLayout.WORDS;
  const wrId = wr.wrId ?? 0;
  buffer[o + WrLayout.WR_ID_LO] = wrId >>> 0;
  buffer[o + WrLayout.WR_ID_HI] = Math.floor(wrId / 0x100000000);
  buffer[o + WrLayout.OPCODE] = wr.opcode;
  buffer[o + WrLayout.FLAGS] = wr.flags ?? 0;
  buffer[o + WrLayout.LKEY] = wr.local?.lkey ?? 0;
  buffer[o + WrLayout.LOCAL_OFFSET] = wr.localOffset ?? 0;
  buffer[o + WrLayout.LENGTH] = wr.length ?? 0;
  buffer[o + WrLayout.RKEY] = wr.rkey ?? 0;
  const remote = wr.remoteAddr ?? 0n;
  buffer[o + WrLayout.REMOTE_ADDR_LO] = Number(remote & MASK32);
  buffer[o + WrLayout.REMOTE_ADDR_HI] = Number((remote >> 32n) & MASK32);
  const compareAdd = BigInt.asUintN(64, wr.compareAdd ?? 0n);
  buffer[o + WrLayout.COMPARE_ADD_LO] = Number(compareAdd & MASK32);
  buffer[o + WrLayout.COMPARE_ADD_HI] = Number(compareAdd >> 32n);
  const swap = BigInt.asUintN(64, wr.swap ?? 0n);
  buffer[o + WrLayout.SWAP_LO] = Number(swap & MASK32);
  buffer[o + WrLayout.SWAP_HI] = Number(swap >> 32n);
  buffer[o + WrLayout.IMM] = (wr.imm ?? 0) >>> 0;
}

/** Writes one receive request into a receive buffer at slot `index` (RecvLayout). */
export function writeRecvRequest(buffer: Uint32Array, index: number, rr: RecvRequest): void {
  const o = index * RecvLayout.WORDS;
  const wrId = rr.wrId ?? 0;
  buffer[o + RecvLayout.WR_ID_LO] = wrId >>> 0;
  buffer[o + RecvLayout.WR_ID_HI] = Math.floor(wrId / 0x100000000);
  buffer[o + RecvLayout.LKEY] = rr.local.lkey;
  buffer[o + RecvLayout.LOCAL_OFFSET] = rr.localOffset ?? 0;
  buffer[o + RecvLayout.LENGTH] = rr.length;
}

/** Reads completion `index` from a completions view (WcLayout words, the first at word `first`). */
export function readCompletion(words: Uint32Array, index: number, first = 0): Completion {
  const o = first + index * WcLayout.WORDS;
  const status = words[o + WcLayout.STATUS]! as WcStatus;
  return {
    wrId: words[o + WcLayout.WR_ID_LO]! + words[o + WcLayout.WR_ID_HI]! * 0x100000000,
    status,
    statusName: statusName(status),
    opcode: words[o + WcLayout.OPCODE]! as Opcode,
    byteLen: words[o + WcLayout.BYTE_LEN]!,
    imm: words[o + WcLayout.IMM]!,
    flags: words[o + WcLayout.FLAGS]!,
    qpNum: words[o + WcLayout.QP_NUM]!,
  };
}
