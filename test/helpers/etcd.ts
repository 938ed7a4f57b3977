// The suites' throwaway etcd: the benchmarks' (bench/kv/etcd-process.ts).
import type { TestFn } from 'ava';

import { type EtcdProcess, startEtcd } from '../../bench/kv/etcd-process.js';

export { type EtcdProcess, startEtcd };

/**
 * One etcd for a test file: started before its tests (through `test`, so a suite that needs etcd
 * where there is none skips this too), stopped after them. Its fields are the running etcd's.
 */
export function etcdForFile<Context>(test: TestFn<Context>): EtcdProcess {
  let running: EtcdProcess | undefined;
  test.before(async () => {
    running = await startEtcd();
  });
  test.after.always(async () => {
    await running?.stop();
  });
  const started = (): EtcdProcess => {
    if (!running) throw new Error('etcd is not started yet: use it inside a test');
    return running;
  };
  return {
    get url() {
      return started().url;
    },
    get client() {
      return started().client;
    },
    stop: () => started().stop(),
  };
}
