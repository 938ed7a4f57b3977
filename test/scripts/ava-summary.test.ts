// npm test's summary counts (scripts/ava-summary.mjs) on what ava really
// printed: ava-output/ holds the output of small ava runs, one per case (made
// with this checkout's ava; "-term-linux" under TERM=linux, as in the QEMU
// guest; "-colour" under FORCE_COLOR=1).
import { readFileSync } from 'node:fs';

import test from 'ava';

interface AvaCounts {
  passed: number;
  failed: number;
  skipped: number;
  todo: number;
  knownFailures: number;
  skipReasons: string[];
}

// scripts/ is plain JavaScript outside the TypeScript build: loaded from the checkout.
const ROOT = new URL('../../../', import.meta.url);
const { avaCounts, avaFailures } = (await import(new URL('scripts/ava-summary.mjs', ROOT).href)) as {
  avaCounts(output: string): AvaCounts;
  avaFailures(output: string): string[];
};
const sample = (name: string) => readFileSync(new URL(`test/scripts/ava-output/${name}.txt`, ROOT), 'utf8');

const none = { passed: 0, failed: 0, skipped: 0, todo: 0, knownFailures: 0, skipReasons: [] };
const ETCD = 'etcd not found (install etcd-server, or run scripts/setup-test-host.sh)';
const SHELLCHECK = 'shellcheck not found (install shellcheck, or run scripts/setup-test-host.sh)';

test('all passed: the count from "3 tests passed"', (t) => {
  t.deepEqual(avaCounts(sample('all-pass')), { ...none, passed: 3 });
});

test('some failed: ava prints no passed count, so the passed tests are counted from their lines; a failed hook counts', (t) => {
  t.deepEqual(avaCounts(sample('some-fail')), { ...none, passed: 3, failed: 2 });
  t.deepEqual(avaCounts(sample('some-fail-term-linux')), { ...none, passed: 3, failed: 2 }, 'TERM=linux: √ and ×');
  t.deepEqual(avaCounts(sample('some-fail-colour')), { ...none, passed: 3, failed: 2 }, 'FORCE_COLOR=1');
});

test('skips, todo and a known failure are counted apart; each skip reason once', (t) => {
  t.deepEqual(avaCounts(sample('skips')), { passed: 2, failed: 0, skipped: 3, todo: 1, knownFailures: 1, skipReasons: [ETCD, SHELLCHECK] });
});

test('uncaught exceptions and unhandled rejections: one failure per test file that crashed', (t) => {
  t.deepEqual(avaCounts(sample('uncaught')), { ...none, passed: 3, failed: 3 });
  t.deepEqual(avaCounts(sample('crash')), { ...none, passed: 2, failed: 1 }, 'process.exit() in a test');
});

test('a timeout: the tests it left pending are failures, and so is a test file that did not exit', (t) => {
  t.deepEqual(avaCounts(sample('timeout')), { ...none, passed: 1, failed: 1 });
  t.deepEqual(avaCounts(sample('no-exit')), { ...none, passed: 2, failed: 1 });
});

test('output with no ava summary at all counts nothing', (t) => {
  t.deepEqual(avaCounts('rxe tier skipped: missing Debian packages: qemu-system-x86\n'), none);
});

test('the failure lines are named once each, without colour, for the summary at the end of the log', (t) => {
  t.deepEqual(avaFailures(sample('all-pass')), []);
  t.deepEqual(avaFailures(sample('some-fail-colour')), avaFailures(sample('some-fail')), 'FORCE_COLOR=1 reads as plain');
  t.true(avaFailures(sample('some-fail')).includes('[fail]: a › fails one is not two'));
  t.true(avaFailures(sample('some-fail-term-linux')).some((line) => line.startsWith('[fail]: a › fails')), 'TERM=linux: ×');
  t.true(avaFailures(sample('crash')).some((line) => line.includes('process.exit()')));
});

test('relayText: a character split between two chunks stays one character, so a passed line still counts', async (t) => {
  const { relayText: relay } = (await import(new URL('scripts/ava-summary.mjs', ROOT).href)) as {
    relayText(stream: NodeJS.ReadableStream, sink: { write(text: string): unknown }): () => string;
  };
  const { PassThrough } = await import('node:stream');
  const stream = new PassThrough();
  const relayed: string[] = [];
  const text = relay(stream, { write: (s: string) => relayed.push(s) });
  const bytes = Buffer.from('  ✔ kv › one\n  ✔ kv › two\n');
  // The guest's console hands output over a few bytes at a time: cut inside the first "✔" (3 bytes in UTF-8).
  for (const [from, to] of [[0, 3], [3, 17], [17, bytes.length]] as const) {
    stream.write(bytes.subarray(from, to));
    await new Promise((resolve) => setImmediate(resolve));
  }
  stream.end();
  t.is(text(), '  ✔ kv › one\n  ✔ kv › two\n');
  t.is(relayed.join(''), text(), 'the sink gets the same text');
  t.is(avaCounts(text()).passed, 2);
});
