// kvctl rebalance --by bytes's planner (protocol/balance-by-bytes.ts): the
// members end within the tolerance of the mean bytes, only hash slots of
// members above it move, a hash slot's replicas stay on distinct members and
// zones, a member that joined gets its share, and a cluster it cannot even out
// (one hash slot holds most bytes) ends where moves stop helping.
import test from 'ava';

import { balanceByBytes, bytesHeld } from '../../protocol/balance-by-bytes.js';
import { SLOT_COUNT, type PlacedMember, placeReplicas } from '../../protocol/hash-slots.js';
import { type ClusterConfig, parseLoadRecord } from '../../protocol/registry.js';
import { slotReplicaNames, toRanges } from '../../protocol/slot-table.js';

function placed(live: PlacedMember[], replicas: number): ClusterConfig {
  const { members, replicas: table } = placeReplicas(live, replicas);
  return { epoch: 7, replicas, members, slots: toRanges(table, new Uint32Array(SLOT_COUNT).fill(7)) };
}

const spread = (held: Map<string, number>) => Math.max(...held.values()) / ([...held.values()].reduce((a, b) => a + b, 0) / held.size);

test('bytes all in one member\'s hash slots: the members end within 5 % of the mean; only that member\'s hash slots move', (t) => {
  const live = ['a', 'b', 'c'].map((name) => ({ name }));
  const config = placed(live, 1);
  const before = slotReplicaNames(config).names;
  const bytes = new Float64Array(SLOT_COUNT);
  before.forEach((names, slot) => {
    if (names[0] === 'a') bytes[slot] = 1000 + (slot % 7) * 300;
  });
  const target = balanceByBytes(config, live, bytes, 0.05)!;
  t.truthy(target);
  t.true(spread(bytesHeld(target, bytes)) <= 1.05, `held: ${[...bytesHeld(target, bytes)]}`);
  const after = slotReplicaNames(target).names;
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    if (before[slot]![0] !== 'a') t.deepEqual(after[slot], before[slot], `hash slot ${slot} was not a's: it stays`);
  }
  t.is(target.epoch, config.epoch);
  t.deepEqual(target.members, ['a', 'b', 'c']);
});

test('an even cluster within the tolerance moves nothing', (t) => {
  const live = ['a', 'b', 'c', 'd'].map((name) => ({ name }));
  const config = placed(live, 2);
  const bytes = new Float64Array(SLOT_COUNT).fill(4096);
  t.true(spread(bytesHeld(config, bytes)) <= 1.1);
  t.is(balanceByBytes(config, live, bytes, 0.1), undefined);
});

test('--replicas 2 with zones: replicas stay on distinct members and zones while the bytes even out', (t) => {
  const live = [
    { name: 'a', zone: 'z1' },
    { name: 'b', zone: 'z1' },
    { name: 'c', zone: 'z2' },
    { name: 'd', zone: 'z2' },
  ];
  const config = placed(live, 2);
  const bytes = new Float64Array(SLOT_COUNT);
  slotReplicaNames(config).names.forEach((names, slot) => {
    bytes[slot] = names.includes('a') ? 5000 : 100;
  });
  const target = balanceByBytes(config, live, bytes, 0.05)!;
  t.true(spread(bytesHeld(target, bytes)) <= 1.05, `held: ${[...bytesHeld(target, bytes)]}`);
  const zone = new Map(live.map((m) => [m.name, m.zone]));
  for (const names of slotReplicaNames(target).names) {
    t.is(names.length, 2);
    if (zone.get(names[0]!) === zone.get(names[1]!)) t.fail(`replicas ${names} share a zone`);
  }
});

test('a member that joined gets its share of hash slots, then of bytes', (t) => {
  const before = ['a', 'b'].map((name) => ({ name }));
  const live = [...before, { name: 'c' }];
  const config = placed(before, 1);
  const bytes = new Float64Array(SLOT_COUNT);
  for (let slot = 0; slot < SLOT_COUNT; slot++) bytes[slot] = slot < SLOT_COUNT / 2 ? 3000 : 1000;
  const target = balanceByBytes(config, live, bytes, 0.05)!;
  const held = bytesHeld(target, bytes);
  t.true((held.get('c') ?? 0) > 0);
  t.true(spread(held) <= 1.05, `held: ${[...held]}`);
});

test('one hash slot holds most bytes: no move helps past it, and the planner stops', (t) => {
  const live = ['a', 'b'].map((name) => ({ name }));
  const config = placed(live, 1);
  const bytes = new Float64Array(SLOT_COUNT).fill(10);
  const big = slotReplicaNames(config).names.findIndex((names) => names[0] === 'a');
  bytes[big] = 10_000_000;
  const target = balanceByBytes(config, live, bytes, 0.05);
  const held = bytesHeld(target ?? config, bytes);
  // a keeps the big hash slot; every small one it held may go to b, no more.
  t.is(slotReplicaNames(target ?? config).names[big]![0], 'a');
  t.true(held.get('a')! >= 10_000_000);
});

test('a load record that is not one is refused (kvctl then counts the member as not having reported)', (t) => {
  const good = { at: '2026-11-28T00:00:00Z', slots: [1, 7], keys: [2, 1], bytes: [2100, 900] };
  t.deepEqual(parseLoadRecord(JSON.stringify(good)), good);
  for (const bad of ['{', 'null', '[]', JSON.stringify({ ...good, slots: [1] }), JSON.stringify({ ...good, slots: [1, SLOT_COUNT] }), JSON.stringify({ ...good, bytes: [-1, 2] }), JSON.stringify({ ...good, keys: [1.5, 1] }), JSON.stringify({ ...good, at: 3 })]) {
    t.is(parseLoadRecord(bad), undefined, bad);
  }
});
