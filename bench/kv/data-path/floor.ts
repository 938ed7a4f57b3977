/**
 * The transport floor of a run: what the two READs of a GET cost from JS through the same
 * provider, measured in the same run by the transport microbenchmark
 * (bench/transport/microbench.ts: client and server provider in one process, a batch is one
 * post and busy polling for its last completion) —
 *
 *   read1   batch-1 READ of 64 B: one awaited round trip, the floor of a sequential op
 *   read64  batch-64 READ of a value's size, per READ: the floor of a batch, per key
 *   cold1, cold64  the same READs of a value's size at pseudo-random places of a region as
 *           large as the server's (microbench --spread): what the READs a GET really does
 *           cost the substrate. read1 and read64 read the same bytes every time, which on shm
 *           stay in the CPU's caches; an item READ at random misses them (a NIC's DMA would
 *           not spend the CPU's time on it, so on hardware the two floors are closer)
 *
 * Each runs in a child process of its own, one after the other.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { runScript } from './processes.js';

export interface FloorCase {
  bytes: number;
  batch: number;
  /** wall time per READ (the batch's time / its size), µs */
  usPerRead: number;
  /** per batch, µs */
  p50Us: number;
  p99Us: number;
}

export interface Floor {
  provider: string;
  read1: FloorCase;
  read64: FloorCase;
  /** the MiB cold1 and cold64 spread their READs over (the server's region) */
  spreadMiB: number;
  cold1: FloorCase;
  cold64: FloorCase;
}

interface MicrobenchResult {
  op: string;
  bytes: number;
  batch: number;
  nsPerOp: number;
  medianLatencyUs: number;
  p99LatencyUs: number;
}

/** The microbenchmark's URL for a server URL's provider: its own shm socket, or the server's RDMA address. */
function floorUrl(serverUrl: string): string[] {
  const rdma = /^rdma:\/\/(\[[^\]]+\]|[^:/]+)/.exec(serverUrl);
  return rdma ? ['--url', `rdma://${rdma[1]}:0`] : [];
}

/** One microbenchmark case in a child process: `op` (READ or WRITE) of `bytes`, `batch` per doorbell (spread over `spreadMiB` of region, if not 0). */
export async function measure(serverUrl: string, bytes: number, batch: number, seconds: number, op = 'READ', spreadMiB = 0): Promise<FloorCase & { provider: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-floor-'));
  try {
    const json = join(dir, 'floor.json');
    const args = [...floorUrl(serverUrl), '--ops', op, '--batch', String(batch), '--bytes', String(bytes), '--spread', String(spreadMiB), '--seconds', String(seconds), '--json', json];
    const { code, stderr } = await runScript('dist/bench/transport/microbench.js', args, 120_000 + seconds * 10_000);
    if (code !== 0) throw new Error(`the transport microbenchmark (${op} ${bytes} B, batch ${batch}) failed (code ${code}): ${stderr.trim().split('\n').pop()}`);
    const doc = JSON.parse(readFileSync(json, 'utf8')) as { provider: string; results: MicrobenchResult[] };
    const r = doc.results.find((x) => x.op === op && x.batch === batch);
    if (r === undefined) throw new Error(`the transport microbenchmark wrote no ${op} batch-${batch} result to ${json}`);
    return { provider: doc.provider, bytes, batch, usPerRead: r.nsPerOp / 1000, p50Us: r.medianLatencyUs, p99Us: r.p99LatencyUs };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function measureFloor(serverUrl: string, valueBytes: number, seconds: number, spreadMiB: number): Promise<Floor> {
  const { provider, ...read1 } = await measure(serverUrl, 64, 1, seconds);
  const { provider: _, ...read64 } = await measure(serverUrl, valueBytes, 64, seconds);
  const { provider: __, ...cold1 } = await measure(serverUrl, valueBytes, 1, seconds, 'READ', spreadMiB);
  const { provider: ___, ...cold64 } = await measure(serverUrl, valueBytes, 64, seconds, 'READ', spreadMiB);
  return { provider, read1, read64, spreadMiB, cold1, cold64 };
}
