/** worker_threads entry: one client thread per worker, so N threads really run in parallel. */
import { parentPort, workerData } from 'node:worker_threads';
import { runClientThread } from './client-thread.js';
import type { ClientThreadData, ThreadMessage } from './protocol.js';

const port = parentPort;
if (!port) throw new Error('worker.js must run as a worker thread');
const start = new Promise<void>((resolve) => {
  port.once('message', () => resolve());
});
await runClientThread(workerData as ClientThreadData, (m: ThreadMessage) => port.postMessage(m), start);
