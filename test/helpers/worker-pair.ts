// Runs a connected pair inside a worker thread (its own addon instance) and
// reports what it saw. workerData: { scheme, foreignLkey }.
import { parentPort, workerData } from 'node:worker_threads';

import { Opcode, SendFlag } from '../../native/index.js';
import { connectPair } from './pair.js';

const { scheme, foreignLkey } = workerData as { scheme: 'shm' | 'rdma'; foreignLkey: number };
const p = await connectPair(scheme);
p.region.bytes.write('from a worker', 0);
p.clientConn.postSend([{ wrId: 1, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, length: 13, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
const [read] = await p.clientCq.take(1);
const text = p.scratch.bytes.subarray(0, 13).toString();
// An lkey of the main thread's addon instance means nothing here.
const fake = { ...p.scratch, lkey: foreignLkey } as typeof p.scratch;
p.clientConn.postSend([{ wrId: 2, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: fake, length: 8, remoteAddr: p.region.addr, rkey: p.region.rkey }]);
const [foreign] = await p.clientCq.take(1);
p.close();
parentPort?.postMessage({ read: read!.statusName, text, foreign: foreign!.statusName });
