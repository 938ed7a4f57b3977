// What the replicated-cluster suites share (replicated-failover, replicated-kill,
// repair, self-fence, config, replicated): members started with --replicas under a throwaway etcd, the recorded load of
// churn children whose histories the linearizability checker reads, and the
// checks of what a failover changed.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { ExecutionContext } from 'ava';
import type { Etcd3 } from 'etcd3';

import type { EtcdProcess } from '../../bench/kv/etcd-process.js';
import { KvClient } from '../../client/index.js';
import type { HistoryEvent } from '../../client/types.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { type ClusterConfig, etcdKeys } from '../../protocol/registry.js';
import { readConfig } from '../../server/replication/config-store.js';
import { slotReplicaNames } from '../../server/replication/placement.js';
import { MAY_HAVE_TAKEN_EFFECT, lockHistories, registerHistories } from '../helpers/history-operations.js';
import { CHURN_LOCK, runKvChild } from '../helpers/kv.js';
import { isLinearizable } from '../helpers/linearizability.js';
import { lockModel, registerModel } from '../helpers/linearizability-models.js';
import { type Scheme, loadPollMode, slow, testScale, testTimeoutMs } from '../helpers/providers.js';
import { type Member, clusterDir, eventually, memberUrl, startMember, stopAll } from './helpers.js';

/** kv-server refuses --replicas above 1 without it (docs/cluster.md: replication is experimental). */
export const REPLICAS_ON = { RKV_EXPERIMENTAL_REPLICAS: '1' };
/** The keys the load's histories cover: f0..KEYS-1. */
export const KEYS = 12;

/**
 * The members' etcd lease: 2 s, longer in the emulated guest (slow()), where a 2 s lease lapses
 * under load alone (its kv-servers, the load's processes and etcd share two TCG vCPUs: keepalives
 * came 0.5 to 0.8 s late and the members fenced themselves again and again).
 */
export function leaseSeconds(): number {
  return Math.round(slow(2000) / 1000);
}

/** `count` kv-server processes on `scheme` with `--replicas replicas`, a 2 s lease (leaseSeconds, or `ttlSeconds`) and `extra`, registered under `prefix`, once the controller placed them all. */
export async function replicatedMembers(
  t: ExecutionContext,
  etcd: EtcdProcess,
  prefix: string,
  replicas: number,
  count: number,
  scheme: Scheme = 'shm',
  extra: readonly string[] = [],
  ttlSeconds = leaseSeconds(),
  env: Readonly<Record<string, string>> = {},
): Promise<{ members: Member[]; placed: ClusterConfig; replicasOf: (key: string) => string[]; dir: string }> {
  const dir = clusterDir(t);
  const members: Member[] = [];
  t.teardown(() => stopAll(members));
  for (let i = 0; i < count; i++) {
    const args = ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', `${ttlSeconds}s`, '--name', `m${i}`, '--replicas', String(replicas), ...extra];
    members.push(await startMember(dir, i, args, await memberUrl(scheme, dir, i), { ...REPLICAS_ON, ...env }));
  }
  await eventually(() => placedAll(etcd.client, prefix, count), `the controller placed all ${count} members`, slow(30_000));
  const placed = (await readConfig(etcd.client, prefix))!;
  const { names } = slotReplicaNames(placed);
  return { members, placed, replicasOf: (key) => names[keySlot(Buffer.from(key))]!, dir };
}

/**
 * Whether config places `count` members with nothing left to move: every member after the first
 * joins a replicated cluster by a rebalance (its hash slots copied to it first, docs/cluster.md).
 */
export async function placedAll(client: Etcd3, prefix: string, count: number): Promise<boolean> {
  const config = await readConfig(client, prefix);
  const rebalancing = (await client.get(etcdKeys(prefix).target).string()) !== null;
  return config?.members.length === count && !rebalancing && config.slots.every((range) => range.syncing.length === 0);
}

/**
 * A read through a one-server client of a replica (what that member's own region holds), run again while it
 * fails KV_READ_LEASE_LAPSED: such a client has no config to route by, so nothing waits out a lease that ran
 * out (its renewal was late: a ping's pong, or the member's etcd keepalive, under the suite's load; CI at
 * deff50f failed two tests so). A GET, or an INCR of 0, changes nothing.
 */
