// Placement of hash slots on replicas (protocol/hash-slots.ts placeReplicas)
// and the config the controller derives from it (server/replication/placement.ts):
// N distinct members per hash slot, distinct zones when declared, the same
// answer in any input order, and with one replica exactly the map clients
// compute today (assignSlots), since clients route by their own map until
// replication lands.
import { deflateRawSync } from 'node:zlib';

import test from 'ava';

import { encodeClusterConfig } from '../../protocol/config-codec.js';
import { SLOT_COUNT, assignSlots, placeReplicas } from '../../protocol/hash-slots.js';
import { parseClusterConfig } from '../../protocol/registry.js';
import { holdersOfChanged } from '../../server/replication/load-guard.js';
import { nextConfig, removedMembers, slotReplicaNames, withoutReplicas } from '../../server/replication/placement.js';

const names = (n: number) => Array.from({ length: n }, (_, i) => `kv-${i}`);

test('one replica: the primaries are exactly the map clients compute, for 1 to 7 members', (t) => {
  for (let n = 1; n <= 7; n++) {
    const clients = assignSlots(names(n));
    const placed = placeReplicas(names(n).map((name) => ({ name })), 1);
    t.deepEqual(placed.members, clients.members);
    const primaries = placed.replicas.map((r) => r[0]);
    t.true(placed.replicas.every((r) => r.length === 1));
    t.deepEqual(Uint16Array.from(primaries as number[]), clients.owner, `${n} members`);
  }
});

test('N replicas on N distinct members; the primary is still the clients\' owner; every member gets a fair share', (t) => {
  for (const replicas of [2, 3]) {
    const members = names(5);
    const clients = assignSlots(members);
    const placed = placeReplicas(members.map((name) => ({ name })), replicas);
    const held = new Array<number>(members.length).fill(0);
    for (let slot = 0; slot < SLOT_COUNT; slot++) {
      const r = placed.replicas[slot]!;
      t.is(r.length, replicas);
      t.is(new Set(r).size, replicas, `hash slot ${slot}: distinct members`);
      if (r[0] !== clients.owner[slot]) t.fail(`hash slot ${slot}: primary ${r[0]} is not the clients' owner ${clients.owner[slot]}`);
      for (const m of r) held[m]!++;
    }
    const fair = (SLOT_COUNT * replicas) / members.length;
    for (const [m, count] of held.entries()) t.true(Math.abs(count - fair) / fair < 0.1, `member ${m} holds ${count} replicas, fair is ${fair}`);
  }
});

test('zones: a hash slot\'s replicas are in distinct zones; fewer zones than N means fewer replicas, never two in one zone', (t) => {
  const members = [
    { name: 'a1', zone: 'a' }, { name: 'a2', zone: 'a' }, { name: 'b1', zone: 'b' }, { name: 'b2', zone: 'b' }, { name: 'c1', zone: 'c' },
  ];
  const zoneOf = new Map(members.map((m) => [m.name, m.zone]));
  const two = placeReplicas(members, 2);
  for (const r of two.replicas) {
    t.is(r.length, 2);
    if (zoneOf.get(two.members[r[0]!]!) === zoneOf.get(two.members[r[1]!]!)) t.fail('two replicas in one zone');
  }
  // Without zones the same members put both replicas in zone a for some hash slots: the zones changed something.
  const unzoned = placeReplicas(members.map(({ name }) => ({ name })), 2);
  t.true(unzoned.replicas.some((r) => zoneOf.get(unzoned.members[r[0]!]!) === zoneOf.get(unzoned.members[r[1]!]!)));
  // Two zones, three replicas asked: two each.
  const twoZones = placeReplicas(members.slice(0, 4), 3);
  t.true(twoZones.replicas.every((r) => r.length === 2));
  // A member without a zone is its own zone.
  const mixed = placeReplicas([{ name: 'x', zone: 'z' }, { name: 'y', zone: 'z' }, { name: 'solo' }], 2);
  t.true(mixed.replicas.every((r) => r.length === 2 && r.includes(mixed.members.indexOf('solo'))));
});

