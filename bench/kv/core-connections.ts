/**
 * What one client core for several members buys (replication-design.md §7 step 2), at the
 * core's boundary: batches of 64 GETs spread over M members (bare shm servers in this
 * process, each with its own region, seed and bucket count), run (a) as today, one core per
 * member (its own provider and CQ), one submit per member per batch, and (b) with one core
 * driving all M connections on one CQ, one submit per batch. Alternating short rounds, so
 * both see the same minutes; prints the median and best µs per batch and the crossings
 * (submit + poll calls) per batch. Every answer is checked.
 *
 *   node dist/bench/kv/core-connections.js [MEMBERS=4] [ROUNDS=20] [ROUND_MS=200]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { KvOp, KvStatus, OpLayout, ResultLayout } from '../../native/constants.generated.js';
import { ClientCore, type CompletionQueue, type Connection, type CoreRegion, type MemoryRegion, Provider, access, hashKey, nativeBuildItem } from '../../native/index.js';
import { ItemType, KvLayout } from '../../protocol/constants.js';
import { packSlot } from '../../protocol/index-format.js';

const [members = 4, rounds = 20, roundMs = 200] = process.argv.slice(2).map(Number);
const KEYS = 512; // per member
const BATCH = 64;
const INDEX = 4096;
const BUCKETS = 4096;
const HEAP = INDEX + BUCKETS * 64;
const HEAP_BYTES = 2 << 20;
const socketDir = mkdtempSync(join(tmpdir(), 'rkv-bench-'));
let sockets = 0;

interface Member {
  provider: Provider;
  region: MemoryRegion;
  seed: bigint;
}

const valueOf = (m: number, k: number) => `member ${m} value ${k} `.padEnd(100, '.');

/** A bare server: its region with KEYS items in its index. */
function makeMember(m: number): Member {
  const provider = new Provider('shm');
  const region = provider.allocate(8 << 20, access.REMOTE_ALL);
  const seed = BigInt(11 + m);
  const used = new Uint8Array(BUCKETS);
  let block = 0;
  for (let k = 0; k < KEYS; k++) {
    const key = Buffer.from(`key-${k}`);
    const item = nativeBuildItem(ItemType.BYTES, key, Buffer.from(valueOf(m, k)), (1n << 40n) | BigInt(k + 1));
    item.copy(region.bytes, HEAP + block * KvLayout.UNIT_BYTES);
    const units = Math.ceil(item.length / KvLayout.UNIT_BYTES);
    const { b1, fingerprint } = hashKey(key, seed, BUCKETS);
    if (used[b1]! >= 7) throw new Error('a full bucket: use more buckets');
    region.bytes.writeBigUInt64LE(packSlot(fingerprint, units, block), INDEX + b1 * 64 + 8 + 8 * used[b1]!++);
    block += units;
  }
  return { provider, region, seed };
}

/** A connection of `client`, completing on `cq`, to member `m`. */
async function connect(client: Provider, cq: CompletionQueue, { provider }: Member): Promise<Connection> {
  const listener = provider.listen(`shm://${join(socketDir, `m${sockets++}.sock`)}`);
  const serverCq = provider.createCq(256);
  const accepted = new Promise<void>((resolve) => provider.once('connectRequest', (request) => request.accept({ cq: serverCq }).once('established', () => resolve())));
  const connection = await client.connect(listener.url, { cq, privateData: Buffer.from('bench'), timeoutMs: 5000 });
  await accepted;
  return connection;
}

function regionOf(m: Member, clientId: number): CoreRegion {
  return {
    addr: m.region.addr, rkey: m.region.rkey, length: 8n << 20n, bucketCount: BUCKETS, indexOffset: BigInt(INDEX), heapOffset: BigInt(HEAP),
    heapBytes: BigInt(HEAP_BYTES), seed: m.seed, ringOffset: BigInt(HEAP + HEAP_BYTES), clientId, versionBase: BigInt(clientId) << 40n,
    maxValueBytes: 4096, graceMs: 1000,
  };
}

const options = { scratchBytes: 8 << 20, opTimeoutMs: 5000, arenaBytes: 1 << 16 };
const servers = Array.from({ length: members }, (_, m) => makeMember(m));

