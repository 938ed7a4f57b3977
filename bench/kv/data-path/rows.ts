/**
 * The table of a data-path run: one row per thing measured, each with rdma-kv's number, its
 * ratio to the transport floor, ioredis' number and rdma-kv's ratio to it, and issue 14's
 * goals for it with whether this run met them. A number that could not be had says why
 * ("not built", "missing", "skipped"), never a made-up one.
 *
 * Ratios: to the floor, how many times the floor's time rdma-kv takes per key (lower is
 * better); to ioredis, how many times ioredis' throughput rdma-kv reaches, or for CPU rows
 * how many times less CPU it spends (higher is better).
 */
import { GOALS, START, goal, verdict, type Goal } from './goals.js';
import type { Floor } from './floor.js';
import type { GuestRatio, GuestRatios } from './guest.js';
import type { NpmStart } from './npm-start.js';
import { PHASES, type PhaseName, type PhaseResult } from './phases.js';

/** A cell: what the table prints, and the number behind it for the JSON (none: why not, in `text`). */
export interface Cell {
  text: string;
  value?: number;
}

export interface Row {
  what: string;
  rdmaKv: Cell;
  floor: Cell;
  ioredis: Cell;
  goals: Goal[];
}

/** A phase that stopped with an error: its cell says "failed", the run's end says why. */
export interface Failure {
  store: string;
  phase: PhaseName;
  error: string;
}

export interface RunResults {
  rdmaKv: Map<PhaseName, PhaseResult>;
  failed: Failure[];
  /** results, or why there are none (redis-server missing, --skip redis) */
  ioredis: Map<PhaseName, PhaseResult> | string;
  /** the transport floor, or why there is none (--skip floor) */
  floor: Floor | string;
  /** the workload's value size, which the floor's batch-64 READs read */
  valueBytes: number;
  /** 1-RTT GET hit rate over the GET phases, %, or why there is none */
  oneRoundTripPercent: number | string;
  npmStart: NpmStart | string;
  guest: GuestRatios | undefined;
}

const NONE: Cell = { text: '—' };
const absent = (why: string): Cell => ({ text: why });
const fixed = (n: number): string => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n >= 0.1 ? n.toFixed(2) : n.toFixed(3));
const count = (n: number): string => Math.round(n).toLocaleString('en-US');
const times = (n: number): string => `${fixed(n)}×`;
const us = (n: number): string => `${fixed(n)} µs`;

/**
 * Throughput, and the wall time per key (µs) it means; for one awaited key at a time also
 * the median call, which a busy machine's stalls move less than the mean.
 */
function rateCell(r: PhaseResult): Cell {
  const spec = PHASES[r.phase];
  const median = spec.lanes === 1 && spec.batch === 1 ? ` (p50 ${fixed(r.latencyUs.p50)})` : '';
  return { text: `${count(r.keysPerSec)}/s · ${us(r.usPerKey)}${median}`, value: r.keysPerSec };
}

/** ` · 3.4× cold READ`: a phase's time per key over the same READs' at random, when measured. */
function coldText(r: PhaseResult | undefined, cold: { us: number | undefined; name: string } | undefined): string {
  return r && cold?.us !== undefined ? ` · ${times(r.usPerKey / cold.us)} ${cold.name}` : '';
}

