// Which server holds a key. A key hashes to one of 16,384 hash slots as in
// Redis Cluster (CRC16 of the key, or of its {hash tag}: keys sharing a tag
// share a hash slot, and so a server), by the cluster-key-slot package, which
// differs from Redis for an empty "{}" followed by more text (it hashes what
// follows up to the next "}"; Redis hashes the whole key). The client core
// computes the same number for a write's epoch READ (native/kv/hash_slot.h).
// "Hash slot" is this cluster partition; a "slot" alone is an 8-byte entry of
// an index bucket (index-format.ts).
// Hash slots map to members by rendezvous hashing
// of the member's name: every client with the same member set computes the
// same map, whatever order it learned them in, and adding or removing one
// member moves only the slots that member gains or loses (rdma-kv does not
// migrate keys, so moving fewer slots strands fewer keys).
import keySlotOf from 'cluster-key-slot';

export const SLOT_COUNT = 16384;

/** The slot of a key: CRC16-XMODEM of the key (or its {tag}) modulo 16384. */
export function keySlot(key: Buffer): number {
  return keySlotOf(key);
}

/**
 * slot → index into `names` (sorted, deduplicated). Each member gets close to
 * 1/N of the slots (± a few percent). The owner is the top of placeReplicas'
 * ranking, so a config placed with one replica has exactly these primaries.
 */
export function assignSlots(names: readonly string[]): { members: string[]; owner: Uint16Array } {
  const members = sortedMembers(names);
  const owner = new Uint16Array(SLOT_COUNT);
  const seeds = members.map(nameSeed);
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    let best = 0;
    let bestScore = -1;
    const s = slotSalt(slot);
    for (let m = 0; m < seeds.length; m++) {
      const score = mix32(seeds[m]! ^ s);
      if (score > bestScore) {
        best = m;
        bestScore = score;
      }
    }
    owner[slot] = best;
  }
  return { members, owner };
}

/** A member as placement sees it: a member without a zone is its own failure domain. */
export interface PlacedMember {
  name: string;
  zone?: string | undefined;
}

/**
 * slot → the indices (into `members`, sorted by name) of its replicas, primary
 * first: the members in descending rendezvous score (assignSlots' score, ties
 * to the lower index), skipping any whose zone an earlier pick already has.
 * Fewer than `replicas` when there are fewer distinct zones: a failure domain
 * never holds two copies of a hash slot.
 */
export function placeReplicas(given: readonly PlacedMember[], replicas: number): { members: string[]; replicas: number[][] } {
  const zoneOf = new Map<string, string>();
  for (const m of given) zoneOf.set(m.name, m.zone === undefined || m.zone === '' ? `member:${m.name}` : `zone:${m.zone}`);
  const members = sortedMembers([...zoneOf.keys()]);
  const seeds = members.map(nameSeed);
  const zones = members.map((name) => zoneOf.get(name)!);
  const placed: number[][] = [];
  const scores = new Float64Array(members.length);
  for (let slot = 0; slot < SLOT_COUNT; slot++) {
    const s = slotSalt(slot);
    for (let m = 0; m < seeds.length; m++) scores[m] = mix32(seeds[m]! ^ s);
    // N passes, each taking the best member of a zone not yet used: O(members × N), no sort.
    const picked: number[] = [];
    while (picked.length < replicas) {
      let best = -1;
      for (let m = 0; m < seeds.length; m++) {
        if (best >= 0 && scores[m]! <= scores[best]!) continue;
        if (picked.some((p) => zones[p] === zones[m])) continue;
        best = m;
      }
      if (best < 0) break;
      picked.push(best);
    }
    placed.push(picked);
  }
  return { members, replicas: placed };
}

function sortedMembers(names: readonly string[]): string[] {
  const members = [...new Set(names)].sort();
  if (members.length > 0xffff) throw new RangeError(`${members.length} members: at most 65535`);
  return members;
}

const slotSalt = (slot: number) => Math.imul(slot + 1, 0x9e3779b1);

/** 32-bit FNV-1a of the name's UTF-8 bytes, mixed. */
function nameSeed(name: string): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(name, 'utf8')) h = Math.imul(h ^ byte, 0x01000193);
  return mix32(h);
}

/** MurmurHash3's finalizer: every input bit flips each output bit with probability ~1/2. Unsigned. */
function mix32(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** Slot ranges owned by each member, for people: "0-17, 19, 25-40 …". */
export function slotRanges(owner: Uint16Array, member: number): Array<[number, number]> {
  const ranges: Array<[number, number]> = [];
  for (let slot = 0; slot < owner.length; slot++) {
    if (owner[slot] !== member) continue;
    const last = ranges[ranges.length - 1];
    if (last && last[1] === slot - 1) last[1] = slot;
    else ranges.push([slot, slot]);
  }
  return ranges;
}
