// A rebalance's rate cap and progress (issue 18; docs/cluster.md "Rebalancing",
// docs/kvctl.md), on the host: a member joins a loaded cluster of two and
// kvctl rebalance --max-mbps copies at most that per copying member (the bytes
// each copier reports stay under the cap's allowance for the time elapsed);
// the rate of the rebalance in progress can be changed; while it copies, each
// copier's progress record, its rdmakv_copy_keys_left gauge and the
// controller's rdmakv_rebalance_hash_slots_left say how far it is, and kvctl
// --wait prints keys left, MB/s and an ETA. Afterwards the records say the
// copies ended, with what each member copied, and the gauges are 0. Bad --max-mbps values are usage errors.
// kvctl drain --max-mbps caps the copies of a drain the same way, kept in the drain's record.
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { etcdKeys, parseCopyProgress, parseCopyRate, parseDrainRecord } from '../../protocol/registry.js';
import { etcdForFile } from '../helpers/etcd.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { type Member, eventually, startMember } from './helpers.js';
import { REPLICAS_ON, replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);
const CALM_TTL = Math.round(slow(6000) / 1000);
/** The cap, in bytes a second, while the test samples progress; then raised so the rebalance ends soon. */
const CAP = 100_000;
/** How long the cap holds: past --wait's first periodic line (5 s after its first), which then has a rate and an ETA. */
const CAPPED_MS = 7000;
/** Keys a copier may have in flight past its pacer's say (64 workers, each with one 1 KiB item). */
const IN_FLIGHT_BYTES = 64 * 1200;

/** A gauge's value in a member's /metrics text (0 when absent). */
async function gauge(member: Member, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${member.metricsPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

test.serial('kvctl rebalance --max-mbps caps each copier; progress records, gauges and --wait\'s ETA show the copy; a new rate applies to the rebalance in progress', async (t) => {
  const prefix = '/test-rebalance-progress';
  const keys = etcdKeys(prefix);
  const { members, dir } = await replicatedMembers(t, etcd, prefix, 2, 2, 'shm', [], CALM_TTL);
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  t.is((await kvctl([...target, 'rebalance'])).code, 0, 'balanced: placement frozen');
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  const value = Buffer.alloc(1024, 'p');
  for (let i = 0; i < 4000; i += 500) await kv.putMany(Array.from({ length: 500 }, (_, k): [string, Buffer] => [`p:${i + k}`, value]));
  const memberArgs = ['--etcd', etcd.url, '--etcd-prefix', prefix, '--etcd-ttl', `${CALM_TTL}s`, '--name', 'm2', '--replicas', '2'];
  members.push(await startMember(dir, 2, memberArgs, undefined, REPLICAS_ON));
  await eventually(async () => (await etcd.client.get(keys.aliveKey('m2')).string()) !== null, 'm2 registered', slow(30_000));

  for (const bad of ['-1', 'fast', '']) {
    const refused = await kvctl([...target, 'rebalance', '--max-mbps', bad]);
    t.is(refused.code, 2, bad);
    t.regex(refused.stderr, /--max-mbps .*expected a number of MB a second/);
  }
  const both = await kvctl([...target, 'rebalance', '--max-mbps', '1', '--dry-run']);
  t.is(both.code, 2);
  t.regex(both.stderr, /--max-mbps and --dry-run exclude each other/);

  const startedAt = performance.now();
  const following = kvctl([...target, '--json', 'rebalance', '--max-mbps', String(CAP / 1e6), '--wait']);
  const records = async () => Object.values(await etcd.client.getAll().prefix(keys.progress).strings()).map(parseCopyProgress);
  await eventually(async () => (await records()).some((p) => p !== undefined && p.keys > 0), 'a copier puts its progress, with the keys its walk found', slow(30_000));
  t.is(parseCopyRate(await etcd.client.get(keys.copyRate).string()), CAP, 'the cap is in etcd');
  // Sampled a few times: each copier's bytes stay within the cap's allowance (one second's burst, the keys in flight).
  for (let sample = 0; sample < 3; sample++) {
    await new Promise((resolve) => setTimeout(resolve, 700));
    const elapsed = (performance.now() - startedAt) / 1000;
    for (const [key, text] of Object.entries(await etcd.client.getAll().prefix(keys.progress).strings())) {
      const progress = parseCopyProgress(text);
      t.truthy(progress, key);
      t.true(progress!.done <= progress!.keys);
      t.true(progress!.bytes <= CAP * (elapsed + 1) + IN_FLIGHT_BYTES, `${key}: ${progress!.bytes} bytes after ${elapsed.toFixed(1)} s at ${CAP} bytes/s`);
    }
  }
  const left = await Promise.all(members.map((m) => gauge(m, 'rdmakv_copy_keys_left')));
  t.true(left.some((n) => n > 0), `copy keys left per member: ${left}`);
  const slotsLeft = await Promise.all(members.map((m) => gauge(m, 'rdmakv_rebalance_hash_slots_left')));
  t.is(slotsLeft.filter((n) => n > 0).length, 1, `only the controller reports hash slots left: ${slotsLeft}`);

  // A new rate for the rebalance in progress: no cap (at CAP, each copier's ~1.4 MB would take 13 s or more).
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, CAPPED_MS - (performance.now() - startedAt))));
  const stillCopying = (await records()).some((p) => p?.running === true);
  if (!stillCopying) for (const [i, m] of members.entries()) t.log(`m${i}: ${m.process.stderr().split('\n').filter((l) => /repair|rebalance|follower/.test(l)).slice(-15).join('\n')}`);
  t.true(stillCopying, 'still copying under the cap');
  const faster = await kvctl([...target, 'rebalance', '--max-mbps', '0']);
  t.is(faster.code, 0, faster.stderr);
  t.regex(faster.stdout, /^the rebalance in progress copies at no cap/);
  t.is(parseCopyRate(await etcd.client.get(keys.copyRate).string()), 0);

  const done = await following;
  t.is(done.code, 0, done.stderr);
  t.like(JSON.parse(done.stdout.trim().split('\n').pop()!), { done: true, left: 0 });
  t.true((JSON.parse(done.stdout.trim().split('\n').pop()!) as { copiedBytes: number }).copiedBytes > 1_000_000, 'about 2/3 of 4 MB copied');
  t.regex(done.stderr, /\d+ keys left to copy, [\d.]+ MB\/s, ETA \d+ s/);
  // --wait ends once config has the target's replicas; the controller removes the target (and the cap) next.
  await eventually(async () => (await etcd.client.get(keys.copyRate).string()) === null && (await etcd.client.get(keys.target).string()) === null, 'the cap goes with the target', slow(10_000));
  const ended = await records();
  t.true(ended.length >= 2 && ended.every((p) => p !== undefined && !p.running), 'every copier\'s record says its copy ended');
  t.true(ended.reduce((n, p) => n + p!.totalBytes, 0) > 1_000_000, 'their totals hold what they copied');
  await eventually(async () => (await Promise.all(members.map((m) => gauge(m, 'rdmakv_rebalance_hash_slots_left')))).every((n) => n === 0), 'the controller\'s gauge is 0', slow(10_000));
  t.deepEqual(await Promise.all(members.map((m) => gauge(m, 'rdmakv_copy_keys_left'))), [0, 0, 0]);
  const values = await kv.getMany(Array.from({ length: 4000 }, (_, i) => `p:${i}`));
  t.is(values.filter((v) => v === undefined || !Buffer.from(v).equals(value)).length, 0, 'every key reads back');
});

