// <prefix>/config as stored in etcd. A config in ranges is close to one range per
// hash slot (rendezvous placement interleaves members), about 80 bytes each in
// JSON: 1.3 MB, near etcd's 1.5 MiB request limit and sent to every watcher on
// each change. So the hash slots travel as one table, deflated: per hash slot a
// u32 epoch, then `replicas` u16 member indices and `replicas` u16 syncing
// indices (NONE: no entry), little-endian; a few KB for any cluster. Readers get
// ranges back (registry.ts's ClusterConfig) and check them there.
import { deflateRawSync, inflateRawSync } from 'node:zlib';

import { KvProtocolError } from './errors.js';
import { SLOT_COUNT } from './hash-slots.js';
import { type ClusterConfig, MAX_REPLICAS, type SlotRange } from './registry.js';

export const CONFIG_FORMAT = 'slot-table-1';
/** A table entry naming no member. */
const NONE = 0xffff;

const strideOf = (replicas: number) => 4 + 4 * replicas;

/** The stored form of `config` (ranges outside 0..16383 are cut; a hash slot no range covers is stored without replicas, which readers refuse). */
export function encodeClusterConfig(config: ClusterConfig): string {
  const { replicas } = config;
  if (config.members.length >= NONE) throw new RangeError(`a config names at most ${NONE - 1} members`);
  const stride = strideOf(replicas);
  const table = Buffer.alloc(SLOT_COUNT * stride, 0xff);
  for (const range of config.slots) {
    for (let slot = Math.max(0, range.from); slot <= Math.min(range.to, SLOT_COUNT - 1); slot++) {
      const at = slot * stride;
      table.writeUInt32LE(range.epoch, at);
      range.replicas.slice(0, replicas).forEach((member, i) => table.writeUInt16LE(member, at + 4 + 2 * i));
      range.syncing.slice(0, replicas).forEach((member, i) => table.writeUInt16LE(member, at + 4 + 2 * (replicas + i)));
    }
  }
  const { epoch, members } = config;
  return JSON.stringify({ format: CONFIG_FORMAT, epoch, replicas, members, table: deflateRawSync(table).toString('base64') });
}

/**
 * The config in `text` with its hash slots as ranges (consecutive hash slots with the same
 * entry), unchecked beyond the table's shape: registry.ts's parseClusterConfig checks the rest.
 */
export function decodeClusterConfig(text: string): ClusterConfig {
  let stored: { format?: unknown; epoch: number; replicas: number; members: string[]; table?: unknown };
  try {
    stored = JSON.parse(text);
  } catch {
    throw new KvProtocolError('etcd: config is not JSON');
  }
  if (stored === null || typeof stored !== 'object') throw new KvProtocolError('etcd: config lacks epoch, replicas, members or slots');
  if (stored.format !== CONFIG_FORMAT) throw new KvProtocolError(`etcd: config is of format ${JSON.stringify(stored.format)}, this release reads ${CONFIG_FORMAT}`);
  if (!Number.isInteger(stored.replicas) || stored.replicas < 1 || stored.replicas > MAX_REPLICAS || typeof stored.table !== 'string') {
    throw new KvProtocolError('etcd: config lacks epoch, replicas, members or slots');
  }
  const stride = strideOf(stored.replicas);
  let table: Buffer;
  try {
    table = inflateRawSync(Buffer.from(stored.table, 'base64'), { maxOutputLength: SLOT_COUNT * stride });
  } catch {
    throw new KvProtocolError(`etcd: config's slot table does not inflate to ${SLOT_COUNT * stride} bytes`);
  }
  if (table.length !== SLOT_COUNT * stride) throw new KvProtocolError(`etcd: config's slot table is ${table.length} bytes, not ${SLOT_COUNT * stride}`);
  const entry = (slot: number) => table.subarray(slot * stride, (slot + 1) * stride);
  const members = (at: number, slot: number) => {
    const list: number[] = [];
    for (let i = 0; i < stored.replicas; i++) {
      const member = table.readUInt16LE(slot * stride + at + 2 * i);
      if (member !== NONE) list.push(member);
    }
    return list;
  };
  const slots: SlotRange[] = [];
  for (let from = 0; from < SLOT_COUNT; ) {
    let to = from;
    while (to + 1 < SLOT_COUNT && entry(to + 1).equals(entry(from))) to++;
    slots.push({ from, to, replicas: members(4, from), syncing: members(4 + 2 * stored.replicas, from), epoch: table.readUInt32LE(from * stride) });
    from = to + 1;
  }
  return { epoch: stored.epoch, replicas: stored.replicas, members: stored.members, slots };
}
