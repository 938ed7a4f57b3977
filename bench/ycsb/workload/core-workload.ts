/**
 * YCSB's CoreWorkload: the same properties, defaults and generators, and the same per-operation
 * logic (key choice, field choice, values, what is measured). The configuration is parsed once
 * in the main thread (so bad input fails before any thread starts); each client thread builds
 * its own generators over the shared counters.
 */
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { Random } from '../random.js';
import type { NumberGenerator } from '../generators/number-generator.js';
import { toJavaInt } from '../generators/number-generator.js';
import {
  ScrambledZipfianGenerator,
  ZIPFIAN_CONSTANT,
  ZipfianGenerator,
  ZipfianRankTable,
  scrambledRankTable,
  type SharedRankTable,
} from '../generators/zipfian.js';
import { SkewedLatestGenerator } from '../generators/skewed-latest.js';
import {
  AcknowledgedCounterGenerator,
  CounterGenerator,
  SequentialGenerator,
  newSharedCell,
  type AcknowledgedCounterState,
  type SharedCell,
} from '../generators/counters.js';
import {
  ConstantIntegerGenerator,
  DiscreteGenerator,
  EXPONENTIAL_FRAC_DEFAULT,
  EXPONENTIAL_FRAC_PROPERTY,
  EXPONENTIAL_PERCENTILE_DEFAULT,
  EXPONENTIAL_PERCENTILE_PROPERTY,
  ExponentialGenerator,
  HistogramGenerator,
  HotspotIntegerGenerator,
  UniformLongGenerator,
} from '../generators/simple.js';
import { javaHashOrderOfStrings } from '../java-format.js';
import { KeyNameCache } from './keys.js';
import { LazyFieldValues, buildDeterministicValue } from './field-values.js';
import { Status, type DB, type MaybePromise, type Record } from '../db/db.js';
import type { DBWrapper, Lane } from '../client/db-wrapper.js';

export const OPERATIONS = ['READ', 'UPDATE', 'INSERT', 'SCAN', 'READMODIFYWRITE'] as const;
export type Operation = (typeof OPERATIONS)[number];

const REQUEST_DISTRIBUTIONS = ['uniform', 'exponential', 'sequential', 'zipfian', 'latest', 'hotspot'] as const;
type RequestDistribution = (typeof REQUEST_DISTRIBUTIONS)[number];

/** Everything CoreWorkload.init reads, validated. */
export interface CoreWorkloadConfig {
  table: string;
  fieldCount: number;
  fieldNames: string[];
  fieldLengthDistribution: 'constant' | 'uniform' | 'zipfian' | 'histogram';
  fieldLength: number;
  minFieldLength: number;
  fieldLengthHistogram: string;
  recordCount: number;
  requestDistribution: RequestDistribution;
  minScanLength: number;
  maxScanLength: number;
  scanLengthDistribution: 'uniform' | 'zipfian';
  insertStart: number;
  insertCount: number;
  zeroPadding: number;
  readAllFields: boolean;
  readAllFieldsByName: boolean;
  writeAllFields: boolean;
  dataIntegrity: boolean;
  orderedInserts: boolean;
  proportions: { [op in Operation]: number };
  /** zipfian keyspace extension for expected inserts: (int)(operationcount * insertproportion * 2) */
  expectedNewKeys: number;
  exponentialPercentile: number;
  exponentialFrac: number;
  hotspotDataFraction: number;
  hotspotOpnFraction: number;
  insertionRetryLimit: number;
  insertionRetryInterval: number;
  insertionKeepGoingOnError: boolean;
  /** kv-bench addition: size (power of two) of the per-thread key-name cache */
  keyCacheSize: number;
}

