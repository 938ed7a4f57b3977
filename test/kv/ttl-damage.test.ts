// EXPIRY is validated like everything read from the region: an intact item
// (checksum recomputed) whose expiry no writer writes — past 2^EXPIRY_BITS, or
// any expiry on a counter, which never expires — is damage: KV_CORRUPT, never a
// value or a miss. The damage is written into a region file between two runs.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import type { KvError } from '../../client/index.js';
import { itemChecksum } from '../../native/index.js';
import { ItemHeader, KvLayout } from '../../protocol/constants.js';
import { connect, startServer } from '../helpers/kv.js';
import { listenUrl, providersUnderTest } from '../helpers/providers.js';
import { slotOfKey, writeAt } from '../helpers/region-file.js';

/** Sets the item's EXPIRY and a checksum that holds for it. */
function setExpiry(file: string, key: string, expiry: bigint): void {
  const { itemAt, units } = slotOfKey(file, key);
  const item = Buffer.from(readFileSync(file).subarray(itemAt, itemAt + units * KvLayout.UNIT_BYTES));
  item.writeBigUInt64LE(expiry, ItemHeader.EXPIRY);
  item.writeUInt32LE(itemChecksum(item), ItemHeader.CHECKSUM);
  writeAt(file, itemAt, item.subarray(0, KvLayout.ITEM_HEADER_BYTES));
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: an expiry no writer writes is KV_CORRUPT (past 2^48 ms; any on a counter)`, async (t) => {
    const regionFile = join(mkdtempSync(join(tmpdir(), 'rkv-ttl-damage-')), 'region');
    const first = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
    const before = await connect(first);
    await before.put('far', 'v', { ttlMs: 3_600_000 });
    await before.put('edge', 'v');
    await before.incr('n', 1);
    await before.close();
    await first.close();
    const limit = 1n << BigInt(KvLayout.EXPIRY_BITS);
    setExpiry(regionFile, 'far', limit);
    setExpiry(regionFile, 'edge', limit - 1n); // the largest valid expiry: live for millennia
    setExpiry(regionFile, 'n', BigInt(Date.now() + 3_600_000));
    const second = await startServer(scheme, { listen: [listenUrl(scheme)], regionFile });
    t.teardown(() => second.close());
    const kv = await connect(second);
    t.teardown(() => kv.close());
    for (const call of [() => kv.get('far'), () => kv.ttl('far'), () => kv.getMany(['far']), () => kv.incr('n', 1)]) {
      const error = await t.throwsAsync(call());
      t.is((error as KvError).code, 'KV_CORRUPT', String(error));
    }
    t.is((await kv.get('edge'))?.toString(), 'v');
    t.true((await kv.ttl('edge'))! > 1e14);
  });
}
