#!/usr/bin/env node
// npm run bench: every benchmark, one after the other. Each prints its table
// and writes JSON under bench/results/. The data-path benchmark runs the main
// job (`npm start`) itself, for its ops/s and GC rows.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const benchmarks = [
  ['transport microbenchmark (shm)', 'dist/bench/transport/microbench.js', []],
  ['kv-bench harness (basic binding)', 'dist/bench/ycsb/harness-bench.js', []],
  ['the data path: floor, rdma-kv, ioredis, npm start, goals', 'dist/bench/kv/data-path.js', []],
  ['the item checksum: v2 hash64 vs CRC32C (C++, g++ -O2)', 'scripts/bench-checksum.mjs', []],
  ['large values: getInto and put from registered buffers vs raw READ and WRITE bandwidth', 'dist/bench/kv/large-values.js', []],
  ['GET under access control: write client with and without memory windows, read-only client, a second namespace (--quick for a short run)', 'dist/bench/kv/access-control.js', []],
  ['what eviction\'s access hints cost a GET: --eviction none vs lru, interleaved', 'dist/bench/kv/access-hints.js', []],
  ['what a TTL costs: get and put of keys with and without a TTL, interleaved', 'dist/bench/kv/ttl-cost.js', []],
  ['the epoch barrier replication will fence writes with: its time per region size, idle and under writes', 'dist/bench/kv/epoch-barrier.js', []],
  ['replication: put and get at --replicas 1 and 2 on three kv-servers (etcd), interleaved', 'dist/bench/kv/replication.js', []],
  ['failover: kill a primary at --replicas 2, time to the first successful write of its key (10 kills)', 'dist/bench/kv/failover.js', []],
  ['repair: a member restarted empty after its failover, copied back by its partners (MB/s)', 'dist/bench/kv/repair.js', []],
  ['migration: a third member joins two holding 100k keys, rebalanced by copying, foreground GET/PUT latency before, during and after', 'dist/bench/kv/migration.js', []],
  ['a cache under eviction: read-through over zipfian keys, rdma-kv --eviction vs redis allkeys-* (npm run bench:cache)', 'bin/kv-bench.js', ['cache', '--db', 'rdma-kv,redis', '--eviction', 'none,lru,lfu']],
];

let failed = 0;
for (const [name, script, args] of benchmarks) {
  console.log(`\n=== ${name} ===`);
  if (!existsSync(script)) {
    console.log(`${script} is not built: run npm run build`);
    failed++;
    continue;
  }
  const { status } = spawnSync(process.execPath, [script, ...args], { stdio: 'inherit', env: { ...process.env, RKV_QUIET: '1' } });
  if (status !== 0) failed++;
}
process.exitCode = failed ? 1 : 0;
