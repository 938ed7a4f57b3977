// A connected pair of queue pairs: a "server" with a region open to remote
// access and a "client" with a local scratch region, each in its own provider
// (two providers in one process behave like two hosts).
import {
  type CompletionQueue,
  type Connection,
  type MemoryRegion,
  Access,
  Provider,
  access,
} from '../../native/index.js';
import { type Scheme, listenUrl, testTimeoutMs } from './providers.js';

export interface Pair {
  server: Provider;
  client: Provider;
  serverConn: Connection;
  clientConn: Connection;
  serverCq: CompletionQueue;
  clientCq: CompletionQueue;
  /** Server memory open to READ, WRITE and atomics. */
  region: MemoryRegion;
  /** Server receive buffers: serverRecvs slots of recvBytes, wrIds 1000 + slot. */
  recvRegion: MemoryRegion;
  /** Client scratch memory (LOCAL_WRITE). */
  scratch: MemoryRegion;
  url: string;
  close(): void;
}

export interface PairOptions {
  regionBytes?: number;
  regionAccess?: number;
  /** The server's remote-access region, registered by the caller instead (regionBytes and regionAccess unused). */
  region?: (server: Provider) => MemoryRegion;
  scratchBytes?: number;
  cqDepth?: number;
  serverRecvs?: number;
  recvBytes?: number;
  /** The client side's provider and CQ, shared with other pairs (one client core drives several servers); close() leaves them open. */
  client?: Provider;
  clientCq?: CompletionQueue;
}

export async function connectPair(scheme: Scheme, options: PairOptions = {}): Promise<Pair> {
  const server = new Provider(scheme);
  const client = options.client ?? new Provider(scheme);
  const region = options.region?.(server) ?? server.allocate(options.regionBytes ?? 1 << 20, options.regionAccess ?? access.REMOTE_ALL);
  const serverCq = server.createCq(options.cqDepth ?? 1024);
  const recvBytes = options.recvBytes ?? 4096;
  const serverRecvs = options.serverRecvs ?? 0;
  const recvRegion = server.allocate(Math.max(1, serverRecvs) * recvBytes, Access.LOCAL_WRITE);
  const listener = server.listen(listenUrl(scheme));
  const accepted = new Promise<Connection>((resolve, reject) => {
    server.once('connectRequest', (request) => {
      try {
        const initialRecvs = Array.from({ length: serverRecvs }, (_, i) => ({
          wrId: 1000 + i,
          local: recvRegion,
          localOffset: i * recvBytes,
          length: recvBytes,
        }));
        const connection = request.accept({ cq: serverCq, initialRecvs });
        connection.once('established', () => resolve(connection));
      } catch (error) {
        reject(error as Error);
      }
    });
  });
  const scratch = client.allocate(options.scratchBytes ?? 1 << 20, Access.LOCAL_WRITE);
  const clientCq = options.clientCq ?? client.createCq(options.cqDepth ?? 1024);
  const clientConn = await client.connect(listener.url, { cq: clientCq, privateData: Buffer.from('pair'), timeoutMs: testTimeoutMs() });
  const serverConn = await accepted;
  return {
    server,
    client,
    serverConn,
    clientConn,
    serverCq,
    clientCq,
    region,
    recvRegion,
    scratch,
    url: listener.url,
    close() {
      clientConn.disconnect();
      serverConn.disconnect();
      listener.close();
      if (options.client === undefined) client.close();
      server.close();
    },
  };
}