test.serial('kvctl drain --max-mbps caps each copier for the drain; a new rate applies to the drain in progress; the cap stays in the drain record, not in copy-rate', async (t) => {
  const prefix = '/test-drain-rate';
  const keys = etcdKeys(prefix);
  await replicatedMembers(t, etcd, prefix, 1, 3, 'shm', [], CALM_TTL);
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  const value = Buffer.alloc(1024, 'd');
  for (let i = 0; i < 4000; i += 500) await kv.putMany(Array.from({ length: 500 }, (_, k): [string, Buffer] => [`d:${i + k}`, value]));

  const refused = await kvctl([...target, 'drain', 'm0', '--cancel', '--max-mbps', '1']);
  t.is(refused.code, 2);
  t.regex(refused.stderr, /--max-mbps and --cancel exclude each other/);
  const bad = await kvctl([...target, 'drain', 'm0', '--max-mbps', 'fast']);
  t.is(bad.code, 2);
  t.regex(bad.stderr, /--max-mbps fast: expected a number of MB a second/);

  const startedAt = performance.now();
  const started = await kvctl([...target, '--json', 'drain', 'm0', '--max-mbps', String(CAP / 1e6)]);
  t.is(started.code, 0, started.stderr);
  t.like(JSON.parse(started.stdout), { member: 'm0', phase: 'copying', maxBytesPerSecond: CAP });
  t.like(parseDrainRecord((await etcd.client.get(keys.drainKey('m0')).string())!), { phase: 'copying', maxBytesPerSecond: CAP });
  t.is(await etcd.client.get(keys.copyRate).string(), null, 'a drain\'s cap is its own, not the rebalance\'s');
  const following = kvctl([...target, '--json', 'drain', 'm0', '--wait']);
  const records = async () => Object.values(await etcd.client.getAll().prefix(keys.progress).strings()).map(parseCopyProgress);
  await eventually(async () => (await records()).some((p) => p !== undefined && p.keys > 0), 'the drained member\'s copier puts its progress', slow(30_000));
  for (let sample = 0; sample < 3; sample++) {
    await new Promise((resolve) => setTimeout(resolve, 700));
    const elapsed = (performance.now() - startedAt) / 1000;
    for (const [key, text] of Object.entries(await etcd.client.getAll().prefix(keys.progress).strings())) {
      const progress = parseCopyProgress(text)!;
      t.true(progress.bytes <= CAP * (elapsed + 1) + IN_FLIGHT_BYTES, `${key}: ${progress.bytes} bytes after ${elapsed.toFixed(1)} s at ${CAP} bytes/s`);
    }
  }
  t.true((await records()).some((p) => p?.running === true), 'still copying under the cap');

  // A new rate for the drain in progress: no cap; the record keeps its phase.
  const faster = await kvctl([...target, 'drain', 'm0', '--max-mbps', '0']);
  t.is(faster.code, 0, faster.stderr);
  t.regex(faster.stdout, /^already draining m0: .*; each member copying for it: no cap/);
  const record = parseDrainRecord((await etcd.client.get(keys.drainKey('m0')).string())!);
  t.truthy(record);
  t.is(record!.maxBytesPerSecond, undefined);
  const done = await following;
  t.is(done.code, 0, done.stderr);
  t.like(JSON.parse(done.stdout.trim().split('\n').pop()!), { member: 'm0', phase: 'drained', slotsHeld: 0 });
  const values = await kv.getMany(Array.from({ length: 4000 }, (_, i) => `d:${i}`));
  t.is(values.filter((v) => v === undefined || !Buffer.from(v).equals(value)).length, 0, 'every key reads back');
});
