// A writer in its own process, for benchmarks that measure the server while it is written to
// (epoch-barrier.ts): connects to argv[2], prints "ready", then keeps 64 PUTs of 256 B values
// over 50,000 keys in flight until it is killed.
import { KvClient } from '../../client/index.js';

const kv = await KvClient.connect({ url: process.argv[2]! });
const value = Buffer.alloc(256, 1);
process.stdout.write('ready\n');
for (let i = 0; ; i += 64) await Promise.all(Array.from({ length: 64 }, (_, k) => kv.put(`k${(i + k) % 50_000}`, value)));
