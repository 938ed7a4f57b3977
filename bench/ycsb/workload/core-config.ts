/**
 * YCSB's CoreWorkload configuration: every property CoreWorkload.init reads, with YCSB's names
 * and defaults, parsed and checked once in the main thread (so bad input fails before any thread
 * starts), and the counters its client threads share. The per-thread workload is core-workload.ts.
 */
import { UsageError } from '../../../protocol/operator-input.js';
import type { Properties } from '../properties.js';
import { toJavaInt } from '../generators/number-generator.js';
import { scrambledRankTable, type SharedRankTable } from '../generators/zipfian.js';
import {
  AcknowledgedCounterGenerator,
  CounterGenerator,
  newSharedCell,
  type AcknowledgedCounterState,
  type SharedCell,
} from '../generators/counters.js';
import {
  EXPONENTIAL_FRAC_DEFAULT,
  EXPONENTIAL_FRAC_PROPERTY,
  EXPONENTIAL_PERCENTILE_DEFAULT,
  EXPONENTIAL_PERCENTILE_PROPERTY,
} from '../generators/simple.js';

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
