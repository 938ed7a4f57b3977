// GETs per second of random keys, for the benches that compare GET paths in one process
// (access-hints.ts, access-control.ts): keys `key0` .. `key${keys - 1}`, `batch` at a time
// (1: each awaited, latency-bound; more: issued in one tick, one doorbell).
import type { KvClient } from '../../client/index.js';

export async function getRate(kv: KvClient, keys: number, seconds: number, batch: number): Promise<number> {
  let n = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  while (performance.now() < end) {
    if (batch === 1) await kv.get(`key${Math.floor(Math.random() * keys)}`);
    else await Promise.all(Array.from({ length: batch }, () => kv.get(`key${Math.floor(Math.random() * keys)}`)));
    n += batch;
  }
  return n / ((performance.now() - start) / 1000);
}