test('deterministic: the same placement whatever order the members come in', (t) => {
  const members = names(6).map((name, i) => ({ name, zone: `z${i % 3}` }));
  const forward = placeReplicas(members, 3);
  const backward = placeReplicas([...members].reverse(), 3);
  const shuffled = placeReplicas([members[3]!, members[0]!, members[5]!, members[1]!, members[4]!, members[2]!], 3);
  t.deepEqual(backward, forward);
  t.deepEqual(shuffled, forward);
});

test('config epochs: a first config is epoch 1; an unchanged member set writes nothing; a new member bumps only the hash slots it changes', (t) => {
  const first = nextConfig(undefined, names(3).map((name) => ({ name })), 2)!;
  t.is(first.epoch, 1);
  t.true(first.slots.every((r) => r.epoch === 1 && r.syncing.length === 0 && r.replicas.length === 2));
  t.deepEqual(parseClusterConfig(encodeClusterConfig(first)), first, 'what the controller writes, readers accept');
  t.is(nextConfig(first, names(3).map((name) => ({ name })), 2), undefined);

  const second = nextConfig(first, names(4).map((name) => ({ name })), 2)!;
  t.is(second.epoch, 2);
  const before = slotReplicaNames(first);
  const after = slotReplicaNames(second);
  let moved = 0;
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const same = before.names[slot]!.join() === after.names[slot]!.join();
    if (!same) moved++;
    if (after.epochs[slot] !== (same ? 1 : 2)) t.fail(`hash slot ${slot}: epoch ${after.epochs[slot]}, replicas ${same ? 'unchanged' : 'changed'}`);
  }
  t.true(moved > 0 && moved < SLOT_COUNT, `${moved} hash slots changed`);
  // Only slots that now include kv-3 changed: adding a member moves nothing else.
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    if (after.epochs[slot] === 2 && !after.names[slot]!.includes('kv-3')) t.fail(`hash slot ${slot} changed without kv-3`);
  }
  // An unreadable config's epoch is continued from, never reused.
  t.is(nextConfig(undefined, names(3).map((name) => ({ name })), 2, 41)!.epoch, 42);
});

test('a config a reader cannot trust is refused with the reason', (t) => {
  const good = nextConfig(undefined, names(2).map((name) => ({ name })), 1)!;
  const stored = JSON.parse(encodeClusterConfig(good)) as Record<string, unknown>;
  const cases: Array<[string, RegExp]> = [
    ['not json', /not JSON/],
    [encodeClusterConfig({ ...good, replicas: 4 }), /lacks epoch, replicas/],
    [JSON.stringify({ ...stored, format: undefined }), /config is of format undefined, this release reads slot-table-1/],
    [JSON.stringify({ ...stored, epoch: -1 }), /lacks epoch, replicas/],
    [JSON.stringify({ ...stored, table: 'not deflated' }), /slot table does not inflate/],
    [JSON.stringify({ ...stored, table: deflateRawSync(Buffer.alloc(100)).toString('base64') }), /slot table is 100 bytes, not/],
    [encodeClusterConfig({ ...good, slots: good.slots.slice(1) }), /range starting at hash slot 0 is malformed/],
    [encodeClusterConfig({ ...good, slots: good.slots.slice(0, -1) }), /range starting at hash slot \d+ is malformed/],
    [encodeClusterConfig({ ...good, slots: [{ ...good.slots[0]!, replicas: [5] }, ...good.slots.slice(1)] }), /range starting at hash slot 0/],
    [encodeClusterConfig({ ...good, slots: [{ ...good.slots[0]!, epoch: 2 }, ...good.slots.slice(1)] }), /range starting at hash slot 0/],
  ];
  for (const [text, message] of cases) {
    const error = t.throws(() => parseClusterConfig(text));
    t.regex(error!.message, message);
  }
});

