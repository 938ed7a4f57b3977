// kv-server --listen shm://PATH: a socket directory that cannot be made (under
// /proc or /sys, under a file, or denied) ends with one clear line and a
// non-zero exit, never a hang (a recursive mkdir under /proc used to spin forever).
import { mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import { kvServer, startServerProcess } from './helpers.js';

async function failsWithOneLine(t: import('ava').ExecutionContext, url: string, reason: RegExp): Promise<void> {
  const result = await kvServer(['--listen', url, '--memory', '64M']);
  t.log(`kv-server --listen ${url} → ${result.code ?? result.signal}: ${result.stderr.trim()}`);
  t.is(result.code, 1);
  const lines = result.stderr.split('\n').filter((line) => line !== '');
  t.is(lines.length, 1, `stderr: ${result.stderr}`);
  t.true(lines[0]!.startsWith('kv-server: '));
  t.regex(lines[0]!, reason);
  t.false(result.stderr.includes('    at '));
}

test('a socket directory under /proc: one line, exit 1', (t) => failsWithOneLine(t, 'shm:///proc/x/kv.sock', /cannot listen on shm:\/\/\/proc\/x\/kv\.sock: .*\/proc/));

test('a socket directory deep under /proc: one line, exit 1', (t) => failsWithOneLine(t, 'shm:///proc/self/x/y/kv.sock', /cannot listen on .*\/proc/));

test('a socket directory under /sys: one line, exit 1', (t) => failsWithOneLine(t, 'shm:///sys/rdma-kv/kv.sock', /cannot listen on .*\/sys/));

test('a socket directory below a regular file: one line, exit 1', async (t) => {
  const file = join(mkdtempSync(join(tmpdir(), 'rkv-listen-')), 'a-file');
  writeFileSync(file, 'not a directory\n');
  await failsWithOneLine(t, `shm://${file}/sub/kv.sock`, /not a directory/);
});

test('missing socket directories that can be made are made, and the server serves', async (t) => {
  const dir = join(mkdtempSync(join(tmpdir(), 'rkv-listen-')), 'a', 'b');
  const server = await startServerProcess(['--listen', `shm://${dir}/kv.sock`, '--memory', '64M']);
  t.teardown(() => server.stop('SIGKILL'));
  t.true(statSync(dir).isDirectory());
  t.deepEqual(server.urls, [`shm://${dir}/kv.sock`]);
  t.is((await server.stop()).code, 0);
});
