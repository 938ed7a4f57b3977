/**
 * The processes a data-path run starts, and CPU time: the rdma-kv server child
 * (bench/kv/server-child.js, so its CPU time is its own), other benchmark programs run to
 * completion (the transport microbenchmark, the main job), and the CPU clock of a process
 * from /proc/<pid>/stat. redis-server is started by bench/ycsb/compare/servers.ts.
 *
 * Every child is killed when this process exits, however it exits; the server child also
 * stops by itself when its stdin pipe (held by this process) closes.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { ROOT } from './options.js';

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** utime + stime of a process, all its threads, in ms (resolution 1/CLK_TCK s). */
export function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields[0] is field 3 (state)
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK;
}

/** This process's CPU time (all threads: the JS thread, V8's helpers, the provider's), in ms. */
export function ownCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of running) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function tracked(child: ChildProcess): Promise<number | null> {
  running.add(child);
  return new Promise((resolve) => {
    child.once('close', (code) => {
      running.delete(child);
      resolve(code);
    });
    child.once('error', () => {
      running.delete(child);
      resolve(null);
    });
  });
}

export interface ServerChild {
  pid: number;
  url: string;
  stop(): Promise<void>;
}

/** How long the server child may take to serve (mapping and registering its region included). */
const SERVER_START_MS = 60_000;

/** The rdma-kv server child, once it serves (it prints its URL). */
export async function startServerChild(memoryMiB: number, listen: string | undefined): Promise<ServerChild> {
  const script = join(ROOT, 'dist/bench/kv/server-child.js');
  const args = [script, '--memory-mib', String(memoryMiB), ...(listen !== undefined ? ['--listen', listen] : [])];
  const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, RKV_QUIET: '1' } });
  const closed = tracked(child);
  let timer: NodeJS.Timeout | undefined;
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(out.slice(0, nl).trim());
    });
    void closed.then((code) => reject(new Error(`the rdma-kv server child exited (code ${code}) before serving`)));
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the rdma-kv server child did not serve within ${SERVER_START_MS / 1000} s (${memoryMiB} MiB region${listen !== undefined ? `, --listen ${listen}` : ''})`));
    }, SERVER_START_MS);
  }).finally(() => clearTimeout(timer));
  return {
    pid: child.pid!,
    url,
    stop: async () => {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await closed;
      clearTimeout(timer);
    },
  };
}

/** Runs a benchmark program of this package (a dist/ script) to its end; its stdout and stderr are kept, not shown. */
export async function runScript(script: string, args: string[], timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [join(ROOT, script), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RKV_QUIET: '1' } });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const code = await tracked(child);
  clearTimeout(timer);
  return { code, stdout, stderr };
}
