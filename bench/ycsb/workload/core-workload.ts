/**
 * YCSB's CoreWorkload, one client thread's instance: the same generators and the same
 * per-operation logic (key choice, field choice, values, what is measured). It runs on the
 * configuration and shared counters of core-config.ts.
 */
import { Random } from '../random.js';
import type { NumberGenerator } from '../generators/number-generator.js';
import { toJavaInt } from '../generators/number-generator.js';
import { ScrambledZipfianGenerator, ZIPFIAN_CONSTANT, ZipfianGenerator, ZipfianRankTable } from '../generators/zipfian.js';
import { SkewedLatestGenerator } from '../generators/skewed-latest.js';
import { AcknowledgedCounterGenerator, CounterGenerator, SequentialGenerator } from '../generators/counters.js';
import {
  ConstantIntegerGenerator,
  DiscreteGenerator,
  ExponentialGenerator,
  HistogramGenerator,
  HotspotIntegerGenerator,
  UniformLongGenerator,
} from '../generators/simple.js';
import { javaHashOrderOfStrings } from '../java-format.js';
import { KeyNameCache } from './keys.js';
import { LazyFieldValues, buildDeterministicValue } from './field-values.js';
import type { CoreWorkloadConfig, WorkloadSharedState } from './core-config.js';
import { Status, type MaybePromise } from '../db/db.js';
import type { ReadResult } from '../db/read-result.js';
import type { DBWrapper, Lane } from '../client/db-wrapper.js';

/** The lane's result, emptied for the next read (one per lane: see ReadResult on why not a Map). */
function emptyResult(lane: Lane): ReadResult {
  lane.result.clear();
  return lane.result;
}

const OP_READ = 0;
const OP_UPDATE = 1;
const OP_INSERT = 2;
const OP_SCAN = 3;
const OP_RMW = 4;

/** One client thread's instance of the workload. */
export class CoreWorkload {
  private readonly keySequence: CounterGenerator;
  private readonly transactionInsertKeySequence: AcknowledgedCounterGenerator;
  private readonly operationChooser: DiscreteGenerator;
  /** operation code per operationChooser index */
  private readonly operationCodes: number[];
  private readonly keyChooser: NumberGenerator;
  private readonly keyChooserIsExponential: boolean;
  private readonly fieldChooser: UniformLongGenerator;
  private readonly fieldLengthGenerator: NumberGenerator;
  private readonly scanLength: NumberGenerator;
  private readonly keys: KeyNameCache;
  /** field names in java.util.HashMap order (how YCSB's bindings see a full record) */
  private readonly allFieldsInMapOrder: string[];
  /** one reusable single-field list per field, instead of a new HashSet per read */
  private readonly singleFields: (readonly string[])[];
  /** the insert limit cannot move when no operation inserts: skip the atomic read per operation */
  private readonly insertLimitIsFixed: boolean;
  private readonly fixedInsertLimit: number;

  constructor(readonly config: CoreWorkloadConfig, shared: WorkloadSharedState, readonly rng: Random, transactionsPhase: boolean) {
    const c = config;
    this.keySequence = new CounterGenerator(shared.keySequence);
    this.transactionInsertKeySequence = new AcknowledgedCounterGenerator(shared.transactionInsert);
    this.operationChooser = new DiscreteGenerator(rng);
    this.operationCodes = [];
    const ops: [number, number, string][] = [
      [c.proportions.READ, OP_READ, 'READ'],
      [c.proportions.UPDATE, OP_UPDATE, 'UPDATE'],
      [c.proportions.INSERT, OP_INSERT, 'INSERT'],
      [c.proportions.SCAN, OP_SCAN, 'SCAN'],
      [c.proportions.READMODIFYWRITE, OP_RMW, 'READMODIFYWRITE'],
    ];
    for (const [weight, code, name] of ops) {
      if (weight > 0) {
        this.operationChooser.addValue(weight, name);
        this.operationCodes.push(code);
      }
    }
    this.fieldLengthGenerator = CoreWorkload.fieldLengthGenerator(c, rng);
    const lastInsert = this.transactionInsertKeySequence.lastValue();
    switch (c.requestDistribution) {
      case 'uniform':
        this.keyChooser = new UniformLongGenerator(rng, c.insertStart, c.insertStart + c.insertCount - 1);
        break;
      case 'exponential':
        this.keyChooser = new ExponentialGenerator(rng, c.exponentialPercentile, c.recordCount * c.exponentialFrac);
        break;
      case 'sequential':
        this.keyChooser = new SequentialGenerator(shared.sequential, c.insertStart, c.insertStart + c.insertCount - 1);
        break;
      case 'zipfian':
        this.keyChooser = new ScrambledZipfianGenerator(
          rng,
          c.insertStart,
          c.insertStart + c.insertCount + c.expectedNewKeys,
          ZIPFIAN_CONSTANT,
          shared.popularRanks && new ZipfianRankTable(shared.popularRanks),
        );
        break;
      case 'latest':
        this.keyChooser = new SkewedLatestGenerator(rng, this.transactionInsertKeySequence);
        break;
      case 'hotspot':
        this.keyChooser = new HotspotIntegerGenerator(rng, c.insertStart, c.insertStart + c.insertCount - 1, c.hotspotDataFraction, c.hotspotOpnFraction);
        break;
    }
    this.keyChooserIsExponential = c.requestDistribution === 'exponential';
    this.fieldChooser = new UniformLongGenerator(rng, 0, c.fieldCount - 1);
    this.scanLength =
      c.scanLengthDistribution === 'uniform'
        ? new UniformLongGenerator(rng, c.minScanLength, c.maxScanLength)
        : new ZipfianGenerator(rng, c.minScanLength, c.maxScanLength);
    this.keys = new KeyNameCache(c.zeroPadding, c.orderedInserts, c.keyCacheSize);
    this.allFieldsInMapOrder = javaHashOrderOfStrings(c.fieldNames);
    this.singleFields = c.fieldNames.map((f) => Object.freeze([f]));
    this.insertLimitIsFixed = !transactionsPhase || !(c.proportions.INSERT > 0);
    this.fixedInsertLimit = lastInsert;
  }