export async function readAlone<T>(read: () => Promise<T>): Promise<T> {
  const deadline = performance.now() + slow(5000);
  for (;;) {
    try {
      return await read();
    } catch (error) {
      if ((error as { code?: string }).code !== 'KV_READ_LEASE_LAPSED' || performance.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

/**
 * The keys of `keys` that a replica `config` names for their hash slot (members[i] is mi) does not hold in
 * its own region, as "key@mi": read through a client of that member alone, so a copy that missed a key on
 * a backup shows here, not only on a later failover or as a counter whose replicas disagree. A counter (or
 * lock) found is held: a GET of it is a type mismatch.
 */
export async function missingOnReplicas(members: readonly Member[], config: ClusterConfig, keys: readonly string[]): Promise<string[]> {
  const { names } = slotReplicaNames(config);
  const missing: string[] = [];
  for (const [i, member] of members.entries()) {
    const mine = keys.filter((key) => names[keySlot(Buffer.from(key))]!.includes(`m${i}`));
    if (mine.length === 0) continue;
    const own = await KvClient.connect({ servers: [member.url], timeoutMs: testTimeoutMs() });
    try {
      for (const key of mine) {
        const held = await readAlone(() => own.get(key)).then(
          (value) => value !== undefined,
          (error: { code?: string }) => (error.code === 'KV_TYPE_MISMATCH' ? true : Promise.reject(error)),
        );
        if (!held) missing.push(`${key}@m${i}`);
      }
    } finally {
      await own.close();
    }
  }
  return missing;
}

/**
 * `kv.incr(key, delta)` by a test that alone writes `key` and knows its value `before`: an answer lost to a
 * read-lease lapse or a timeout (either may have added) is settled by reading the counter back, and the add
 * runs again only if it did not land.
 */
export async function incrAlone(kv: KvClient, key: string, delta: bigint, before = 0n): Promise<bigint> {
  try {
    return await kv.incr(key, delta);
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code !== 'KV_READ_LEASE_LAPSED' && code !== 'KV_TIMEOUT') throw error;
    const now = await readAlone(() => kv.incr(key, 0n));
    if (now === before + delta) return now;
    if (now === before) return incrAlone(kv, key, delta, before);
    throw error;
  }
}

/**
 * Histories recorded by `churn` children (test/helpers/kv-child.ts): 4 writers and 2 readers on
 * keys f0..KEYS-1; in the emulated guest (RKV_TEST_SCALE below 1) 2 writers and 1 reader, as its
 * two vCPUs run every process.
 */
export class Load {
  private readonly dir: string;
  readonly roles = testScale() < 1 ? ['w', 'w', 'r'] : ['w', 'w', 'w', 'w', 'r', 'r'];
  readonly files: string[];
  readonly done: Promise<Array<Record<string, unknown>>>;
  /** When the processes stop issuing operations (performance.now()). */
  readonly endsAt: number;
  /** Each process, when it reported and exited (ms after endsAt), and its last answer to 'why', for a load that does not end. */
  private readonly processes: Array<{ proc?: ChildProcess; reported?: number; exited?: number; why?: string }>;
  /** What check() is doing now, for a check that runs out of time. */
  private phase = 'not checking';

  constructor(
    private readonly t: ExecutionContext,
    private readonly etcd: EtcdProcess,
    target: string,
    ms: number,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), 'rkv-failover-'));
    t.teardown(() => rmSync(this.dir, { recursive: true, force: true }));
    this.files = this.roles.map((_, p) => join(this.dir, `p${p}.jsonl`));
    this.endsAt = performance.now() + ms;
    this.processes = this.roles.map(() => ({}));
    const since = () => Math.round(performance.now() - this.endsAt);
    this.done = Promise.all(
      this.roles.map((role, p) => {
        const state = this.processes[p]!;
        const onMessage = (m: Record<string, unknown>) => {
          if ('why' in m) {
            state.why = `${since()} ms after the end: ${JSON.stringify(m.why)}`;
            t.log(`load: ${role}${p} has not exited ${state.why}`);
          }
          else state.reported = since();
        };
        const ran = runKvChild(t, ['churn', target, String(p), role, String(KEYS), String(ms), this.files[p]!], onMessage, (proc) => (state.proc = proc));
        return ran.finally(() => (state.exited = since()));
      }),
    );
    // A case that fails before check() leaves it unawaited, and its teardown kills the processes: not an unhandled rejection too.
    this.done.catch(() => undefined);
  }

  /**
   * The processes' reports once every one has exited. One that has not, some time after the load's end, is
   * asked what it still holds (kv-child's 'why'), logged: a client whose close() does not end keeps it alive
   * (CI at 4fdda7d: the five-kills case made no progress for 10 minutes after its last round).
   */
  private async ended(): Promise<Array<Record<string, unknown>>> {
    const ask = setInterval(() => {
      if (performance.now() < this.endsAt + slow(20_000)) return;
      for (const state of this.processes) if (state.exited === undefined) state.proc?.send('why');
    }, slow(10_000));
    try {
      return await this.done;
    } finally {
      clearInterval(ask);
      this.t.log(`load: the processes reported ${this.processes.map((s) => s.reported ?? '-').join(', ')} ms and exited ${this.processes.map((s) => s.exited).join(', ')} ms after the load's end`);
    }
  }

  /**
   * Every process's events, then final reads of every key by one more process. Its reads wait up to
   * 15 s (slowed where the host is) for a member it is still connecting to: they are there for the
   * histories, not for availability (CI at 9236e15: a final read gave up on a member restarted two
   * rounds before, still reconnecting after the client's 5 s).
   */
  async events(prefix: string): Promise<Array<HistoryEvent & { process: number }>> {
    const final: HistoryEvent[] = [];
    const timeoutMs = Math.max(testTimeoutMs(), slow(15_000));
    const reader = await KvClient.connect({ etcd: { hosts: this.etcd.url, prefix }, timeoutMs, pollMode: loadPollMode(), history: (e) => void final.push(e) });
    // A read that still finds a member unreachable is tried twice more (CI at 039e97e: a fresh client was still
    // reconnecting to a member restarted two rounds before after 15 s); a GET changes nothing.
    try {
      for (let k = 0; k < KEYS; k++) {
        for (let attempt = 1; ; attempt++) {
          this.phase = `the final read of f${k}, attempt ${attempt}, from ${Math.round(performance.now() - this.endsAt)} ms after the load's end`;
          try {
            await reader.get(`f${k}`);
            break;
          } catch (error) {
            if (attempt >= 3 || (error as { code?: string }).code !== 'KV_DISCONNECTED') throw error;
          }
        }
      }
    } finally {
      await reader.close();
    }
    return [
      ...this.files.flatMap((file, p) => readFileSync(file, 'utf8').trim().split('\n').map((line) => ({ ...(JSON.parse(line) as HistoryEvent), process: p }))),
      ...final.map((e) => ({ ...e, process: this.roles.length })),
    ];
  }

  /**
   * Every key's history is linearizable, and the lock's, a failure caused by the kills counting as
   * may-have-taken-effect. The lock's model lets a holder lose its lock (a failover to a replica it
   * was copied onto free), never a token be granted twice or go down.
   */
  async check(t: ExecutionContext, prefix: string, withinMs?: number): Promise<Array<HistoryEvent & { process: number }>> {
    if (withinMs === undefined) return this.checked(t, prefix);
    // Past `withinMs` it fails saying what it waits for: a hang's cause reaches a CI summary, which shows a failure's message only.
    // (The histories' check itself is synchronous: no timer fires inside it, so this covers the processes' exits and the
    // final reads; the time each check took is logged as it ends.)
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`the load's end and check took over ${Math.round(withinMs)} ms: ${this.progress()}`)), withinMs);
    });
    try {
      return await Promise.race([this.checked(t, prefix), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Where check() is: its phase, and each process that has not exited with its last answer to 'why'. */
  private progress(): string {
    const running = this.processes.flatMap((s, p) => (s.exited === undefined ? [`${this.roles[p]}${p} ${s.reported === undefined ? 'not reported' : `reported at ${s.reported} ms`}, not exited; why: ${s.why ?? 'not asked yet'}`] : []));
    return [this.phase, ...running].join('; ').slice(0, 4000);
  }

  private async checked(t: ExecutionContext, prefix: string): Promise<Array<HistoryEvent & { process: number }>> {
    // Each phase's time is logged as it ends: a step that runs out of time says which phase had it.
    let since = performance.now();
    const took = () => {
      const ms = Math.round(performance.now() - since);
      since = performance.now();
      return ms;
    };
    this.phase = 'waiting for the processes to exit';
    const outcomes = await this.ended();
    took(); // ended() logs when each process exited
    t.log(`load: ${outcomes.map((o, p) => `${this.roles[p]}${p} ${o.ok as number} ok ${JSON.stringify(o.failures)}`).join('; ')}`);
    const events = await this.events(prefix);
    t.log(`load: the final reads took ${took()} ms`);
    const byKey = registerHistories(events.filter((e) => e.key !== CHURN_LOCK), MAY_HAVE_TAKEN_EFFECT);
    t.is(byKey.size, KEYS);
    const checked: string[] = [];
    for (const [key, ops] of byKey) {
      this.phase = `checking the history of ${key} (${ops.length} ops)`;
      t.true(isLinearizable(ops, registerModel), `history of ${key} (${ops.length} ops) is not linearizable`);
      checked.push(`${key} ${ops.length} ops (${ops.filter((op) => op.ret === undefined).length} indeterminate) ${took()} ms`);
    }
    t.log(`histories checked: ${checked.join(', ')}`);
    this.phase = 'checking the lock\'s history';
    const lock = lockHistories(events.filter((e) => e.key === CHURN_LOCK), MAY_HAVE_TAKEN_EFFECT).get(CHURN_LOCK) ?? [];
    const taken = lock.filter((op) => op.ret !== undefined && typeof op.output === 'bigint').length;
    t.true(taken > 0, 'the writers took the lock');
    t.true(isLinearizable(lock, lockModel({ fencing: true })), `the history of lock ${CHURN_LOCK} is not linearizable`);
    t.log(`lock ${CHURN_LOCK}: ${lock.length} operations, ${taken} granted, checked in ${took()} ms`);
    return events;
  }
}

/** Writes `key` until a write succeeds; the ms from `since`. */
export async function firstWrite(kv: KvClient, key: string, since: number): Promise<number> {
  for (;;) {
    try {
      await kv.put(key, 'after');
      return performance.now() - since;
    } catch (error) {
      if (performance.now() - since > slow(30_000)) throw error;
    }
  }
}

/** Checks that `after` is `before` with `dead` gone from every hash slot (those slots at a new epoch: after's, for one failover), and nothing else changed. */
export function failedOver(t: ExecutionContext, before: ClusterConfig, after: ClusterConfig, dead: readonly string[]): void {
  const newEpoch = (epoch: number) => (dead.length === 1 ? epoch === after.epoch : epoch > before.epoch && epoch <= after.epoch);
  t.true(after.epoch > before.epoch);
  const was = slotReplicaNames(before);
  const now = slotReplicaNames(after);
  let moved = 0;
  for (let slot = 0; slot < was.names.length; slot++) {
    const old = was.names[slot]!;
    if (old.some((n) => dead.includes(n))) {
      moved++;
      if (now.names[slot]!.join() !== old.filter((n) => !dead.includes(n)).join() || !newEpoch(now.epochs[slot]!)) t.fail(`hash slot ${slot}: ${old} → ${now.names[slot]} at epoch ${now.epochs[slot]}`);
    } else if (now.names[slot]!.join() !== old.join() || now.epochs[slot] !== was.epochs[slot]) {
      t.fail(`hash slot ${slot} changed without losing ${dead}`);
    }
  }
  t.true(moved > 0);
}

/** kvctl layout's health line (hash slots short of replicas), if any. */
export const layoutLine = (out: { stdout: string }): string | undefined => out.stdout.split('\n').find((line) => line.includes('fewer than'));
