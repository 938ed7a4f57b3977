/** YCSB's StatusThread line: "<label><date> <n> sec: <ops> operations; <x> current ops/sec; est completion in ... [READ: Count=...]". */
import { decimalFormat2, formatStatusDate } from '../java-format.js';
import { summarize, type AggregatedMeasurement } from '../measurements/aggregate.js';

/**
 * Java's (long) Math.ceil(x): NaN is 0, infinities saturate (so the first status line of a run
 * reads "est completion in 106751991167300 days 15 hours", as YCSB's does).
 */
export function javaLongOfDouble(x: number): bigint {
  if (Number.isNaN(x)) return 0n;
  if (x >= 9223372036854775807) return 9223372036854775807n;
  if (x <= -9223372036854775808) return -9223372036854775808n;
  return BigInt(Math.trunc(x));
}

/** StatusThread's RemainingFormatter, including its quirks ("5 second ", minutes never subtracted right). */
export function formatRemaining(totalSeconds: bigint): string {
  let seconds = totalSeconds;
  let time = '';
  const days = seconds / 86400n;
  if (days > 0n) {
    time += `${days}${days === 1n ? ' day ' : ' days '}`;
    seconds -= days * 86400n;
  }
  const hours = seconds / 3600n;
  if (hours > 0n) {
    time += `${hours}${hours === 1n ? ' hour ' : ' hours '}`;
    seconds -= hours * 3600n;
  }
  if (days < 1n) {
    const minutes = seconds / 60n;
    if (minutes > 0n) {
      time += `${minutes}${minutes === 1n ? ' minute ' : ' minutes '}`;
      seconds -= seconds * 60n; // YCSB subtracts toSeconds(seconds), not toSeconds(minutes)
    }
  }
  if (time.length === 0) {
    time += String(seconds);
    time += time.length === 1 ? ' second ' : ' seconds ';
  }
  return time;
}

/** OneMeasurementHdrHistogram.getSummary over an interval histogram. */
export function measurementSummary(m: AggregatedMeasurement): string {
  const s = summarize(m.sinceStatus);
  const d = decimalFormat2;
  const line =
    `[${m.exportName}: Count=${s.count}, Max=${s.max}, Min=${s.min}, Avg=${d(s.mean)}, ` +
    `50=${d(s.percentile(50))}, 90=${d(s.percentile(90))}, 99=${d(s.percentile(99))}, ` +
    `99.9=${d(s.percentile(99.9))}, 99.99=${d(s.percentile(99.99))}]`;
  m.sinceStatus.reset();
  return line;
}

export interface StatusInput {
  label: string;
  now: Date;
  startMs: number;
  intervalStartMs: number;
  nowMs: number;
  totalOps: number;
  lastTotalOps: number;
  todoOps: number;
  measurements: readonly AggregatedMeasurement[];
}

/** StatusThread.computeStats. */
export function statusLine(s: StatusInput): string {
  const interval = s.nowMs - s.startMs;
  const throughput = (1000 * s.totalOps) / interval;
  const current = (1000 * (s.totalOps - s.lastTotalOps)) / (s.nowMs - s.intervalStartMs);
  const remaining = javaLongOfDouble(Math.ceil(s.todoOps / throughput));
  let msg = `${s.label}${formatStatusDate(s.now)} ${Math.trunc(interval / 1000)} sec: ${s.totalOps} operations; `;
  if (s.totalOps !== 0) msg += `${Number.isNaN(current) ? 'NaN' : decimalFormat2(current)} current ops/sec; `;
  if (s.todoOps !== 0) msg += `est completion in ${formatRemaining(remaining)}`;
  msg += s.measurements.map((m) => measurementSummary(m) + ' ').join('');
  return msg;
}