  static fieldLengthGenerator(c: CoreWorkloadConfig, rng: Random): NumberGenerator {
    switch (c.fieldLengthDistribution) {
      case 'constant':
        return new ConstantIntegerGenerator(c.fieldLength);
      case 'uniform':
        return new UniformLongGenerator(rng, c.minFieldLength, c.fieldLength);
      case 'zipfian':
        return new ZipfianGenerator(rng, c.minFieldLength, c.fieldLength);
      case 'histogram':
        return HistogramGenerator.fromFile(rng, c.fieldLengthHistogram);
    }
  }

  /** Field values for a lane: random unless dataintegrity asks for deterministic ones. */
  newFieldValues(): LazyFieldValues {
    return new LazyFieldValues(this.rng, this.config.dataIntegrity);
  }

  private insertLimit(): number {
    return this.insertLimitIsFixed ? this.fixedInsertLimit : this.transactionInsertKeySequence.lastValue();
  }

  /** CoreWorkload.nextKeynum: retry until the key has been inserted (acknowledged). */
  nextKeynum(): number {
    let keynum: number;
    if (this.keyChooserIsExponential) {
      do keynum = this.insertLimit() - toJavaInt(this.keyChooser.nextValue());
      while (keynum < 0);
    } else {
      do keynum = toJavaInt(this.keyChooser.nextValue());
      while (keynum > this.insertLimit());
    }
    return keynum;
  }

  private buildValues(values: LazyFieldValues, key: string): void {
    values.reset(key);
    const names = this.allFieldsInMapOrder;
    for (let i = 0; i < names.length; i++) values.add(names[i]!, toJavaInt(this.fieldLengthGenerator.nextValue()));
  }

  private buildSingleValue(values: LazyFieldValues, key: string): void {
    values.reset(key);
    const name = this.config.fieldNames[this.fieldChooser.nextValue()]!;
    values.add(name, toJavaInt(this.fieldLengthGenerator.nextValue()));
  }

  private readFields(): readonly string[] | null {
    const c = this.config;
    if (!c.readAllFields) return this.singleFields[this.fieldChooser.nextValue()]!;
    if (c.dataIntegrity || c.readAllFieldsByName) return this.allFieldsInMapOrder;
    return null;
  }

  /** CoreWorkload.doInsert (load phase). Resolves false to stop this thread. */
  doInsert(db: DBWrapper, lane: Lane): MaybePromise<boolean> {
    const keynum = toJavaInt(this.keySequence.nextValue());
    const key = this.keys.name(keynum);
    this.buildValues(lane.values, key);
    const c = this.config;
    const attempt = (retries: number): MaybePromise<boolean> => {
      const status = db.insert(lane, c.table, key, lane.values);
      const after = (s: Status): MaybePromise<boolean> => {
        if (s.isOk) return true;
        if (retries + 1 <= c.insertionRetryLimit) {
          process.stderr.write(`Retrying insertion, retry count: ${retries + 1}\n`);
          const sleepMs = Math.trunc(1000 * c.insertionRetryInterval * (0.8 + 0.4 * Math.random()));
          return new Promise<boolean>((resolve) => setTimeout(() => resolve(attempt(retries + 1)), sleepMs));
        }
        process.stderr.write(
          `Error inserting, not retrying any more. number of attempts: ${retries + 1}Insertion Retry Limit: ${c.insertionRetryLimit}\n`,
        );
        return c.insertionKeepGoingOnError;
      };
      return status instanceof Status ? after(status) : status.then(after);
    };
    return attempt(0);
  }