export function buildRows(run: RunResults): Row[] {
  const { floor, valueBytes } = run;
  const read1 = typeof floor === 'string' ? undefined : floor.read1.usPerRead;
  const read64 = typeof floor === 'string' ? undefined : floor.read64.usPerRead;
  const cold1 = typeof floor === 'string' ? undefined : floor.cold1.usPerRead;
  const cold64 = typeof floor === 'string' ? undefined : floor.cold64.usPerRead;
  const spread = typeof floor === 'string' ? '' : ` in ${floor.spreadMiB} MiB`;
  const size = valueBytes >= 1024 && valueBytes % 1024 === 0 ? `${valueBytes / 1024} KiB` : `${valueBytes} B`;
  const floorCell = (usPerRead: number | undefined): Cell => (usPerRead === undefined ? absent(floor as string) : { text: `${us(usPerRead)}/READ`, value: usPerRead });
  const failed = (store: string, phase: PhaseName): boolean => run.failed.some((f) => f.store === store && f.phase === phase);
  const redis = (phase: PhaseName): PhaseResult | string => {
    if (typeof run.ioredis === 'string') return run.ioredis;
    return run.ioredis.get(phase) ?? (failed('ioredis', phase) ? 'failed' : 'skipped');
  };
  const rows: Row[] = [
    { what: `floor: batch-1 READ 64 B${typeof floor === 'string' ? '' : ` (${floor.provider})`}`, rdmaKv: NONE, floor: floorCell(read1), ioredis: NONE, goals: [] },
    { what: `floor: batch-64 READ ${size}, per READ`, rdmaKv: NONE, floor: floorCell(read64), ioredis: NONE, goals: [] },
    { what: `floor: batch-1 READ ${size} at random${spread}`, rdmaKv: NONE, floor: floorCell(cold1), ioredis: NONE, goals: [] },
    { what: `floor: batch-64 READ ${size} at random, per READ`, rdmaKv: NONE, floor: floorCell(cold64), ioredis: NONE, goals: [] },
  ];

  /** A phase's row: the floor it is held to (time per key over `floorUs`), its ioredis counterpart, its goals. */
  type Goals = (r: PhaseResult | undefined, ratioFloor: number | undefined, ratioRedis: number | undefined, why: { mine: string; floor: string; redis: string }) => Goal[];
  /** `cold`: also the ratio to the READs at random (the floor's cold rows), after the goal's. */
  const phaseRow = (phase: PhaseName, floorUs: number | undefined, floorName: string, goals: Goals, cold?: { us: number | undefined; name: string }): void => {
    const r = run.rdmaKv.get(phase);
    const o = redis(phase);
    const missing = failed('rdma-kv', phase) ? 'failed' : 'skipped';
    const why = { mine: missing, floor: r ? (typeof floor === 'string' ? floor : '') : missing, redis: r ? (typeof o === 'string' ? o : '') : missing };
    const ratioFloor = r && floorUs !== undefined ? r.usPerKey / floorUs : undefined;
    const ratioRedis = r && typeof o !== 'string' ? r.keysPerSec / o.keysPerSec : undefined;
    rows.push({
      what: PHASES[phase].label,
      rdmaKv: r ? rateCell(r) : absent(missing),
      floor: ratioFloor !== undefined ? { text: `${times(ratioFloor)} ${floorName}${coldText(r, cold)}`, value: ratioFloor } : NONE,
      ioredis: typeof o === 'string' ? absent(o) : { text: `${count(o.keysPerSec)}/s${ratioRedis !== undefined ? ` · ${times(ratioRedis)}` : ''}`, value: o.keysPerSec },
      goals: goals(r, ratioFloor, ratioRedis, why),
    });
  };
  const twoReads = '2 READs@64';
  const coldOne = { us: cold1, name: 'cold READ' };
  const coldTwo = { us: cold64 === undefined ? undefined : 2 * cold64, name: `cold ${twoReads}` };
  phaseRow('get', read1, '1 READ', (_, f, __, why) => [goal(`≤ ${GOALS.sequentialGetVsRead}× 1 READ`, f, GOALS.sequentialGetVsRead, true, why.floor)], coldOne);
  const twoRead64 = read64 === undefined ? undefined : 2 * read64;
  phaseRow('get64', twoRead64, twoReads, (_, __, o, why) => [goal(`≥ ${GOALS.inflightGetVsRedis}× ioredis`, o, GOALS.inflightGetVsRedis, false, why.redis)], coldTwo);
  phaseRow('getmany', twoRead64, twoReads, (_, f, o, why) => [
    goal(`≤ ${GOALS.getManyVsTwoReads}× ${twoReads}`, f, GOALS.getManyVsTwoReads, true, why.floor),
    goal(`≥ ${GOALS.getManyVsRedis}× ioredis`, o, GOALS.getManyVsRedis, false, why.redis),
  ], coldTwo);
  const putGoal = GOALS.sequentialPutVsStart * START.sequentialPutPerSec;
  phaseRow('put', read1, '1 READ', (r, _, __, why) => [goal(`≥ ${count(putGoal)}/s (${GOALS.sequentialPutVsStart}× start)`, r && r.keysPerSec / START.sequentialPutPerSec, GOALS.sequentialPutVsStart, false, why.mine)]);
  phaseRow('put64', read64, '1 READ@64', () => []);
  phaseRow('putmany', read64, '1 READ@64', () => []);

  rows.push(cpuRow('server CPU per GET', run, 'get', (p) => p.serverCpuMs * 1000, []));
  const serverPut = total(run.rdmaKv, 'put', (p) => p.serverCpuMs * 1000);
  rows.push(cpuRow('server CPU per PUT', run, 'put', (p) => p.serverCpuMs * 1000, [goal(`≤ ${GOALS.serverCpuPerPutUs} µs`, serverPut, GOALS.serverCpuPerPutUs, true, 'skipped')]));
  rows.push(cpuRow('client CPU per GET', run, 'get', (p) => p.clientCpuUsPerKey * p.keys, []));
  rows.push(cpuRow('client CPU per PUT', run, 'put', (p) => p.clientCpuUsPerKey * p.keys, []));

  const hit = run.oneRoundTripPercent;
  rows.push({ what: '1-RTT GET hit rate', rdmaKv: typeof hit === 'string' ? absent(hit) : { text: `${hit.toFixed(1)} %`, value: hit }, floor: NONE, ioredis: NONE, goals: [] });

  const job = run.npmStart;
  const startGoal = GOALS.npmStartVsStart * START.npmStartOpsPerSec;
  rows.push({
    what: '`npm start` run ops/s',
    rdmaKv: typeof job === 'string' ? absent(job) : { text: `${count(job.runOpsPerSec)}/s`, value: job.runOpsPerSec },
    floor: NONE,
    ioredis: NONE,
    goals: [goal(`≥ ${count(startGoal)}/s (${GOALS.npmStartVsStart}× start)`, typeof job === 'string' ? undefined : job.runOpsPerSec / START.npmStartOpsPerSec, GOALS.npmStartVsStart, false, typeof job === 'string' ? job : undefined)],
  });
  rows.push({
    what: '`npm start` GC share',
    rdmaKv: typeof job === 'string' ? absent(job) : { text: `${job.runGcPercent.toFixed(1)} %`, value: job.runGcPercent },
    floor: NONE,
    ioredis: NONE,
    goals: [goal(`< ${GOALS.npmStartGcPercent} %`, typeof job === 'string' ? undefined : job.runGcPercent, GOALS.npmStartGcPercent, true, typeof job === 'string' ? job : undefined)],
  });

  const g = run.guest;
  rows.push(guestRow('guest: batch-1 READ / ib_read_lat', g, g?.read, GOALS.guestReadVsPerftest));
  rows.push(guestRow('guest: GET / ib_read_lat', g, g?.get, GOALS.guestGetVsPerftest));
  rows.push(guestRow('guest: cached GET / ib_read_lat', g, g?.cachedGet, GOALS.guestCachedGetVsPerftest));
  return rows;
}

