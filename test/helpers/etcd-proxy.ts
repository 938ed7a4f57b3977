// A TCP proxy in front of the test's etcd, for a client or member whose etcd
// link a test cuts (self-fence.test.ts, rebalance.test.ts) or stalls: its
// connections stay up and carry nothing, as across a partition that drops
// packets (close-etcd.test.ts).
import { type Server, type Socket, connect, createServer } from 'node:net';

/** A TCP proxy to etcd that the test can cut: every connection through it is dropped, and new ones too. */
export class EtcdProxy {
  private readonly sockets = new Set<Socket>();
  private readonly pairs: Array<[Socket, Socket]> = [];
  private cutOff = false;
  private stalled = false;

  private constructor(private readonly server: Server, readonly url: string) {}

  static async start(target: string): Promise<EtcdProxy> {
    const { hostname, port } = new URL(target);
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const proxy = new EtcdProxy(server, `http://127.0.0.1:${(server.address() as { port: number }).port}`);
    server.on('connection', (inbound) => {
      if (proxy.cutOff) return void inbound.destroy();
      if (proxy.stalled) {
        // Taken in, never answered.
        proxy.sockets.add(inbound);
        inbound.on('error', () => undefined);
        inbound.on('close', () => proxy.sockets.delete(inbound));
        return;
      }
      const outbound = connect(Number(port), hostname);
      proxy.pairs.push([inbound, outbound]);
      for (const socket of [inbound, outbound]) {
        proxy.sockets.add(socket);
        socket.on('error', () => undefined);
        socket.on('close', () => {
          proxy.sockets.delete(socket);
          inbound.destroy();
          outbound.destroy();
        });
      }
      inbound.pipe(outbound).pipe(inbound);
    });
    return proxy;
  }

  cut(): void {
    this.cutOff = true;
    for (const socket of this.sockets) socket.destroy();
  }

  /** Every connection stays open and carries nothing more, either way; new ones are taken in and never answered. */
  stall(): void {
    this.stalled = true;
    for (const [inbound, outbound] of this.pairs) {
      inbound.unpipe(outbound);
      outbound.unpipe(inbound);
      inbound.pause();
      outbound.pause();
    }
  }

  heal(): void {
    this.cutOff = false;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