  /**
   * CoreWorkload.doTransaction: one operation chosen by the proportions. An asynchronous read or
   * update resolves to its Status rather than `true` (truthy either way: a transaction never
   * stops the thread), which saves a promise per operation.
   */
  doTransaction(db: DBWrapper, lane: Lane): MaybePromise<boolean | Status> {
    const index = this.operationChooser.nextIndex();
    if (index < 0) return false;
    switch (this.operationCodes[index]) {
      case OP_READ:
        return this.doTransactionRead(db, lane);
      case OP_UPDATE:
        return this.doTransactionUpdate(db, lane);
      case OP_INSERT:
        return this.doTransactionInsert(db, lane);
      case OP_SCAN:
        return this.doTransactionScan(db, lane);
      default:
        return this.doTransactionReadModifyWrite(db, lane);
    }
  }

  doTransactionRead(db: DBWrapper, lane: Lane): MaybePromise<boolean | Status> {
    const key = this.keys.name(this.nextKeynum());
    const fields = this.readFields();
    const s = db.read(lane, this.config.table, key, fields, emptyResult(lane));
    if (!this.config.dataIntegrity) return s instanceof Status ? true : s;
    return s instanceof Status ? this.verifyRow(db, key, lane.result) : s.then(() => this.verifyRow(db, key, lane.result));
  }

  doTransactionUpdate(db: DBWrapper, lane: Lane): MaybePromise<boolean | Status> {
    const key = this.keys.name(this.nextKeynum());
    if (this.config.writeAllFields) this.buildValues(lane.values, key);
    else this.buildSingleValue(lane.values, key);
    const s = db.update(lane, this.config.table, key, lane.values);
    return s instanceof Status ? true : s;
  }

  doTransactionInsert(db: DBWrapper, lane: Lane): MaybePromise<boolean> {
    const keynum = this.transactionInsertKeySequence.nextValue();
    let s: MaybePromise<Status>;
    try {
      const key = this.keys.name(keynum);
      this.buildValues(lane.values, key);
      s = db.insert(lane, this.config.table, key, lane.values);
    } catch (err) {
      this.transactionInsertKeySequence.acknowledge(keynum);
      throw err;
    }
    if (s instanceof Status) {
      this.transactionInsertKeySequence.acknowledge(keynum);
      return true;
    }
    return s.then(
      () => (this.transactionInsertKeySequence.acknowledge(keynum), true),
      (err: unknown) => {
        this.transactionInsertKeySequence.acknowledge(keynum);
        throw err;
      },
    );
  }

  doTransactionScan(db: DBWrapper, lane: Lane): MaybePromise<boolean> {
    const startKey = this.keys.name(this.nextKeynum());
    const len = toJavaInt(this.scanLength.nextValue());
    const fields = this.config.readAllFields ? null : this.singleFields[this.fieldChooser.nextValue()]!;
    lane.scanResult.length = 0;
    const st = db.now();
    const s = db.scan(lane, this.config.table, startKey, len, fields, lane.scanResult);
    const finish = (): boolean => {
      const records = lane.scanResult.length;
      // YCSB divides by the record count (and throws on 0); only a non-empty scan has a per-record latency
      if (records > 0) db.measurements.measure('SCAN-LATENCY-PER-RECORD', Math.trunc(Math.trunc((db.now() - st) * 1000) / records));
      return true;
    };
    return s instanceof Status ? finish() : s.then(finish);
  }

  doTransactionReadModifyWrite(db: DBWrapper, lane: Lane): MaybePromise<boolean> {
    const key = this.keys.name(this.nextKeynum());
    const fields = this.config.readAllFields ? null : this.singleFields[this.fieldChooser.nextValue()]!;
    if (this.config.writeAllFields) this.buildValues(lane.values, key);
    else this.buildSingleValue(lane.values, key);
    emptyResult(lane);
    const ist = db.intendedStartTime(lane);
    const st = db.now();
    const finish = (): boolean => {
      const en = db.now();
      if (this.config.dataIntegrity) this.verifyRow(db, key, lane.result);
      db.measurements.measure('READ-MODIFY-WRITE', Math.trunc((en - st) * 1000));
      db.measurements.measureIntended('READ-MODIFY-WRITE', Math.trunc((en - ist) * 1000));
      return true;
    };
    const r = db.read(lane, this.config.table, key, fields, lane.result);
    if (r instanceof Status) {
      const u = db.update(lane, this.config.table, key, lane.values);
      return u instanceof Status ? finish() : u.then(finish);
    }
    return r.then(() => db.update(lane, this.config.table, key, lane.values)).then(finish);
  }

  /** CoreWorkload.verifyRow (dataintegrity=true): measured as VERIFY. */
  private verifyRow(db: DBWrapper, key: string, cells: ReadResult): boolean {
    let status = Status.OK;
    const st = db.now();
    if (cells.size > 0) {
      for (let i = 0; i < cells.size; i++) {
        if (cells.valueAt(i) !== buildDeterministicValue(key, cells.nameAt(i), toJavaInt(this.fieldLengthGenerator.nextValue()))) {
          status = Status.UNEXPECTED_STATE;
          break;
        }
      }
    } else {
      status = Status.ERROR;
    }
    const en = db.now();
    db.measurements.measure('VERIFY', Math.trunc((en - st) * 1000));
    db.measurements.statusTarget('VERIFY').reportStatus(status);
    return true;
  }
}
