// A native client core driving three bare servers as one replica set (a primary and two
// backups, each region with its own bucket count and seed): what the replicated-writes
// and replicated-locks suites share. Items are placed and read straight in the regions.
import { EpochWord, KvLayout, KvOp, KvStatus, ResultLayout } from '../../native/constants.generated.js';
import { ClientCore, type CoreRegion, Provider, hashKey, nativeBuildItem } from '../../native/index.js';
import { ItemType } from '../../protocol/constants.js';
import { keySlot } from '../../protocol/hash-slots.js';
import { packSlot } from '../../protocol/index-format.js';
import { type CoreOp, writeOps } from './core-ops.js';
import { type Pair, connectPair } from './pair.js';
import { type Scheme, providersUnderTest, slow } from './providers.js';

export const INDEX = 4096;
export const HEAP_BYTES = 512 << 10;
export const EPOCHS = (1 << 20) - EpochWord.HASH_SLOTS * 8;

/** A replica's region shape: its own bucket count and seed, as members differ. */
export interface Replica {
  pair: Pair;
  buckets: number;
  seed: bigint;
}
export const heapOf = (r: Replica) => INDEX + r.buckets * 64;

export function regionOf(r: Replica, clientId: number): CoreRegion {
  const heap = heapOf(r);
  return {
    addr: r.pair.region.addr, rkey: r.pair.region.rkey, length: 1n << 20n, bucketCount: r.buckets, indexOffset: BigInt(INDEX),
    heapOffset: BigInt(heap), heapBytes: BigInt(HEAP_BYTES), seed: r.seed, ringOffset: BigInt(heap + HEAP_BYTES), clientId,
    versionBase: BigInt(clientId) << 40n, maxValueBytes: 4096, graceMs: slow(1000), epochOffset: BigInt(EPOCHS),
  };
}

export const word = (epoch: number, state: number): bigint => (BigInt(epoch) << 32n) | BigInt(state);
export function setEpochs(r: Replica, value: bigint): void {
  for (let slot = 0; slot < EpochWord.HASH_SLOTS; slot++) r.pair.region.bytes.writeBigUInt64LE(value, EPOCHS + 8 * slot);
}

export interface Done {
  id: number;
  status: number;
  version?: bigint;
  value?: string;
  blockUnused?: boolean;
  backupsUnused?: number;
}

export function results(core: ClientCore, n: number): Done[] {
  return Array.from({ length: n }, (_, i) => {
    const w = (f: number) => core.resultWords[i * ResultLayout.WORDS + f]!;
    const done: Done = { id: w(ResultLayout.ID), status: w(ResultLayout.STATUS) };
    if (done.status === KvStatus.OK) done.version = (BigInt(w(ResultLayout.VERSION_HI)) << 32n) | BigInt(w(ResultLayout.VERSION_LO));
    if (done.status === KvStatus.OK && w(ResultLayout.VALUE_LEN) > 0) {
      done.value = core.scratch.toString('utf8', w(ResultLayout.VALUE_OFFSET), w(ResultLayout.VALUE_OFFSET) + w(ResultLayout.VALUE_LEN));
    }
    if (w(ResultLayout.BLOCK_UNUSED)) done.blockUnused = true;
    if (w(ResultLayout.BACKUP_BLOCKS_UNUSED)) done.backupsUnused = w(ResultLayout.BACKUP_BLOCKS_UNUSED);
    return done;
  });
}

export function submit(core: ClientCore, ops: CoreOp[]): { taken: number; done: Done[] } {
  writeOps(core, ops);
  const taken = core.submit(ops.length);
  return { taken, done: results(core, core.submittedResults) };
}

/** Polls until `count` results are in, or `turns` event-loop turns have passed (then fewer). */
export async function collect(core: ClientCore, done: Done[], count: number, turns = Infinity): Promise<Done[]> {
  const deadline = performance.now() + slow(8000);
  for (let turn = 0; done.length < count && turn < turns && performance.now() < deadline; turn++) {
    done.push(...results(core, core.poll()));
    await new Promise((resolve) => setImmediate(resolve));
  }
  return done.sort((a, b) => a.id - b.id);
}

export async function run(core: ClientCore, ops: CoreOp[]): Promise<Done[]> {
  const { taken, done } = submit(core, ops);
  if (taken !== ops.length) throw new Error(`the core took ${taken} of ${ops.length} ops`);
  return collect(core, done, ops.length);
}