export function parseCoreWorkloadConfig(p: Properties): CoreWorkloadConfig {
  const workload = p.get('workload', 'site.ycsb.workloads.CoreWorkload');
  if (workload !== 'site.ycsb.workloads.CoreWorkload' && workload !== 'core') {
    throw new UsageError(`workload=${workload} is not supported: kv-bench implements site.ycsb.workloads.CoreWorkload`);
  }
  const fieldCount = p.getLong('fieldcount', 10);
  const prefix = p.get('fieldnameprefix', 'field');
  const fieldNames: string[] = [];
  for (let i = 0; i < fieldCount; i++) fieldNames.push(prefix + i);
  const fieldLengthDistribution = p.get('fieldlengthdistribution', 'constant');
  if (!['constant', 'uniform', 'zipfian', 'histogram'].includes(fieldLengthDistribution)) {
    throw new UsageError(`Unknown field length distribution "${fieldLengthDistribution}"`);
  }
  let recordCount = p.getLong('recordcount', 0);
  if (recordCount === 0) recordCount = 2147483647;
  const requestDistribution = p.get('requestdistribution', 'uniform');
  if (!(REQUEST_DISTRIBUTIONS as readonly string[]).includes(requestDistribution)) {
    throw new UsageError(`Unknown request distribution "${requestDistribution}"`);
  }
  const scanLengthDistribution = p.get('scanlengthdistribution', 'uniform');
  if (scanLengthDistribution !== 'uniform' && scanLengthDistribution !== 'zipfian') {
    throw new UsageError(`Distribution "${scanLengthDistribution}" not allowed for scan length`);
  }
  const insertStart = p.getLong('insertstart', 0);
  const insertCount = p.getLong('insertcount', recordCount - insertStart);
  if (recordCount < insertStart + insertCount) {
    throw new UsageError('Invalid combination of insertstart, insertcount and recordcount: recordcount must be bigger than insertstart + insertcount');
  }
  const dataIntegrity = p.getBoolean('dataintegrity', false);
  if (dataIntegrity && fieldLengthDistribution !== 'constant') {
    throw new UsageError('Must have constant field size to check data integrity.');
  }
  const proportions = {
    READ: p.getDouble('readproportion', 0.95),
    UPDATE: p.getDouble('updateproportion', 0.05),
    INSERT: p.getDouble('insertproportion', 0),
    SCAN: p.getDouble('scanproportion', 0),
    READMODIFYWRITE: p.getDouble('readmodifywriteproportion', 0),
  };
  let expectedNewKeys = 0;
  if (requestDistribution === 'zipfian') {
    if (!p.has('operationcount')) throw new UsageError('requestdistribution=zipfian needs the operationcount property');
    expectedNewKeys = toJavaInt(p.getInt('operationcount', 0) * proportions.INSERT * 2.0); // 2 is YCSB's fudge factor
  }
  const keyCacheSize = p.getInt('kvbench.keycache', 1 << 16);
  if (keyCacheSize <= 0 || (keyCacheSize & (keyCacheSize - 1)) !== 0) throw new UsageError('kvbench.keycache must be a power of two');
  return {
    table: p.get('table', 'usertable'),
    fieldCount,
    fieldNames,
    fieldLengthDistribution: fieldLengthDistribution as CoreWorkloadConfig['fieldLengthDistribution'],
    fieldLength: p.getInt('fieldlength', 100),
    minFieldLength: p.getInt('minfieldlength', 1),
    fieldLengthHistogram: p.get('fieldlengthhistogram', 'hist.txt'),
    recordCount,
    requestDistribution: requestDistribution as RequestDistribution,
    minScanLength: p.getInt('minscanlength', 1),
    maxScanLength: p.getInt('maxscanlength', 1000),
    scanLengthDistribution,
    insertStart,
    insertCount,
    zeroPadding: p.getInt('zeropadding', 1),
    readAllFields: p.getBoolean('readallfields', true),
    readAllFieldsByName: p.getBoolean('readallfieldsbyname', false),
    writeAllFields: p.getBoolean('writeallfields', false),
    dataIntegrity,
    orderedInserts: p.get('insertorder', 'hashed') !== 'hashed',
    proportions,
    expectedNewKeys,
    exponentialPercentile: p.getDouble(EXPONENTIAL_PERCENTILE_PROPERTY, EXPONENTIAL_PERCENTILE_DEFAULT),
    exponentialFrac: p.getDouble(EXPONENTIAL_FRAC_PROPERTY, EXPONENTIAL_FRAC_DEFAULT),
    hotspotDataFraction: p.getDouble('hotspotdatafraction', 0.2),
    hotspotOpnFraction: p.getDouble('hotspotopnfraction', 0.8),
    insertionRetryLimit: p.getInt('core_workload_insertion_retry_limit', 0),
    insertionRetryInterval: p.getInt('core_workload_insertion_retry_interval', 3),
    insertionKeepGoingOnError: p.getBoolean('core_workload_insertion_keep_going_on_error', false),
    keyCacheSize,
  };
}

/** The counters YCSB's workload object shares between its client threads. */
export interface WorkloadSharedState {
  keySequence: SharedCell;
  transactionInsert: AcknowledgedCounterState;
  sequential: SharedCell;
  /** the scrambled zipfian's rank table, built once for all client threads (zipfian requests only) */
  popularRanks?: SharedRankTable;
}

export function newWorkloadSharedState(config: CoreWorkloadConfig): WorkloadSharedState {
  return {
    keySequence: CounterGenerator.initialState(config.insertStart),
    transactionInsert: AcknowledgedCounterGenerator.newState(config.recordCount),
    sequential: newSharedCell(0),
    popularRanks: config.requestDistribution === 'zipfian' ? scrambledRankTable().shared : undefined,
  };
}

/**
 * Empties a reused result map. Map.prototype.clear allocates a fresh table even when the map is
 * empty (~60 ns, as much as the no-op binding's whole read), and the basic binding never fills it.
 */
function clearRecord(record: Record): void {
  if (record.size !== 0) record.clear();
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

  /** CoreWorkload.doTransaction: one operation chosen by the proportions. */
  doTransaction(db: DBWrapper, lane: Lane): MaybePromise<boolean> {
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

  doTransactionRead(db: DBWrapper, lane: Lane): MaybePromise<boolean> {
    const key = this.keys.name(this.nextKeynum());
    const fields = this.readFields();
    clearRecord(lane.result);
    const s = db.read(lane, this.config.table, key, fields, lane.result);
    if (!this.config.dataIntegrity) return s instanceof Status ? true : s.then(() => true);
    return s instanceof Status ? this.verifyRow(db, key, lane.result) : s.then(() => this.verifyRow(db, key, lane.result));
  }

  doTransactionUpdate(db: DBWrapper, lane: Lane): MaybePromise<boolean> {
    const key = this.keys.name(this.nextKeynum());
    if (this.config.writeAllFields) this.buildValues(lane.values, key);
    else this.buildSingleValue(lane.values, key);
    const s = db.update(lane, this.config.table, key, lane.values);
    return s instanceof Status ? true : s.then(() => true);
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
    clearRecord(lane.result);
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
  private verifyRow(db: DBWrapper, key: string, cells: Record): boolean {
    let status = Status.OK;
    const st = db.now();
    if (cells.size > 0) {
      for (const [field, value] of cells) {
        if (value !== buildDeterministicValue(key, field, toJavaInt(this.fieldLengthGenerator.nextValue()))) {
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

export type { DB };
