// The cluster registry in etcd: the keys kv-server writes (server/membership.ts)
// and clients and kvctl read (client/cluster/membership.ts, tools/kvctl).
// Membership and liveness are separate keys on purpose:
//   <prefix>/members/<name>  no lease: the member owns its hash slots until an
//                            operator removes it (kvctl forget)
//   <prefix>/alive/<name>    under the server's lease: its URL while it runs
// A member whose lease expired keeps its hash slots (its keys are in its region
// file, nowhere else), so they fail fast with KV_DISCONNECTED instead of
// silently moving to a server that does not hold them.
import { Etcd3 } from 'etcd3';

import { KvInvalidArgumentError } from './errors.js';

export const DEFAULT_ETCD_PREFIX = '/rdma-kv';

/** What kv-server writes under <prefix>/alive/<name>. */
export interface AliveRecord {
  url: string;
  pid: number;
  host: string;
  started: string;
  /** Its metrics HTTP base URL (kv-server --metrics-port), for kvctl. */
  metrics?: string;
}

/** What kv-server writes under <prefix>/members/<name>. */
export interface MemberRecord {
  name: string;
  joined: string;
}

export const etcdKeys = (prefix: string) => {
  const root = prefix.replace(/\/+$/, '');
  return {
    /** Everything of this cluster: read and watch this. */
    root: `${root}/`,
    members: `${root}/members/`,
    alive: `${root}/alive/`,
    member: (name: string) => `${root}/members/${name}`,
    aliveKey: (name: string) => `${root}/alive/${name}`,
  };
};

/** A member name becomes part of etcd keys: keep it to a safe alphabet. */
export function checkMemberName(name: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/.test(name)) {
    throw new KvInvalidArgumentError(`member name '${name}': use 1-128 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit`);
  }
  return name;
}

/** An etcd client whose every unary call has a deadline (etcd3 alone retries a dead endpoint for long). */
export function openEtcd(hosts: string[], timeoutMs: number): Etcd3 {
  return new Etcd3({
    hosts,
    dialTimeout: timeoutMs,
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + timeoutMs }),
  });
}
