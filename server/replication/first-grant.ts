// What a cluster member (kv-server --etcd) does before it answers its first
// block grant (grants.ts GrantGate holds grants until it is done). A write may
// follow any grant at once, and its key is in no load record until a walk
// counts it (slot-load.ts), while the controller places a joining member
// directly only over members that hold no key (load-guard.ts). So, in order:
//   1. this member's load record says `granted`, committed in etcd;
//   2. the config in etcd, read after that, is applied here.
// A direct placement written before 1 is in the config read at 2: its hash
// slots are fenced here before any block is granted, so no key is written into
// them (the writer refreshes its config). One written after 1 was conditioned
// on this member's record as the controller read it before 1, so it fails, and
// the controller's next round sees `granted` and freezes placement instead.
import type { Etcd3 } from 'etcd3';

import { readConfig } from './config-store.js';
import type { EpochFollower } from './epoch-follower.js';
import type { SlotLoad } from './slot-load.js';

export interface FirstGrantParts {
  prefix: string;
  /** Undefined while the member is still joining its cluster (the check fails and is tried again). */
  client: Etcd3 | undefined;
  load: SlotLoad | undefined;
  follower: EpochFollower | undefined;
}

/** Steps 1 and 2 above; rejects (GrantGate tries again) while a part is missing or etcd fails. */
export async function beforeFirstGrant({ prefix, client, load, follower }: FirstGrantParts): Promise<void> {
  if (client === undefined || load === undefined || follower === undefined) throw new Error('the member is still joining its cluster');
  await load.recordGranted();
  await follower.appliedAtLeast((await readConfig(client, prefix))?.epoch ?? 0);
}