test('the stored config is a deflated table: a few KB however the hash slots interleave, where ranges in JSON took about 1 MB', (t) => {
  for (const [members, replicas] of [[3, 1], [10, 3], [40, 2]] as const) {
    const config = nextConfig(undefined, names(members).map((name, i) => ({ name, zone: `z${i % 3}` })), replicas, 4_000_000_000)!;
    const text = encodeClusterConfig(config);
    t.true(config.slots.length > 5000, `${config.slots.length} ranges`);
    t.true(text.length < 150_000, `${members} members, N = ${replicas}: ${text.length} bytes stored, ${JSON.stringify(config).length} as ranges`);
    t.deepEqual(parseClusterConfig(text), config);
  }
});

test('failover: withoutReplicas drops the dead from every hash slot at a new epoch, promoting the next replica; hash slots left without any keep theirs; removedMembers lists the dead', (t) => {
  const config = nextConfig(undefined, names(3).map((name) => ({ name })), 2)!;
  const before = slotReplicaNames(config);
  t.is(withoutReplicas(config, new Set(['kv-9'])), undefined, 'a name that holds nothing changes nothing');
  const after = withoutReplicas(config, new Set(['kv-1']))!;
  t.is(after.epoch, config.epoch + 1);
  t.deepEqual(after.members, config.members, 'the dead stay listed');
  t.deepEqual(parseClusterConfig(encodeClusterConfig(after)), after, 'a config readers trust');
  const now = slotReplicaNames(after);
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const old = before.names[slot]!;
    const want = old.filter((n) => n !== 'kv-1');
    if (now.names[slot]!.join() !== want.join()) t.fail(`hash slot ${slot}: ${old} → ${now.names[slot]}`);
    if (now.epochs[slot] !== (old.includes('kv-1') ? after.epoch : before.epochs[slot])) t.fail(`hash slot ${slot}: epoch ${now.epochs[slot]}`);
  }
  t.deepEqual(removedMembers(after), ['kv-1']);
  t.deepEqual(removedMembers(config), []);
  // Then kv-0 too: hash slots of kv-0 and kv-1 alone (now kv-0 alone) keep kv-0; the rest go to kv-2.
  const second = withoutReplicas(after, new Set(['kv-0']))!;
  for (const [slot, names] of slotReplicaNames(second).names.entries()) {
    const had = now.names[slot]!;
    const want = had.length === 1 && had[0] === 'kv-0' ? ['kv-0'] : had.filter((n) => n !== 'kv-0');
    if (names.join() !== want.join()) t.fail(`hash slot ${slot}: ${had} → ${names}`);
  }
  t.deepEqual(removedMembers(second), ['kv-1'], 'kv-0 still holds the hash slots nothing else has');
  // Both dead at once: the hash slots they shared keep both.
  const both = withoutReplicas(config, new Set(['kv-0', 'kv-1']))!;
  for (const [slot, names] of slotReplicaNames(both).names.entries()) {
    const had = before.names[slot]!;
    const want = had.includes('kv-2') ? ['kv-2'] : had;
    if (names.join() !== want.join()) t.fail(`hash slot ${slot}: ${had} → ${names}`);
  }
});

test('before a direct placement the controller asks the holders of every hash slot that changes, also one that only gains a replica (load-guard.ts)', (t) => {
  // --replicas 2 with one member: each hash slot is [a]; b joins: no one loses a hash slot, yet b becomes primary of some.
  const one = nextConfig(undefined, [{ name: 'a' }], 2)!;
  const two = nextConfig(one, [{ name: 'a' }, { name: 'b' }], 2)!;
  t.deepEqual(holdersOfChanged(one, two), ['a']);
  // --replicas 1: a join takes hash slots from every member; a forget changes only the forgotten member's.
  const three = nextConfig(undefined, names(3).map((name) => ({ name })), 1)!;
  const four = nextConfig(three, names(4).map((name) => ({ name })), 1)!;
  t.deepEqual(holdersOfChanged(three, four).sort(), names(3));
  const forgot = nextConfig(three, names(2).map((name) => ({ name })), 1)!;
  t.deepEqual(holdersOfChanged(three, forgot), ['kv-2']);
  t.deepEqual(holdersOfChanged(three, three), []);
});
