/**
 * The transport floor of a run: what the two READs of a GET cost from JS through the same
 * provider, measured in the same run by the transport microbenchmark
 * (bench/transport/microbench.ts: client and server provider in one process, a batch is one
 * post and busy polling for its last completion) —
 *
 *   read1   batch-1 READ of 64 B: one awaited round trip, the floor of a sequential op
 *   read64  batch-64 READ of a value's size, per READ: the floor of a batch, per key
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

/** One microbenchmark case in a child process: `op` (READ or WRITE) of `bytes`, `batch` per doorbell. */
export async function measure(serverUrl: string, bytes: number, batch: number, seconds: number, op = 'READ'): Promise<FloorCase & { provider: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-floor-'));
  try {
    const json = join(dir, 'floor.json');
    const args = [...floorUrl(serverUrl), '--ops', op, '--batch', String(batch), '--bytes', String(bytes), '--seconds', String(seconds), '--json', json];
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

export async function measureFloor(serverUrl: string, valueBytes: number, seconds: number): Promise<Floor> {
  const { provider, ...read1 } = await measure(serverUrl, 64, 1, seconds);
  const { provider: _, ...read64 } = await measure(serverUrl, valueBytes, 64, seconds);
  return { provider, read1, read64 };
}
