// kv-server's eviction flags (issue 16): bad values are refused with one clear line (exit 2),
// KvServer.start refuses them with a KvConfigError, and --help documents them with defaults.
import test from 'ava';

import { KvConfigError, KvServer, type KvServerOptions } from '../../server/kv-server.js';
import { kvServer, socketUrl } from './helpers.js';

const BAD_FLAGS: Array<[string[], RegExp]> = [
  [['--eviction', 'lrfu'], /--eviction must be none, lru or lfu \(got 'lrfu'\)/],
  [['--eviction', 'lru', '--eviction-high', '120'], /--eviction-high: 120 is out of range \(2 to 99\)/],
  [['--eviction', 'lru', '--eviction-high', 'most'], /--eviction-high: 'most' is not a whole number/],
  [['--eviction', 'lfu', '--eviction-high', '70', '--eviction-low', '80'], /--eviction-low \(80\) must be below --eviction-high \(70\)/],
  [['--expiry-sweep-ms', '1'], /--expiry-sweep-ms must be at least 10 ms/],
];

for (const [flags, reason] of BAD_FLAGS) {
  test(`kv-server ${flags.join(' ')} is a usage error`, async (t) => {
    const result = await kvServer(['--listen', socketUrl(), '--memory', '16MiB', ...flags]);
    t.is(result.code, 2);
    const lines = result.stderr.split('\n').filter((line) => line !== '');
    t.is(lines.length, 1, result.stderr);
    t.regex(lines[0]!, /^kv-server: /);
    t.regex(lines[0]!, reason);
  });
}

test('--help documents the eviction flags and their defaults', async (t) => {
  const { code, stdout } = await kvServer(['--help']);
  t.is(code, 0);
  t.regex(stdout, /--eviction\s+when the heap is full: none[^\n]*\n?[^[]*\[default: "none"\]/);
  t.regex(stdout, /--eviction-high[\s\S]*?\[default: "90"\]/);
  t.regex(stdout, /--eviction-low[\s\S]*?\[default: "80"\]/);
  t.regex(stdout, /--expiry-sweep-ms[\s\S]*?\[default: "1000"\]/);
});

test('KvServer.start refuses bad eviction options', async (t) => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ eviction: 'random' }, "--eviction must be one of none, lru, lfu (got 'random')"],
    [{ eviction: 'lru', evictionHighPercent: 100 }, '--eviction-high must be a percentage of the heap from 1 to 99 (got 100)'],
    [{ eviction: 'lru', evictionLowPercent: 95 }, '--eviction-low (95) must be below --eviction-high (90): eviction frees from the high watermark down to the low one'],
    [{ expirySweepMs: 0 }, '--expiry-sweep-ms must be at least 10 ms (got 0)'],
  ];
  for (const [extra, message] of cases) {
    const options = { listen: [socketUrl()], memoryBytes: 16 << 20, ...extra } as unknown as KvServerOptions;
    const error = await t.throwsAsync(KvServer.start(options), { instanceOf: KvConfigError });
    t.is(error?.message, message);
  }
});
