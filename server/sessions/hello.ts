// The hello: the first message a client gets once connected, all it needs to
// work alone: its id and version base, where the region is (its rkey on this
// fabric: its own memory window's where the fabric has windows), the layout,
// its client ring, the hash seed, the timings, and the namespace it opened. A read client's hello says
// so: its rkey is READ-only (its window, or the READ-only registration), and
// it has no client ring (it leaves no notices and is granted no blocks). A
// replica's hello grants its first read lease (read-leases.ts).
import { KvLayout } from '../../protocol/constants.js';
import type { Hello } from '../../protocol/control.js';
import { sessionVersionBase } from '../../protocol/index-format.js';
import type { ServerSettings } from '../options.js';
import type { RegionStore } from '../store/region.js';
import type { Client } from './clients.js';

export function helloFor(client: Client, store: RegionStore, settings: Pick<ServerSettings, 'graceMs' | 'keepaliveMs'>, namespace: string, lease: { readLeaseMs?: number; configEpoch?: number } = {}): Hello {
  const { layout } = store;
  const writes = client.role === 'write';
  // Its window covers the whole region; without windows, accept takes a read client only where the READ-only registration exists.
  const region = client.window ?? (writes ? client.fabric.region : client.fabric.readOnly!);
  return {
    t: 'hello',
    v: KvLayout.PROTOCOL_VERSION,
    role: client.role,
    namespace,
    clientId: client.id,
    versionBase: sessionVersionBase(client.session),
    // accessOffset (eviction on, write clients): where a GET marks the item it read (docs/architecture.md,
    // "Eviction"). A read client's rkey cannot WRITE, so it marks nothing.
    // epochOffset (format 5, write clients): the epoch table each write READs (a read client writes nothing).
    region: {
      addr: region.addr,
      rkey: region.rkey,
      length: BigInt(layout.regionBytes),
      ...(writes && layout.accessOffset > 0 ? { accessOffset: BigInt(layout.accessOffset) } : {}),
      ...(writes && layout.epochOffset > 0 ? { epochOffset: BigInt(layout.epochOffset) } : {}),
    },
    layout: {
      bucketCount: layout.bucketCount,
      indexOffset: BigInt(layout.indexOffset),
      heapOffset: BigInt(layout.heapOffset),
      heapBytes: BigInt(layout.heapBytes),
      seed: store.seed,
      ...(writes ? { ringOffset: BigInt(store.ringAt(client.ring)) } : {}),
      classes: layout.classes,
      maxKeyBytes: KvLayout.MAX_KEY_BYTES,
      maxValueBytes: layout.maxValueBytes,
    },
    graceMs: settings.graceMs,
    keepaliveMs: settings.keepaliveMs,
    ...lease,
  };
}
