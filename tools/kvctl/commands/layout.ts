// layout: the cluster map as every client computes it (members, state, hash
// slots owned); with a key, its hash slot and the member that owns it.
import { SLOT_COUNT, keySlot } from '../../../client/index.js';
import type { CtlArgs } from '../args.js';
import { withClient } from '../connect.js';
import { layoutEntries, layoutTable } from '../format.js';
import type { Io } from '../io.js';

export async function layout(args: CtlArgs, io: Io): Promise<void> {
  const key = args.key;
  const { members, owner } = await withClient(
    args,
    io,
    async (kv) => ({ members: layoutEntries(kv.layout()), owner: key === undefined ? undefined : kv.memberFor(key) }),
    false, // a cluster that is down still has a map
  );
  const slot = key === undefined ? undefined : keySlot(Buffer.from(key, 'utf8'));
  if (args.json) {
    io.stdout(JSON.stringify({ slots: SLOT_COUNT, members, ...(key === undefined ? {} : { key: { key, slot, member: owner ?? null } }) }) + '\n');
    return;
  }
  if (key === undefined) {
    io.stdout(layoutTable(members) + `${SLOT_COUNT} slots over ${members.length} member${members.length === 1 ? '' : 's'}\n`);
    return;
  }
  const m = members.find((entry) => entry.name === owner);
  const detail = m && (m.url === m.name ? m.state : `${m.url ?? 'no address'}, ${m.state}`);
  io.stdout(m ? `${key}: slot ${slot}, member ${m.name} (${detail})\n` : `${key}: slot ${slot}, no member (the cluster is empty)\n`);
}
