// Who is in a cluster and where each member listens. Two sources:
//  - static: the servers a client was given; each URL is its own name, and
//    every one is always worth dialing.
//  - etcd: members register under a prefix (kv-server --etcd). Membership and
//    liveness are separate keys on purpose:
//      <prefix>/members/<name>  no lease: the member owns its slots until an
//                               operator removes it (kvctl forget)
//      <prefix>/alive/<name>    under the server's lease: its URL while it runs
//    A member whose lease expired keeps its slots (its keys are in its region
//    file, nowhere else), so they fail fast with KV_DISCONNECTED instead of
//    silently moving to a server that does not hold them.
import { EventEmitter } from 'node:events';

import { Etcd3, type IKeyValue, type Watcher } from 'etcd3';

import { KvDisconnectedError, KvInvalidArgumentError, KvProtocolError } from '../errors.js';
import type { EtcdOptions } from '../types.js';

export const DEFAULT_ETCD_PREFIX = '/rdma-kv';

/** A member of the cluster; url is where it listens now, if it is alive. */
export interface Member {
  name: string;
  url?: string;
}

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

type SourceEvents = { change: [members: Member[]]; error: [error: Error] };

export interface MembershipSource extends EventEmitter<SourceEvents> {
  readonly members: Member[];
  close(): Promise<void>;
}

export class StaticMembership extends EventEmitter<SourceEvents> implements MembershipSource {
  readonly members: Member[];
  constructor(urls: string[]) {
    super();
    this.members = [...new Set(urls)].map((url) => ({ name: url, url }));
  }
  async close(): Promise<void> {}
}

/** Reads the prefix, then follows it with a watch from the revision read. */
export class EtcdMembership extends EventEmitter<SourceEvents> implements MembershipSource {
  private readonly joined = new Set<string>();
  private readonly keys: ReturnType<typeof etcdKeys>;
  private readonly alive = new Map<string, string>();
  private watcher: Watcher | undefined;

  private constructor(
    readonly client: Etcd3,
    readonly prefix: string,
    private readonly warn: (error: Error) => void,
  ) {
    super();
    this.keys = etcdKeys(prefix);
  }

  /** `warn` hears of records it ignores (also during the first read, before anyone could listen for 'error'). */
  static async open(options: EtcdOptions, timeoutMs: number, warn: (error: Error) => void): Promise<EtcdMembership> {
    const hosts = typeof options.hosts === 'string' ? options.hosts.split(',') : options.hosts;
    if (!Array.isArray(hosts) || hosts.length === 0 || hosts.some((h) => !/^https?:\/\/[^/]+/.test(h))) {
      throw new KvInvalidArgumentError(`etcd hosts must be http(s)://host:port URLs (got ${JSON.stringify(options.hosts)})`);
    }
    const prefix = options.prefix ?? DEFAULT_ETCD_PREFIX;
    const client = openEtcd(hosts, timeoutMs);
    const source = new EtcdMembership(client, prefix, warn);
    try {
      await source.load();
    } catch (error) {
      client.close();
      throw new KvDisconnectedError(`cannot read the cluster from etcd at ${hosts.join(',')} (prefix ${prefix}): ${(error as Error).message}`);
    }
    return source;
  }

  get members(): Member[] {
    return [...this.joined].sort().map((name) => {
      const url = this.alive.get(name);
      return url ? { name, url } : { name };
    });
  }

  private async load(): Promise<void> {
    const { root } = this.keys;
    const response = await this.client.getAll().prefix(root).exec();
    for (const kv of response.kvs) this.apply(kv, false);
    this.watcher = await this.client
      .watch()
      .prefix(root)
      .startRevision(String(Number(response.header.revision) + 1))
      .create();
    this.watcher.on('put', (kv) => this.changed(this.apply(kv, false)));
    this.watcher.on('delete', (kv) => this.changed(this.apply(kv, true)));
    this.watcher.on('error', (error) => this.emit('error', new KvDisconnectedError(`etcd watch: ${error.message}`)));
  }

  /** Applies one key; says whether anything changed. Malformed records are reported, not trusted. */
  private apply(kv: IKeyValue, deleted: boolean): boolean {
    const { keys } = this;
    const key = kv.key.toString();
    if (key.startsWith(keys.members)) {
      const name = key.slice(keys.members.length);
      if (deleted) return this.joined.delete(name);
      if (this.joined.has(name)) return false;
      this.joined.add(name);
      return true;
    }
    if (key.startsWith(keys.alive)) {
      const name = key.slice(keys.alive.length);
      if (deleted) return this.alive.delete(name);
      let url: unknown;
      try {
        url = (JSON.parse(kv.value.toString()) as Partial<AliveRecord>).url;
      } catch {
        url = undefined;
      }
      if (typeof url !== 'string' || !/^(shm|rdma):\/\//.test(url)) {
        this.warn(new KvProtocolError(`etcd: ${key} holds no usable URL; ignoring it`));
        return false;
      }
      if (this.alive.get(name) === url) return false;
      this.alive.set(name, url);
      return true;
    }
    return false;
  }

  private changed(yes: boolean): void {
    if (yes) this.emit('change', this.members);
  }

  async close(): Promise<void> {
    await this.watcher?.cancel().catch(() => undefined);
    this.client.close();
  }
}