/** The phases of one kind (get or put) a store ran. */
function phasesOf(results: Map<PhaseName, PhaseResult>, op: 'get' | 'put'): PhaseResult[] {
  return [...results.values()].filter((p) => PHASES[p.phase].op === op);
}

/** A sum over a kind's phases per key they did (µs per key), or undefined when none ran. */
function total(results: Map<PhaseName, PhaseResult>, op: 'get' | 'put', usOf: (p: PhaseResult) => number): number | undefined {
  const phases = phasesOf(results, op);
  const keys = phases.reduce((n, p) => n + p.keys, 0);
  return keys > 0 ? phases.reduce((n, p) => n + usOf(p), 0) / keys : undefined;
}

/** CPU µs per key over all phases of a kind; ioredis' ratio is how many times more it spends. */
function cpuRow(what: string, run: RunResults, op: 'get' | 'put', usOf: (p: PhaseResult) => number, goals: Goal[]): Row {
  const mine = total(run.rdmaKv, op, usOf);
  const theirs = typeof run.ioredis === 'string' ? run.ioredis : total(run.ioredis, op, usOf);
  const ratio = mine !== undefined && typeof theirs === 'number' && mine > 0 ? ` · ${times(theirs / mine)}` : '';
  return {
    what: `${what} (all ${op} phases)`,
    rdmaKv: mine === undefined ? absent('skipped') : { text: us(mine), value: mine },
    floor: NONE,
    ioredis: typeof theirs === 'string' ? absent(theirs) : theirs === undefined ? absent('skipped') : { text: `${us(theirs)}${ratio}`, value: theirs },
    goals,
  };
}

function guestRow(what: string, guest: GuestRatios | undefined, row: GuestRatio | undefined, limit: number): Row {
  const why = guest === undefined ? 'missing' : (row?.absent ?? 'missing');
  const ratio = row?.ratio ?? undefined;
  return {
    what,
    rdmaKv: ratio === undefined ? absent(why) : { text: `${times(ratio)} (${guest!.date.slice(0, 10)})`, value: ratio },
    floor: NONE,
    ioredis: NONE,
    goals: [goal(`≤ ${limit}×`, ratio, limit, true, why)],
  };
}

export const COLUMNS = ['what', 'rdma-kv', 'floor (×)', 'ioredis (×)', 'goal', 'met?'];

/** A row as the table's cells. */
export function cells(row: Row): string[] {
  const goals = row.goals.map((g) => g.text).join('; ') || '—';
  const met = row.goals.map(verdict).join('; ') || '—';
  return [row.what, row.rdmaKv.text, row.floor.text, row.ioredis.text, goals, met];
}
