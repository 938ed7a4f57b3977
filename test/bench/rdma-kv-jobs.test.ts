/**
 * The store's benchmark programs run end to end at a tiny size: `npm start`'s main job, and
 * the server child the data-path benchmark measures. No thresholds: benchmarks are not tests; this only
 * proves they start, finish, report and clean up.
 */
import test from 'ava';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { KvClient } from '../../client/index.js';

const DIST = fileURLToPath(new URL('../../', import.meta.url));

function run(script: string, args: string[], timeoutMs = 90_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(DIST, script), ...args], { env: { ...process.env, RKV_QUIET: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test('main job: loads, runs workloada, prints YCSB output and a summary, leaves nothing behind', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rkv-main-job-test-'));
  try {
    const json = join(dir, 'summary.json');
    const { code, stdout, stderr } = await run('bench/kv/main-job.js', ['--records', '300', '--operations', '600', '--threads', '2', '--seed', '3', '--json', json]);
    t.is(code, 0, stderr);
    t.regex(stdout, /^\[INSERT\], Return=OK, 300$/m);
    const reads = Number(/^\[READ\], Return=OK, (\d+)$/m.exec(stdout)?.[1] ?? 0);
    const updates = Number(/^\[UPDATE\], Return=OK, (\d+)$/m.exec(stdout)?.[1] ?? 0);
    t.is(reads + updates, 600);
    t.notRegex(stdout, /-FAILED\]/);
    t.regex(stdout, /^\| run +\| READ +\| +\d+ \|/m, 'the summary table');
    t.regex(stderr, /main-job: KvServer listening on shm:\/\//);
    t.regex(stderr, /main-job: done in/);
    const summary = JSON.parse(readFileSync(json, 'utf8')) as { phases: { phase: string; operations: number }[] };
    t.deepEqual(summary.phases.map((p) => [p.phase, p.operations]), [['load', 300], ['run', 600]]);
    const socketDir = /listening on shm:\/\/(\S+)\/kv\.sock/.exec(stderr)?.[1];
    t.truthy(socketDir);
    t.false(existsSync(socketDir!), 'the temporary socket directory is removed');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('main job: bad options exit non-zero with one line', async (t) => {
  const { code, stderr } = await run('bench/kv/main-job.js', ['--workload', 'z']);
  t.is(code, 1);
  t.regex(stderr, /--workload expects one of a…f/);
});

test('server child: prints its URL, serves, stops on SIGTERM and when its stdin pipe closes', async (t) => {
  for (const how of ['SIGTERM', 'stdin'] as const) {
    const child = spawn(process.execPath, [join(DIST, 'bench/kv/server-child.js'), '--memory-mib', '64'], { env: { ...process.env, RKV_QUIET: '1' }, stdio: ['pipe', 'pipe', 'inherit'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.trim());
      });
      child.once('exit', () => reject(new Error('server child exited before printing its URL')));
    });
    t.regex(url, /^shm:\/\/\/.+\.sock$/);
    const client = await KvClient.connect({ url });
    await client.put('k', 'v');
    t.is((await client.get('k'))?.toString(), 'v');
    await client.close();
    if (how === 'SIGTERM') child.kill('SIGTERM');
    else child.stdin.end();
    t.is(await exited, 0, how);
    t.false(existsSync(url.slice('shm://'.length)), `${how}: the socket is gone`);
  }
});
