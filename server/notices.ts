// Notices: after every PUT and DELETE a client writes a record into its client
// ring and announces it with WRITE_WITH_IMM (the immediate: its sequence). The
// server reads the record — the slot written and the slot replaced — retires
// the replaced block to the heap (free after the grace period), counts items,
// learns lock items, and advances the ring's consumed counter, which the
// client reads when its ring looks full. Nothing in a record is trusted.
import type { Logger } from 'pino';

import { ItemType, KvLayout, Record as RecordField, RecordKind } from '../protocol/constants.js';
import { EMPTY_SLOT, itemType, slotBlock } from '../protocol/index-format.js';
import { complain } from './sessions/channel.js';
import type { Client } from './sessions/clients.js';
import type { ServerStats } from './stats.js';
import type { RegionStore } from './store/region.js';

export class Notices {
  constructor(private readonly store: RegionStore, private readonly stats: ServerStats, private readonly log: Logger | undefined) {}

  /** Record `seq` of the client's ring: account for the PUT or DELETE and retire what it replaced. */
  onNotice(client: Client, seq: number): void {
    const { store, stats } = this;
    stats.count.notifications++;
    const region = store.bytes;
    const ringStart = store.ringAt(client.ring);
    const at = ringStart + KvLayout.RING_HEADER_BYTES + (seq % KvLayout.RING_RECORDS) * KvLayout.RECORD_BYTES;
    const kind = Number(region.readBigUInt64LE(at + RecordField.KIND));
    const newSlot = region.readBigUInt64LE(at + RecordField.NEW_SLOT);
    const oldSlot = region.readBigUInt64LE(at + RecordField.OLD_SLOT);
    // The client wrote this record: nothing in it is trusted.
    if ((kind !== RecordKind.PUT && kind !== RecordKind.DELETE) || !store.slotInHeap(newSlot) || !store.slotInHeap(oldSlot)) {
      complain(this.log, client, 'notification', `malformed notification record ${seq}`);
      region.writeBigUInt64LE(BigInt(seq) + 1n, ringStart);
      return;
    }
    if (oldSlot !== EMPTY_SLOT) {
      if (!store.retireSlot(oldSlot)) complain(this.log, client, 'retire', `notification ${seq} retires a block that is not in use`);
      store.lockItems.delete(slotBlock(oldSlot));
    } else if (kind === RecordKind.PUT && newSlot !== EMPTY_SLOT) {
      stats.count.items++;
    }
    if (newSlot !== EMPTY_SLOT) {
      const block = slotBlock(newSlot);
      client.held.delete(block); // published: the index owns it now
      const item = store.itemAt(block);
      if (item + KvLayout.ITEM_HEADER_BYTES <= store.layout.regionBytes && itemType(region, item) === ItemType.LOCK) store.lockItems.add(block);
    }
    if (kind === RecordKind.DELETE) stats.count.items--;
    // The client reads this counter (RDMA READ) when its ring looks full.
    region.writeBigUInt64LE(BigInt(seq) + 1n, ringStart);
  }
}