// (a) today: a provider, CQ and core per member.
const perMember: ClientCore[] = [];
for (let m = 0; m < members; m++) {
  const client = new Provider('shm');
  const cq = client.createCq(1024);
  perMember.push(new ClientCore(client, await connect(client, cq, servers[m]!), cq, regionOf(servers[m]!, 1), options));
}
// (b) one provider, CQ and core for all members.
const shared = new Provider('shm');
const sharedCq = shared.createCq(1024);
const one = new ClientCore(shared, await connect(shared, sharedCq, servers[0]!), sharedCq, regionOf(servers[0]!, 2), options);
for (let m = 1; m < members; m++) one.addConnection(shared, await connect(shared, sharedCq, servers[m]!), regionOf(servers[m]!, 2));

let crossings = 0;
let at = 0;
/** Op i of the batch: member i % members, key at + i. */
const memberOf = (i: number) => i % members;
const keyOf = (i: number) => (at + i) % KEYS;

/** Writes the batch's ops (those of `member`, or all, each naming its member's connection) into core's descriptors; returns how many. */
function describe(core: ClientCore, member: number | undefined): number {
  let n = 0;
  let offset = 0;
  for (let i = 0; i < BATCH; i++) {
    if (member !== undefined && memberOf(i) !== member) continue;
    const o = n * OpLayout.WORDS;
    const written = core.arena.write(`key-${keyOf(i)}`, offset);
    core.opWords[o + OpLayout.TYPE] = KvOp.GET;
    core.opWords[o + OpLayout.ID] = i;
    core.opWords[o + OpLayout.KEY_OFFSET] = offset;
    core.opWords[o + OpLayout.KEY_LEN] = written;
    core.opWords[o + OpLayout.CONNECTION] = member === undefined ? memberOf(i) : 0;
    offset += written;
    n++;
  }
  return n;
}

function check(core: ClientCore, results: number): number {
  for (let r = 0; r < results; r++) {
    const w = (f: number) => core.resultWords[r * ResultLayout.WORDS + f]!;
    const i = w(ResultLayout.ID);
    const value = core.scratch.toString('latin1', w(ResultLayout.VALUE_OFFSET), w(ResultLayout.VALUE_OFFSET) + w(ResultLayout.VALUE_LEN));
    if (w(ResultLayout.STATUS) !== KvStatus.OK || value !== valueOf(memberOf(i), keyOf(i))) throw new Error(`a wrong answer for op ${i}`);
  }
  return results;
}

/** One batch through `core` (ops of `member`, or all): submit, then poll until every result is in. */
function run(core: ClientCore, member: number | undefined): void {
  const n = describe(core, member);
  crossings++;
  if (core.submit(n) !== n) throw new Error('the core did not take the batch');
  let done = check(core, core.submittedResults);
  while (done < n) {
    crossings++;
    done += check(core, core.poll());
  }
}

function round(mode: 'a' | 'b', ms: number): { us: number; crossings: number } {
  const end = performance.now() + ms;
  const start = performance.now();
  const c0 = crossings;
  let batches = 0;
  for (; performance.now() < end; batches++, at += BATCH) {
    if (mode === 'a') for (let m = 0; m < members; m++) run(perMember[m]!, m);
    else run(one, undefined);
  }
  return { us: ((performance.now() - start) * 1000) / batches, crossings: (crossings - c0) / batches };
}

round('a', 1000);
round('b', 1000);
const results = { a: [] as Array<{ us: number; crossings: number }>, b: [] as Array<{ us: number; crossings: number }> };
for (let r = 0; r < rounds; r++) {
  results.a.push(round('a', roundMs));
  results.b.push(round('b', roundMs));
}
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;
for (const [mode, label] of [['a', 'a core per member'], ['b', 'one core, all members']] as const) {
  const rs = results[mode];
  console.log(`${label}: ${members} members, ${BATCH} GETs a batch: µs/batch median ${median(rs.map((x) => x.us)).toFixed(1)}, best ${Math.min(...rs.map((x) => x.us)).toFixed(1)}; crossings/batch ${median(rs.map((x) => x.crossings)).toFixed(2)}`);
}
console.log(`one core / a core per member: median per-round ratio ${median(results.b.map((x, i) => x.us / results.a[i]!.us)).toFixed(3)}`);
for (const core of [...perMember, one]) core.close();
rmSync(socketDir, { recursive: true, force: true });
process.exit(0);
