import test from 'ava';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Properties, parsePropertiesText } from '../../bench/ycsb/properties.js';
import { UsageError } from '../../protocol/operator-input.js';
import { splitOperationCount } from '../../bench/ycsb/client/split.js';
import { parseCoreWorkloadConfig } from '../../bench/ycsb/workload/core-config.js';

test('java.util.Properties syntax: comments, separators, whitespace, continuations, escapes', (t) => {
  const p = parsePropertiesText(
    [
      '# comment',
      '! also a comment',
      '   recordcount=1000',
      'operationcount : 2000',
      'table usertable',
      'label = a\\',
      '    b\\',
      '  c',
      'path=C:\\\\data\\tx',
      'unicode=\\u0041\\u0062',
      'key\\ with\\ spaces=v',
      'empty=',
      'trailing = value  ',
      '',
    ].join('\n'),
  );
  t.is(p.get('recordcount'), '1000');
  t.is(p.get('operationcount'), '2000');
  t.is(p.get('table'), 'usertable');
  t.is(p.get('label'), 'abc');
  t.is(p.get('path'), 'C:\\data\tx');
  t.is(p.get('unicode'), 'Ab');
  t.is(p.get('key with spaces'), 'v');
  t.is(p.get('empty'), '');
  t.is(p.get('trailing'), 'value  ');
  t.false(p.has('# comment'));
});

test('files apply in order and -p overrides every file', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kvb-props-'));
  const a = join(dir, 'a');
  const b = join(dir, 'b');
  writeFileSync(a, 'recordcount=1\noperationcount=1\nfieldcount=3\n');
  writeFileSync(b, 'recordcount=2\n');
  const p = Properties.fromSources([a, b], ['operationcount=5', 'x=y=z']);
  t.is(p.get('recordcount'), '2');
  t.is(p.get('operationcount'), '5');
  t.is(p.get('fieldcount'), '3');
  t.is(p.get('x'), 'y=z');
});

test('a missing property file and a malformed -p are UsageErrors', (t) => {
  t.throws(() => Properties.fromSources(['/nonexistent/workload'], []), { instanceOf: UsageError, message: /cannot read property file/ });
  t.throws(() => Properties.fromSources([], ['novalue']), { instanceOf: UsageError, message: /name=value/ });
});

test('typed getters parse like Java and reject garbage with a clear message', (t) => {
  const p = new Properties([
    ['i', ' 42 '],
    ['neg', '-7'],
    ['big', '3000000000'],
    ['d', '0.95'],
    ['e', '1e3'],
    ['f', '2.5f'],
    ['bad', '12abc'],
    ['t', 'TRUE'],
    ['y', 'yes'],
  ]);
  t.is(p.getInt('i', 0), 42);
  t.is(p.getInt('neg', 0), -7);
  t.is(p.getInt('missing', 9), 9);
  t.is(p.getLong('big', 0), 3000000000);
  t.throws(() => p.getInt('big', 0), { instanceOf: UsageError, message: /32-bit/ });
  t.is(p.getDouble('d', 0), 0.95);
  t.is(p.getDouble('e', 0), 1000);
  t.is(p.getDouble('f', 0), 2.5);
  t.throws(() => p.getInt('bad', 0), { instanceOf: UsageError, message: 'property bad="12abc" is not an integer' });
  t.throws(() => p.getDouble('bad', 0), { instanceOf: UsageError });
  t.true(p.getBoolean('t', false));
  t.false(p.getBoolean('y', true)); // Boolean.parseBoolean: only "true" is true
  t.true(p.getBoolean('missing', true));
});

test('CoreWorkload defaults are YCSB\'s', (t) => {
  const c = parseCoreWorkloadConfig(new Properties([['recordcount', '1000']]));
  t.is(c.table, 'usertable');
  t.is(c.fieldCount, 10);
  t.is(c.fieldLength, 100);
  t.is(c.fieldLengthDistribution, 'constant');
  t.deepEqual(c.proportions, { READ: 0.95, UPDATE: 0.05, INSERT: 0, SCAN: 0, READMODIFYWRITE: 0 });
  t.is(c.requestDistribution, 'uniform');
  t.is(c.zeroPadding, 1);
  t.false(c.orderedInserts);
  t.is(c.maxScanLength, 1000);
  t.is(c.minScanLength, 1);
  t.true(c.readAllFields);
  t.false(c.writeAllFields);
  t.is(c.insertStart, 0);
  t.is(c.insertCount, 1000);
  t.is(c.hotspotDataFraction, 0.2);
  t.is(c.hotspotOpnFraction, 0.8);
  t.is(parseCoreWorkloadConfig(new Properties()).recordCount, 2147483647); // recordcount 0 means Integer.MAX_VALUE
});

test('CoreWorkload config errors are UsageErrors', (t) => {
  const bad = (entries: [string, string][]) => () => parseCoreWorkloadConfig(new Properties(entries));
  t.throws(bad([['requestdistribution', 'pareto']]), { instanceOf: UsageError, message: /Unknown request distribution/ });
  t.throws(bad([['requestdistribution', 'zipfian']]), { instanceOf: UsageError, message: /operationcount/ });
  t.throws(bad([['recordcount', '10'], ['insertstart', '5'], ['insertcount', '6']]), { instanceOf: UsageError });
  t.throws(bad([['fieldlengthdistribution', 'weird']]), { instanceOf: UsageError });
  t.throws(bad([['workload', 'site.ycsb.workloads.TimeSeriesWorkload']]), { instanceOf: UsageError });
  // zipfian keyspace grows by (int)(operationcount * insertproportion * 2)
  const c = parseCoreWorkloadConfig(new Properties([['requestdistribution', 'zipfian'], ['operationcount', '1000'], ['insertproportion', '0.05']]));
  t.is(c.expectedNewKeys, 100);
});

test('operation counts split across threads as YCSB does', (t) => {
  t.deepEqual(splitOperationCount(10, 3), { threadCount: 3, perThread: [4, 3, 3], lowered: false });
  t.deepEqual(splitOperationCount(1000, 4).perThread, [250, 250, 250, 250]);
  t.deepEqual(splitOperationCount(7, 5).perThread, [2, 2, 1, 1, 1]);
  t.deepEqual(splitOperationCount(2, 5), { threadCount: 2, perThread: [1, 1], lowered: true });
  t.deepEqual(splitOperationCount(0, 3), { threadCount: 3, perThread: [0, 0, 0], lowered: false }); // 0 = unbounded
  for (const [ops, threads] of [[1_000_003, 7], [99, 10], [5, 5]] as const) {
    const s = splitOperationCount(ops, threads);
    t.is(s.perThread.reduce((a, b) => a + b, 0), ops);
    t.true(Math.max(...s.perThread) - Math.min(...s.perThread) <= 1);
  }
});
