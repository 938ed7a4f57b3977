// Whether a view of a client core's scratch memory keeps the core (and the
// memory) alive once nothing else refers to it. Run with --expose-gc;
// reports {baseline, withView, afterView, read} over IPC: rdma-kv mappings
// with no session, while only a view of scratch is held, and after it is
// dropped; `read` is a byte read through the view after the GC ran.
import { readFileSync } from 'node:fs';

import { Session } from '../../client/session.js';
import { KvServer } from '../../server/kv-server.js';
import { listenUrl, slow } from './providers.js';

const regionMaps = () => readFileSync('/proc/self/maps', 'utf8').split('\n').filter((l) => l.includes('/memfd:rdma-kv ')).length;

async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) {
    globalThis.gc!();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A session's scratch, as a 16-byte view; the session itself is closed and unreachable. */
async function scratchView(url: string): Promise<Buffer> {
  const session = await Session.open({ url, scratchBytes: 1 << 20 }, slow(5000));
  const view = session.core.scratch.subarray(0, 16);
  session.close();
  return view;
}

const server = await KvServer.start({ listen: [listenUrl('shm')], memoryBytes: 16 << 20 });
await settle();
const baseline = regionMaps();
let view: Buffer | undefined = await scratchView(server.urls[0]!);
await settle();
const withView = regionMaps();
const read = view[0]!;
view = undefined;
await settle();
const afterView = regionMaps();
await server.close();
process.send!({ baseline, withView, afterView, read });
