// Counts this process's fds and rdma-kv mappings around full transport
// lifecycles, so a test can prove close() and the GC free everything.
// Run with --expose-gc; reports {before, afterClose, afterGc} over IPC.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

import { Opcode, SendFlag } from '../../native/index.js';
import { connectPair } from './pair.js';
import { type Scheme, slow } from './providers.js';

interface Counts {
  fds: number;
  sockets: number;
  regionMaps: number;
  connectionMaps: number;
}

function count(): Counts {
  const links = readdirSync('/proc/self/fd').map((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      return '';
    }
  });
  const maps = readFileSync('/proc/self/maps', 'utf8').split('\n');
  return {
    fds: links.length,
    sockets: links.filter((l) => l.startsWith('socket:')).length,
    regionMaps: maps.filter((l) => l.includes('/memfd:rdma-kv ')).length,
    connectionMaps: maps.filter((l) => l.includes('/memfd:rdma-kv-conn')).length,
  };
}

async function cycle(scheme: Scheme): Promise<Counts> {
  const p = await connectPair(scheme, { serverRecvs: 8 });
  // Work outstanding at close: receives posted, a READ posted but never polled.
  p.clientConn.postRecv(Array.from({ length: 8 }, (_, i) => ({ wrId: i, local: p.scratch, localOffset: i * 64, length: 64 })));
  p.clientConn.postSend([{ wrId: 99, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, length: 64, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
  p.close();
  await new Promise((resolve) => setTimeout(resolve, slow(50)));
  return count();
}

async function gcAndCount(): Promise<Counts> {
  for (let i = 0; i < 4; i++) {
    (globalThis as { gc?: () => void }).gc?.();
    await new Promise((resolve) => setTimeout(resolve, slow(20)));
  }
  return count();
}

const scheme = (process.argv[2] ?? 'shm') as Scheme;
await cycle(scheme); // loads everything lazily loaded once
const before = await gcAndCount();
let afterClose: Counts = before;
for (let i = 0; i < 5; i++) afterClose = await cycle(scheme);
const afterGc = await gcAndCount();
process.send?.({ before, afterClose, afterGc });
