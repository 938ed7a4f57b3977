// A throwaway etcd on loopback, for the membership tests and the replication
// benchmark: Debian's etcd-server binary, a temp data dir, free ports; stop()
// kills it and removes the dir. Suites that use it declare their tests with
// needing(test, 'etcd') (test/helpers/tools.ts).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Etcd3 } from 'etcd3';

import { findBinary, freePort, missingBinaryMessage } from '../ycsb/compare/servers.js';

export interface EtcdProcess {
  url: string;
  client: Etcd3;
  stop(): Promise<void>;
}

export async function startEtcd(): Promise<EtcdProcess> {
  const etcd = findBinary('etcd');
  if (etcd === undefined) throw new Error(missingBinaryMessage('etcd'));
  const dir = mkdtempSync(join(tmpdir(), 'rkv-etcd-'));
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const url = `http://127.0.0.1:${clientPort}`;
  const child: ChildProcess = spawn(
    etcd,
    ['--data-dir', join(dir, 'data'), '--listen-client-urls', url, '--advertise-client-urls', url,
      '--listen-peer-urls', `http://127.0.0.1:${peerPort}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${peerPort}`,
      '--initial-cluster', `default=http://127.0.0.1:${peerPort}`, '--log-level', 'error'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const client = new Etcd3({ hosts: url });
  // Up when it answers a read (a guard, not a timing assertion).
  for (let attempt = 0; ; attempt++) {
    try {
      await client.get('ping').string();
      break;
    } catch (error) {
      if (child.exitCode !== null || attempt > 200) {
        child.kill('SIGKILL');
        throw new Error(`etcd did not start: ${stderr.trim() || (error as Error).message}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return {
    url,
    client,
    stop: async () => {
      client.close();
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
