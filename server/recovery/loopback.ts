// RDMA atomics on the server's own region, posted through a fabric's loopback
// queue pair: lock words and items' atomic words change only by RDMA atomics
// (docs/protocol.md's atomics rule), so the server releases a lock as a
// client would, never with a CPU store. One caller at a time: the fabric's
// scratch buffer holds the results (callers run on a Chain, chain.ts).
import { Opcode, SendFlag } from '../../native/index.js';
import { type Fabric, LOOPBACK_BATCH } from '../fabric.js';

export interface RegionAtomic {
  /** region offset of the 8-byte word */
  at: number;
  opcode: typeof Opcode.FETCH_AND_ADD | typeof Opcode.CMP_AND_SWP;
  /** the addend (FETCH_AND_ADD) or the expected word (CMP_AND_SWP) */
  compareAdd: bigint;
  swap?: bigint;
}

/**
 * Runs `ops` through the fabric's loopback queue pair, LOOPBACK_BATCH per doorbell with the
 * last one signaled (an error completion of any one is reported); returns the word each found.
 * `what` names the work in errors. The fabric must have a loopback.
 */
export async function loopbackAtomics(fabric: Fabric, ops: readonly RegionAtomic[], what: string): Promise<bigint[]> {
  const loop = fabric.loopback!;
  const found: bigint[] = [];
  for (let i = 0; i < ops.length; i += LOOPBACK_BATCH) {
    const batch = ops.slice(i, i + LOOPBACK_BATCH);
    loop.connection.postSend(
      batch.map(({ at, opcode, compareAdd, swap }, k) => ({
        wrId: k,
        opcode,
        flags: k === batch.length - 1 ? SendFlag.SIGNALED : 0,
        local: loop.scratch,
        localOffset: k * 8,
        length: 8,
        remoteAddr: fabric.region.addr + BigInt(at),
        rkey: loop.rkey,
        compareAdd,
        swap,
      })),
    );
    const [wc] = await loop.cq.take(1, { timeoutMs: 10_000 });
    if (wc?.statusName !== 'SUCCESS') throw new Error(`${what}: ${wc?.statusName}`);
    for (let k = 0; k < batch.length; k++) found.push(loop.scratch.bytes.readBigUInt64LE(k * 8));
  }
  return found;
}