/** The key as a GET on each replica finds it: value and version, or undefined (NOT_FOUND). */
export async function everywhere(core: ClientCore, key: string): Promise<({ value: string; version: bigint } | undefined)[]> {
  const done = await run(core, [0, 1, 2].map((connection) => ({ type: KvOp.GET, id: 90 + connection, key, connection })));
  return done.map((d) => {
    if (d.status === KvStatus.NOT_FOUND) return undefined;
    if (d.status !== KvStatus.OK) throw new Error(`GET ${key}: ${JSON.stringify(d)}`);
    return { value: d.value!, version: d.version! };
  });
}

/** The key's value on one replica (undefined: NOT_FOUND). */
export async function valueOn(core: ClientCore, key: string, connection: number): Promise<string | undefined> {
  const [done] = await run(core, [{ type: KvOp.GET, id: 80, key, connection }]);
  if (done!.status !== KvStatus.OK && done!.status !== KvStatus.NOT_FOUND) throw new Error(`GET ${key}: ${JSON.stringify(done)}`);
  return done!.value;
}

/** The owners of the key's two bucket lock words on a replica (0: free). */
export function lockOwners(r: Replica, key: string): number[] {
  const { b1, b2 } = hashKey(Buffer.from(key), r.seed, r.buckets);
  return [b1, b2].map((b) => Number(r.pair.region.bytes.readBigUInt64LE(INDEX + b * 64) & 0xffffffffn));
}

/** `key` as an item of `type` placed directly in a replica's region (its slot in the key's first bucket). */
export function place(r: Replica, key: string, value: string, block: number, version: bigint, type: number = ItemType.BYTES): void {
  const k = Buffer.from(key);
  const item = nativeBuildItem(type, k, Buffer.from(value), version);
  item.copy(r.pair.region.bytes, heapOf(r) + block * KvLayout.UNIT_BYTES);
  const { b1, fingerprint } = hashKey(k, r.seed, r.buckets);
  r.pair.region.bytes.writeBigUInt64LE(packSlot(fingerprint, Math.ceil(item.length / KvLayout.UNIT_BYTES), block), INDEX + b1 * 64 + 8);
}

/** A counter item holding `value`, placed as place() places bytes; `sealed`: as a DELETE leaves it before unlinking. */
export function placeCounter(r: Replica, key: string, value: bigint, block: number, sealed = false): void {
  place(r, key, '', block, (9n << 40n) | 3n, ItemType.COUNTER);
  const word = (value << 1n) | (sealed ? BigInt(KvLayout.COUNTER_SEAL) : 0n);
  r.pair.region.bytes.writeBigUInt64LE(word, heapOf(r) + block * KvLayout.UNIT_BYTES + 24); // ItemHeader.ATOMIC_WORD
}

/** The counter's value on each replica, read by an INCR of 0 on that connection alone. */
export async function countersOf(core: ClientCore, key: string): Promise<bigint[]> {
  const done = await run(core, [0, 1, 2].map((connection) => ({ type: KvOp.INCR, id: 70 + connection, key, connection, block: 900 + 4 * connection })));
  return done.map((d) => {
    if (d.status !== KvStatus.OK) throw new Error(`INCR 0 of ${key}: ${JSON.stringify(d)}`);
    return d.version!;
  });
}

export const BACKUPS = (first: number, second: number) => [{ connection: 1, block: first }, { connection: 2, block: second }];

export async function setup(t: { teardown(fn: () => void): void }, scheme: Scheme, opTimeoutMs = slow(3000)) {
  const client = new Provider(scheme);
  const clientCq = client.createCq(1024);
  const shapes: [number, bigint][] = [[1024, 7n], [512, 9n], [2048, 11n]];
  const replicas: Replica[] = [];
  for (const [buckets, seed] of shapes) {
    const pair = await connectPair(scheme, { serverRecvs: 64, recvBytes: 64, client, clientCq });
    replicas.push({ pair, buckets, seed });
    setEpochs(replicas.at(-1)!, word(0, EpochWord.OPEN));
  }
  const [primary, b1, b2] = replicas as [Replica, Replica, Replica];
  const core = new ClientCore(client, primary.pair.clientConn, clientCq, regionOf(primary, 1), {
    scratchBytes: 1 << 20, opTimeoutMs, arenaBytes: 1 << 16,
  });
  core.addConnection(client, b1.pair.clientConn, regionOf(b1, 2));
  core.addConnection(client, b2.pair.clientConn, regionOf(b2, 3));
  t.teardown(() => {
    core.close();
    for (const r of replicas) r.pair.close();
    client.close();
  });
  return { core, primary, b1, b2, replicas };
}
