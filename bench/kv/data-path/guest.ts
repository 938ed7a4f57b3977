/**
 * The Soft-RoCE rows: rdma-kv against perftest on rxe0 in the QEMU guest, measured by
 * deploy/softroce-vm/guest/bench-ratio.sh at the end of the rxe test tier (npm run test:rxe),
 * which writes bench/results/rxe-ratio.json. The guest is too slow to boot for every run of
 * this benchmark, so its rows come from that file, dated; without it they read "missing".
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { ROOT } from './options.js';

/** One row of rxe-ratio.json: our median latency over perftest's typical one. */
export interface GuestRatio {
  op: string;
  perftestTypicalUs: number;
  rdmaKvMedianUs: number | null;
  ratio: number | null;
  /** why there is no ratio: "not built" (the client has no cache), or undefined (the run failed) */
  absent?: string;
}

export interface GuestRatios {
  file: string;
  date: string;
  read: GuestRatio | undefined;
  get: GuestRatio | undefined;
  cachedGet: GuestRatio | undefined;
  /** why the file could not be read (its rows then read "missing") */
  error?: string;
}

export const GUEST_RESULTS = join(ROOT, 'bench/results/rxe-ratio.json');

export function readGuestRatios(file = GUEST_RESULTS): GuestRatios | undefined {
  if (!existsSync(file)) return undefined;
  let doc: { date?: string; rows?: GuestRatio[] };
  try {
    doc = JSON.parse(readFileSync(file, 'utf8')) as typeof doc;
  } catch (error) {
    // a guest run stopped while writing it: the rows say "missing", the run's measurements stand
    return { file, date: 'undated', read: undefined, get: undefined, cachedGet: undefined, error: (error as Error).message };
  }
  const row = (op: string): GuestRatio | undefined => doc.rows?.find((r) => r.op === op);
  return { file, date: doc.date ?? 'undated', read: row('READ'), get: row('GET'), cachedGet: row('GET (cache hit)') };
}
