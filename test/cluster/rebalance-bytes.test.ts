// kvctl rebalance --by bytes (issue 18; docs/cluster.md "Rebalancing"), on the
// host: a cluster of three (--replicas 1) whose keys all sit in one member's
// hash slots. Each member puts its keys and bytes per hash slot at
// <prefix>.load/<name>; --dry-run shows the bytes each member holds now and
// would hold, and writes nothing; the rebalance moves hash slots, with their
// keys, until each member holds about a third of the bytes (hash slots of the
// other members stay where they are), and every key reads back. Option
// refusals: --tolerance without --by bytes, out of range, with --auto.
import ava from 'ava';

import { KvClient } from '../../client/index.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { etcdKeys, parseLoadRecord } from '../../protocol/registry.js';
import { readConfig } from '../../server/replication/config-store.js';
import { slotReplicaNames } from '../../server/replication/placement.js';
import { etcdForFile } from '../helpers/etcd.js';
import { slow, testTimeoutMs } from '../helpers/providers.js';
import { needing } from '../helpers/tools.js';
import { kvctl } from '../server/helpers.js';
import { eventually, stats } from './helpers.js';
import { replicatedMembers } from './replicated-helpers.js';

const test = needing(ava, 'etcd');
const etcd = etcdForFile(test);
const CALM_TTL = Math.round(slow(6000) / 1000);
const KEYS = 3000;

/** Per member, the keys and bytes its load record says it holds (undefined: no record). */
async function loads(prefix: string): Promise<Map<string, { keys: number; bytes: number }>> {
  const keys = etcdKeys(prefix);
  const out = new Map<string, { keys: number; bytes: number }>();
  for (const [key, text] of Object.entries(await etcd.client.getAll().prefix(keys.load).strings())) {
    const record = parseLoadRecord(text);
    if (record) out.set(key.slice(keys.load.length), { keys: record.keys.reduce((a, b) => a + b, 0), bytes: record.bytes.reduce((a, b) => a + b, 0) });
  }
  return out;
}

test.serial('kvctl rebalance --by bytes evens out the bytes members hold, from their load records; --dry-run shows them', async (t) => {
  const prefix = '/test-rebalance-bytes';
  const { members, placed } = await replicatedMembers(t, etcd, prefix, 1, 3, 'shm', [], CALM_TTL);
  const target = ['--etcd', etcd.url, '--etcd-prefix', prefix];
  t.is((await kvctl([...target, 'rebalance'])).code, 0, 'balanced by count: placement frozen');
  for (const [args, why] of [
    [['--tolerance', '5'], /--tolerance goes with --by bytes/],
    [['--by', 'bytes', '--tolerance', '200'], /--tolerance 200: expected a percentage from 0 to 100/],
    [['--by', 'bytes', '--auto', 'on'], /--auto is given alone/],
  ] as const) {
    const refused = await kvctl([...target, 'rebalance', ...args]);
    t.is(refused.code, 2, args.join(' '));
    t.regex(refused.stderr, why);
  }

  // Every key in m0's hash slots: m0 holds all the bytes, and as many hash slots as the others.
  const before = slotReplicaNames(placed).names;
  const kv = await KvClient.connect({ etcd: { hosts: etcd.url, prefix }, timeoutMs: testTimeoutMs() });
  t.teardown(() => kv.close());
  const keys: string[] = [];
  for (let i = 0; keys.length < KEYS; i++) if (before[keySlot(Buffer.from(`b:${i}`))]![0] === 'm0') keys.push(`b:${i}`);
  const value = Buffer.alloc(1000, 'b');
  for (let i = 0; i < KEYS; i += 500) await kv.putMany(keys.slice(i, i + 500).map((key): [string, Buffer] => [key, value]));
  await eventually(async () => {
    const load = await loads(prefix);
    // A record follows its member's bytes in steps of 5 % (slot-load.ts): the last few keys may not show yet.
    return (load.get('m0')?.keys ?? 0) >= KEYS * 0.95 && load.get('m1')?.keys === 0 && load.get('m2')?.keys === 0;
  }, 'every member puts its load: m0 holds every key', slow(30_000)).catch(async (error: Error) => {
    throw new Error(`${error.message}: ${JSON.stringify([...(await loads(prefix))])}`);
  });

  const dry = await kvctl([...target, '--json', 'rebalance', '--by', 'bytes', '--dry-run']);
  t.is(dry.code, 0, dry.stderr);
  const plan = JSON.parse(dry.stdout) as { dryRun: boolean; moves: number; members: Record<string, { bytes: [number, number] }> };
  t.true(plan.dryRun);
  t.true(plan.moves > 0);
  const total = plan.members.m0!.bytes[0];
  t.true(total >= KEYS * 0.95 * 1000, `m0 holds ${total} bytes`);
  for (const name of ['m0', 'm1', 'm2']) {
    const after = plan.members[name]!.bytes[1];
    t.true(Math.abs(after - total / 3) <= (total / 3) * 0.05, `${name} would hold ${after} of ${total} bytes`);
  }
  t.is(await etcd.client.get(etcdKeys(prefix).target).string(), null, 'a dry run writes nothing');
  const text = await kvctl([...target, 'rebalance', '--by', 'bytes', '--tolerance', '5', '--dry-run']);
  t.regex(text.stdout, /m0 +holds +\d+ -> +\d+ +primary of +\d+ -> +\d+ +[\d.]+ MiB -> +[\d.]+ (KiB|MiB)/);

  const done = await kvctl([...target, '--json', 'rebalance', '--by', 'bytes', '--wait']);
  t.is(done.code, 0, done.stderr);
  t.like(JSON.parse(done.stdout.trim().split('\n').pop()!), { done: true, left: 0 });
  // Only m0's hash slots moved.
  const after = slotReplicaNames((await readConfig(etcd.client, prefix))!).names;
  t.true(after.every((names, slot) => before[slot]![0] === 'm0' || names[0] === before[slot]![0]), 'the hash slots of m1 and m2 stay theirs');
  // Each member holds about a third of the keys now, as its item count says, and its load record within its 5 % steps.
  await eventually(async () => {
    const load = await loads(prefix);
    return ['m0', 'm1', 'm2'].every((name) => Math.abs((load.get(name)?.keys ?? 0) - KEYS / 3) <= (KEYS / 3) * 0.12);
  }, 'each member\'s load record holds a third of the keys', slow(30_000));
  let items: number[] = [];
  await eventually(async () => {
    items = (await Promise.all(members.map(stats))).map((s) => s.items);
    return items.every((n) => Math.abs(n - KEYS / 3) <= (KEYS / 3) * 0.06);
  }, 'each member holds a third of the items (m0 freed what it gave away)', slow(30_000)).catch((error: Error) => {
    throw new Error(`${error.message}: the members hold ${items.join(', ')} items`);
  });
  const values = await kv.getMany(keys);
  t.is(values.filter((v) => v === undefined || !Buffer.from(v).equals(value)).length, 0, 'every key reads back');
});
