// Ops on an etcd cluster (routed by its config, any --replicas) wait out a failover
// within the client's timeout (docs/replication-design.md §4.5). An op runs
// through its key's replica set; while the set has a replica down (before the
// config without it), and after an answer that proves nothing happened
// (KV_EPOCH_MOVED: a replica's word is at another epoch than our config's;
// KV_READ_LEASE_LAPSED: a GET answered after its replica's read lease ended;
// KV_DISCONNECTED before the core had the op), it waits for the next config or
// member change (at most RETRY_MS) and routes again. A GET also runs again after
// any KV_DISCONNECTED (it changes nothing). A write caught by a lost connection
// after it was sent may have taken effect on some replicas: it fails
// (KV_DISCONNECTED), as such writes do on any cluster. getMany sends the keys
// whose replica set can take a GET now as one batch per primary, and runs a
// batch that failed without proof of harm (any GET's) again key by key, as it
// does the keys with no replica set to read now; putMany runs one op per key
// (a write carries its hash slot's epoch and its backups: still one submit
// for the keys of a tick).
import { KvOp } from '../../protocol/constants.js';
import { KvError } from '../../protocol/errors.js';
import { addPosition } from '../many.js';
import { NOT_SENT } from '../op-records.js';
import { type Bytes, ServerClient } from '../server-client.js';

/** How long an op waiting out a failover waits before routing again without news. */
const RETRY_MS = 100;

export class FailoverWaits {
  /** Ops waiting: woken when a config or a member's status changes (each also by its own timer). */
  private readonly waiters = new Set<() => void>();

  constructor(
    private readonly timeoutMs: number,
    private readonly closed: () => boolean,
  ) {}

  /**
   * `op(server, key, value)` through the replica set `route(key)` gives (or why there is none),
   * routed again until it runs or the timeout. `route` and `op` are meant to be long-lived
   * functions: the common case (routed, run once) allocates only the rejection handler.
   */
  run<T, V, A>(type: KvOp, key: Bytes, value: V, route: (key: Bytes) => ServerClient | KvError, op: (server: ServerClient, key: Bytes, value: V, arg: A) => Promise<T>, arg?: A): Promise<T> {
    const server = route(key);
    if (server instanceof ServerClient && server.routeRefusal(type) === undefined) {
      return op(server, key, value, arg!).catch((failed: unknown) => (nothingHappened(failed, type) ? this.again(type, () => route(key), (s) => op(s, key, value, arg!), failed) : Promise.reject(failed)));
    }
    return this.again(type, () => route(key), (s) => op(s, key, value, arg!), undefined);
  }

  /** The slow path: route and run (after waiting, when `failed` says why the last try failed), until the timeout, which rejects with the last error. */
  private async again<T>(type: KvOp, route: () => ServerClient | KvError, op: (server: ServerClient) => Promise<T>, failed: unknown): Promise<T> {
    const deadline = performance.now() + this.timeoutMs;
    let error = failed;
    let lapses = 0;
    for (;;) {
      if (error === undefined) {
        const server = route();
        error = server instanceof ServerClient ? server.routeRefusal(type) : server;
        // Only a member being down, or a primary behind the hash slot's epoch, passes; a refusal for good (a read-only
        // token's write, a closed client) fails at once.
        if (error !== undefined && !(error instanceof KvError && (error.code === 'KV_DISCONNECTED' || error.code === 'KV_READ_LEASE_LAPSED'))) throw error;
        if (error === undefined) {
          try {
            return await op(server as ServerClient);
          } catch (thrown) {
            if (!nothingHappened(thrown, type)) throw thrown;
            error = thrown;
          }
        }
      }
      const left = deadline - performance.now();
      if (this.closed() || left <= 0) throw error;
      let waitMs = RETRY_MS;
      if (error instanceof KvError && error.code === 'KV_READ_LEASE_LAPSED') {
        // Mostly a renewal that came in the poll that judged the answer (or a stalled process): at once
        // if the lease is held again, else soon; a replica cut off from etcd is left by the next config.
        const server = route();
        if (lapses++ === 0 && server instanceof ServerClient && server.readLeaseHeld) {
          error = undefined;
          continue;
        }
        waitMs = Math.min(RETRY_MS, 2 ** lapses);
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.waiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(left, waitMs));
        this.waiters.add(wake);
      });
      error = undefined;
    }
  }

  /**
   * getMany on an etcd cluster: the keys whose replica set can take a GET now go as one `batch` per primary
   * (`positions`: the keys' places in `keys`); a batch that fails with an error a GET may retry on (its keys may
   * have moved, or the primary's read lease lapsed or its connection went) runs its keys again one by one, through
   * run() with `one`, as do the keys that no replica set can read now. Rejects at the first failure.
   */
  getMany(keys: readonly Bytes[], route: (key: Bytes) => ServerClient | KvError, batch: (server: ServerClient, keys: Bytes[], positions: Int32Array) => Promise<unknown>, one: (server: ServerClient, key: Bytes, i: number) => Promise<unknown>): Promise<void> {
    const groups = new Map<ServerClient, number[]>();
    const pending: Array<Promise<unknown>> = [];
    const alone = (i: number) => this.run(KvOp.GET, keys[i]!, i, route, one);
    for (let i = 0; i < keys.length; i++) {
      const server = route(keys[i]!);
      if (!(server instanceof ServerClient) || server.routeRefusal(KvOp.GET) !== undefined) {
        pending.push(alone(i));
        continue;
      }
      addPosition(groups, server, i);
    }
    for (const [server, list] of groups) {
      const again = (failed: unknown) => (nothingHappened(failed, KvOp.GET) ? Promise.all(list.map(alone)) : Promise.reject(failed));
      pending.push(batch(server, list.map((i) => keys[i]!), Int32Array.from(list)).catch(again));
    }
    return Promise.all(pending).then(() => undefined);
  }

  /** run() for each of `keys` at once (putMany on an etcd cluster: one op per key, each waiting out a failover alone); rejects at the first failure. */
  each(type: KvOp, keys: readonly Bytes[], route: (key: Bytes) => ServerClient | KvError, op: (server: ServerClient, key: Bytes, i: number) => Promise<unknown>): Promise<void> {
    return Promise.all(keys.map((key, i) => this.run(type, key, i, route, op))).then(() => undefined);
  }

  /** The routes may have changed: the waiting ops look again. */
  changed(): void {
    for (const wake of [...this.waiters]) wake();
  }
}

/** Whether a failed op's error proves it changed nothing (or it is a GET, which changes nothing): it may run again. */
function nothingHappened(error: unknown, type: KvOp): boolean {
  if (!(error instanceof KvError)) return false;
  if (error.code === 'KV_EPOCH_MOVED') return true;
  if (error.code === 'KV_READ_LEASE_LAPSED') return type === KvOp.GET; // an INCR may have added
  return error.code === 'KV_DISCONNECTED' && (type === KvOp.GET || NOT_SENT in error);
}
