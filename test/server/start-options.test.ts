// KvServer.start checks the names of its options as the command line does:
// a misspelled one is a KvConfigError naming the option meant, before anything
// listens or is mapped.
import { existsSync } from 'node:fs';

import test from 'ava';

import { KvConfigError, KvServer, type KvServerOptions } from '../../server/kv-server.js';
import { checkOptions } from '../../server/options.js';
import { socketPath, socketUrl } from './helpers.js';

/** KvServer.start with options a caller typed wrong (outside the type's knowledge). */
async function startRejects(t: import('ava').ExecutionContext, extra: Record<string, unknown>, message: string): Promise<void> {
  const url = socketUrl();
  const options = { listen: [url], memoryBytes: 64 << 20, ...extra } as unknown as KvServerOptions;
  const error = await t.throwsAsync(KvServer.start(options), { instanceOf: KvConfigError });
  t.is(error?.message, message);
  t.false(existsSync(socketPath(url)), 'nothing listens');
}

test('a misspelled option names the one meant', (t) => startRejects(t, { keepAliveMs: 500 }, "unknown option 'keepAliveMs': did you mean 'keepaliveMs'?"));

test('an option named as on the command line names the one meant', (t) => startRejects(t, { maxValue: 4096 }, "unknown option 'maxValue': did you mean 'maxValueBytes'?"));

test('an option like none lists them all', (t) =>
  startRejects(
    t,
    { verbose: true },
    "unknown option 'verbose': the options are listen, memoryBytes, namespaces, token, tokens, buckets, maxValueBytes, graceMs, maxClients, keepaliveMs, regionFile, logger, beforeRecovery, eviction, evictionHighPercent, evictionLowPercent, expirySweepMs, replica",
  ));

test('token and tokens exclude each other', (t) => startRejects(t, { token: 'a', tokens: [{ token: 'b', role: 'read' }] }, 'token and tokens exclude each other'));

test('tokens: a bad role, a namespace not hosted, an empty token, a repeated token and an empty list are refused', async (t) => {
  const cases: Array<[unknown, string]> = [
    [[{ token: 'a', role: 'admin' }], "tokens: unknown role 'admin': expected read or write"],
    [[{ token: 'a', role: 'read', namespace: 'tenant-b' }], "tokens: namespace 'tenant-b' is not hosted by this server (it hosts default): add --namespace tenant-b:SIZE, or fix the token's line"],
    [[{ token: '', role: 'write' }], 'tokens: every token is a non-empty string'],
    [[{ token: 'a', role: 'write' }, { token: 'a', role: 'read' }], 'tokens: a token is given twice'],
    [[], 'tokens: give at least one { token, role }'],
  ];
  for (const [tokens, message] of cases) await startRejects(t, { tokens }, message);
});

test('every known option is accepted, undefined ones too', async (t) => {
  const server = await KvServer.start({
    listen: [socketUrl()], memoryBytes: 64 << 20, token: undefined, tokens: undefined, buckets: undefined, maxValueBytes: 4096, graceMs: 100,
    maxClients: 4, keepaliveMs: 1000, regionFile: undefined, logger: undefined, beforeRecovery: undefined,
  });
  t.teardown(() => server.close());
  t.is(server.stats().clients, 0);
});

test('the grace period defaults to 1000 ms, or 100 ms with eviction; one given is kept', (t) => {
  const base = { listen: [socketUrl()], memoryBytes: 64 << 20 };
  t.is(checkOptions(base).graceMs, 1000);
  t.is(checkOptions({ ...base, eviction: 'none' }).graceMs, 1000);
  t.is(checkOptions({ ...base, eviction: 'lru' }).graceMs, 100);
  t.is(checkOptions({ ...base, eviction: 'lfu' }).graceMs, 100);
  t.is(checkOptions({ ...base, eviction: 'lru', graceMs: 1000 }).graceMs, 1000);
});

// Readers start a GET over after an item READ slower than half the grace period: below 2 ms every
// READ is, and GETs of existing keys could only time out. Refused before anything listens.
for (const graceMs of [0, 1, 1.5, -1, Number.NaN]) {
  test(`a grace period of ${graceMs} ms is refused`, (t) =>
    startRejects(t, { graceMs }, `--grace-ms must be at least 2 ms (got ${graceMs}): readers retry every READ slower than half of it`));
}
