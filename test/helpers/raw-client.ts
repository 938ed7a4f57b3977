// A raw connection to a kv-server, as a client that knows a token (or none)
// opens it, without KvClient: its hello, and single RDMA requests (READ, WRITE,
// atomics) posted with any address and rkey. For tests that act as a hostile
// or misbehaving client: taking a lock word by CAS, a read client's refused
// WRITE, another connection's rkey.
import type { ExecutionContext } from 'ava';

import { connectData } from '../../protocol/connect.js';
import { type Hello, decode } from '../../protocol/control.js';
import { Access, type Connection, Provider, SendFlag, type WorkRequest } from '../../native/index.js';
import type { KvServer } from '../../server/kv-server.js';
import { type Scheme, slow, testTimeoutMs } from './providers.js';

const SLOT = 4096;
/** The wrId of every request post() sends; the receives it posts are 0 to 3. */
const REQUEST = 99;

/** A request as post() takes it: the rkey is the hello's unless given. */
export type RawRequest = Omit<WorkRequest, 'wrId' | 'flags' | 'local' | 'localOffset' | 'rkey'> & { rkey?: number };

export interface RawClient {
  hello: Hello;
  conn: Connection;
  /** The 4 KiB a request writes from and reads into (a READ's data, an atomic's old value). */
  scratch: Buffer;
  /** Posts one signaled request from scratch and resolves its completion's status name (SUCCESS, REM_ACCESS_ERR, ...). */
  post(request: RawRequest): Promise<string>;
}

/** Connects to the server's first URL with `token` (undefined: none) and waits for its hello; closed at the test's end. */
export async function rawClient(t: Pick<ExecutionContext, 'teardown'>, scheme: Scheme, server: KvServer, token?: string): Promise<RawClient> {
  const provider = new Provider(scheme);
  t.teardown(() => provider.close());
  const cq = provider.createCq(64);
  const buffers = provider.allocate(8 * SLOT, Access.LOCAL_WRITE);
  const recvs = Array.from({ length: 4 }, (_, i) => ({ wrId: i, local: buffers, localOffset: i * SLOT, length: SLOT }));
  const conn = await provider.connect(server.urls[0]!, { cq, initialRecvs: recvs, privateData: connectData(token), timeoutMs: testTimeoutMs() });
  t.teardown(() => conn.disconnect());
  const [helloWc] = await cq.take(1, { timeoutMs: testTimeoutMs() });
  const hello = decode(buffers.bytes.subarray(helloWc!.wrId * SLOT, helloWc!.wrId * SLOT + helloWc!.byteLen));
  if (hello.t !== 'hello') throw new Error(`the server sent ${hello.t}, not a hello`);
  const post = async (request: RawRequest): Promise<string> => {
    conn.postSend([{ rkey: hello.region.rkey, ...request, wrId: REQUEST, flags: SendFlag.SIGNALED, local: buffers, localOffset: 7 * SLOT }]);
    for (;;) {
      // A request that fails flushes the receives too: wait for the request's own completion.
      const wc = (await cq.next({ timeoutMs: slow(10_000) })).find((c) => c.wrId === REQUEST);
      if (wc) return wc.statusName;
    }
  };
  return { hello, conn, scratch: buffers.bytes.subarray(7 * SLOT), post };
}
