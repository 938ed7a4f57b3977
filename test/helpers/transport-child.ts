// A peer process for the transport suites, driven by argv, reporting over IPC.
//   faa  URL ADDR RKEY COUNT   add 1 to the word at ADDR COUNT times, report {sum}
//   hold URL                   connect, report {connected}, then wait to be killed
import { Opcode, Provider, SendFlag } from '../../native/index.js';
import { slow, testTimeoutMs } from './providers.js';

const [mode, url, ...rest] = process.argv.slice(2);
const send = (m: object): void => void process.send?.(m);

async function main(): Promise<void> {
  if (!url) throw new Error('usage: transport-child MODE URL ...');
  const provider = Provider.forUrl(url);
  const cq = provider.createCq(1024);
  const scratch = provider.allocate(4096);
  const connection = await provider.connect(url, { cq, timeoutMs: testTimeoutMs() });
  if (mode === 'hold') {
    send({ connected: true });
    setInterval(() => {}, 1 << 30);
    return;
  }
  if (mode === 'faa') {
    const [addr, rkey, count] = [BigInt(rest[0]!), Number(rest[1]), Number(rest[2])];
    const batch = 64;
    let done = 0;
    while (done < count) {
      const n = Math.min(batch, count - done);
      // Unsignaled but the last: its completion proves the others executed.
      connection.postSend(
        Array.from({ length: n }, (_, i) => ({
          wrId: done + i,
          opcode: Opcode.FETCH_AND_ADD,
          flags: i === n - 1 ? SendFlag.SIGNALED : 0,
          local: scratch,
          localOffset: (i % 64) * 8,
          length: 8,
          remoteAddr: addr,
          rkey,
          compareAdd: 1n,
        })),
      );
      const [wc] = await cq.take(1, { timeoutMs: slow(30_000) });
      if (wc!.statusName !== 'SUCCESS') throw new Error(`FETCH_AND_ADD failed: ${wc!.statusName}`);
      done += n;
    }
    send({ sum: done });
    connection.disconnect();
    provider.close();
    return;
  }
  throw new Error(`unknown mode ${mode}`);
}

main().catch((error: Error) => {
  send({ error: error.message });
  process.exitCode = 1;
});
