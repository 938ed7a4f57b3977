/**
 * kv-bench cache mode's key space and request sequence: `keys` records named as YCSB names them
 * ("user" + FNV-1a of the keynum, so the popular keys are spread over the hash index), one
 * zipfian sequence of keynums drawn up front from a seeded generator (every store and policy of
 * a run replays the same requests, so their hit ratios differ only by what they kept), and each
 * key's value: `valueBytes` bytes that start with its keynum, so a hit is checked for free.
 */
import { ZipfianGenerator } from '../generators/zipfian.js';
import { Random } from '../random.js';
import { buildKeyName } from '../workload/keys.js';

export interface CacheWorkloadOptions {
  /** the key space: keynums 0 … keys - 1 */
  keys: number;
  valueBytes: number;
  /** requests before measuring (the cache fills and settles) */
  warmup: number;
  /** requests measured */
  operations: number;
  /** the zipfian's theta (YCSB's 0.99) */
  theta: number;
  seed: number;
}

export class CacheWorkload {
  readonly keys: number;
  readonly valueBytes: number;
  readonly warmup: number;
  readonly operations: number;
  readonly names: string[];
  /** warmup + operations keynums, in request order */
  readonly sequence: Uint32Array;
  /** the bytes every value carries after its keynum */
  private readonly pattern: Buffer;

  constructor(readonly options: CacheWorkloadOptions) {
    const { keys, valueBytes, warmup, operations, theta, seed } = options;
    if (valueBytes < 4) throw new RangeError('values carry their keynum: at least 4 bytes');
    if (keys > 0xffffffff) throw new RangeError('keynums are 32-bit');
    this.keys = keys;
    this.valueBytes = valueBytes;
    this.warmup = warmup;
    this.operations = operations;
    this.names = Array.from({ length: keys }, (_, k) => buildKeyName(k, 1, false));
    const zipf = ZipfianGenerator.ofItems(new Random(seed), keys, theta);
    this.sequence = new Uint32Array(warmup + operations);
    for (let i = 0; i < this.sequence.length; i++) this.sequence[i] = zipf.nextValue();
    this.pattern = Buffer.alloc(valueBytes);
    for (let j = 0; j < valueBytes; j++) this.pattern[j] = 33 + ((j * 31) % 90);
  }

  /** Key k's value, written into `into` (a lane's own buffer of valueBytes, reused per PUT). */
  valueOf(k: number, into: Buffer): Buffer {
    if (into.length !== this.valueBytes) throw new RangeError(`a value buffer holds ${this.valueBytes} bytes`);
    this.pattern.copy(into, 4, 4);
    into.writeUInt32LE(k, 0);
    return into;
  }

  /** Whether a GET's answer is key k's value (length and keynum; the pattern when `full`). */
  isValueOf(k: number, value: Buffer, full: boolean): boolean {
    if (value.length !== this.valueBytes || value.readUInt32LE(0) !== k) return false;
    return !full || value.subarray(4).equals(this.pattern.subarray(4));
  }
}
