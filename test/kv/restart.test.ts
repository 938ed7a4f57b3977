// KV conformance: a server SIGKILLed under load and restarted on its region
// file serves every acknowledged PUT, with no lock left held.
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import test from 'ava';

import { KvClient, isRetryable } from '../../client/index.js';
import { eventually, listenUrl, providersUnderTest, slow, testScale, testTimeoutMs } from '../helpers/providers.js';

const serverChild = fileURLToPath(new URL('../helpers/server-child.js', import.meta.url));

function startChild(url: string, file: string): Promise<{ proc: ChildProcess; url: string; items: number }> {
  return new Promise((resolve, reject) => {
    const proc = fork(serverChild, [url, file], { env: { ...process.env, RKV_QUIET: '1' } });
    proc.once('message', (m: { url: string; items: number }) => resolve({ proc, ...m }));
    proc.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: SIGKILL under load, restart on the region file: every acknowledged PUT is there`, async (t) => {
    const file = join(mkdtempSync(join(tmpdir(), 'rkv-region-')), 'region');
    const first = await startChild(listenUrl(scheme), file);
    const url = first.url;
    const kv = await KvClient.connect({ url, timeoutMs: Math.max(2000, testTimeoutMs()) });
    t.teardown(() => kv.close());
    await kv.incr('counter', 7);
    const held = await kv.lock('a-lock');
    // Writers keep PUTs in flight; each key is written once, with a value of its own.
    const acknowledged = new Map<string, string>();
    let next = 0;
    let stop = false;
    const writers = Array.from({ length: 8 }, async () => {
      while (!stop) {
        const key = `key-${next++}`;
        const value = `value of ${key} `.repeat(1 + (next % 20));
        try {
          await kv.put(key, value);
          acknowledged.set(key, value);
        } catch (error) {
          // Not acknowledged, so nothing is promised about it; it fails retryably. KV_DISCONNECTED
          // mostly; with memory windows a PUT in flight as the server dies can find its window gone
          // before its queue pair (the kernel's teardown order): RDMA_REM_ACCESS_ERR.
          if (!isRetryable(error)) throw error;
          await new Promise((r) => setTimeout(r, 5)); // fails fast while the server is away: yield
        }
      }
    });
    // Killed after 1.5 s or 20,000 acknowledged PUTs, whichever comes first, with the writers
    // still running: a fast machine fills the 64 MiB region with new keys well within 1.5 s.
    const killAt = Date.now() + Math.round(1500 * Math.max(testScale(), 0.3));
    while (Date.now() < killAt && acknowledged.size < 20_000) await new Promise((r) => setTimeout(r, 5));
    first.proc.kill('SIGKILL');
    await new Promise((r) => first.proc.once('exit', r));
    stop = true;
    await Promise.all(writers);
    t.true(acknowledged.size > 0);
    // While the server is down, an op refused for it says why the client's last connect failed.
    const refusal = () => kv.get('key-0').then(() => '', (error: Error) => error.message);
    await eventually(async () => /\(reconnecting; the last attempt: .+\)/.test(await refusal()), 'a refused GET says why the last reconnect failed');
    t.log(`refused while the server was down: ${await refusal()}`);
    const second = await startChild(url, file);
    t.teardown(() => void second.proc.kill('SIGKILL'));
    t.true(second.items >= acknowledged.size, `${second.items} items recovered, ${acknowledged.size} acknowledged`);
    // The client reconnects by itself.
    const deadline = Date.now() + slow(15_000);
    while (kv.status !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    t.is(kv.status, 'ready');
    for (const [key, value] of acknowledged) t.is((await kv.get(key))?.toString(), value, key);
    t.is(await kv.incr('counter', 0), 7n);
    // The lock held by the dead server's client session was released at recovery.
    const again = await kv.lock('a-lock', { timeoutMs: slow(2000) });
    t.true(again.token > held.token);
    await again.release();
    // New writes land in free space and leave the recovered items alone.
    for (let i = 0; i < 500; i++) await kv.put(`new-${i}`, `fresh ${i}`);
    for (const [key, value] of [...acknowledged].slice(0, 200)) t.is((await kv.get(key))?.toString(), value, key);
    t.log(`${acknowledged.size} acknowledged PUTs before the kill, ${second.items} items recovered`);
  });
}
