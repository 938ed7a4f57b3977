// Who is in a cluster and where each member listens. Two sources:
//  - static: the servers a client was given; each URL is its own name, and
//    every one is always worth dialing.
//  - etcd: members register under a prefix (kv-server --etcd); the keys and
//    records are protocol/registry.ts's.
import { EventEmitter } from 'node:events';

import type { Etcd3, IKeyValue, Watcher } from 'etcd3';

import { KvDisconnectedError, KvInvalidArgumentError, KvProtocolError } from '../../protocol/errors.js';
import { isServerUrl } from '../../protocol/providers.js';
import { type AliveRecord, type ClusterConfig, DEFAULT_ETCD_PREFIX, cancelWatch, etcdKeys, openEtcd, parseClusterConfig } from '../../protocol/registry.js';
import type { EtcdOptions, KvStatusName, MemberLayout } from '../types.js';

/** A member of the cluster; url is where it listens now, if it is alive. */
export interface Member {
  name: string;
  url?: string;
}

type SourceEvents = { change: [members: Member[]]; config: [config: ClusterConfig]; error: [error: Error] };

export interface MembershipSource extends EventEmitter<SourceEvents> {
  readonly members: Member[];
  /** The controller's placement (etcd, kv-server --replicas): each hash slot's replicas and epoch; undefined until written. */
  readonly config?: ClusterConfig | undefined;
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
  config: ClusterConfig | undefined;

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
    const client = openEtcd(hosts, timeoutMs, true);
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
    const { root, members, alive } = this.keys;
    // members/ and alive/ only, at one revision: the prefix also holds the controller's config (tens of KB).
    const joined = await this.client.getAll().prefix(members).exec();
    const { revision } = joined.header;
    const live = await this.client.getAll().prefix(alive).revision(revision).exec();
    const config = await this.client.get(this.keys.config).revision(revision).exec();
    for (const kv of [...joined.kvs, ...live.kvs, ...config.kvs]) this.apply(kv, false);
    this.watcher = await this.client
      .watch()
      .prefix(root)
      .startRevision(String(Number(revision) + 1))
      .create();
    this.watcher.on('put', (kv) => {
      if (kv.key.toString() === this.keys.config) this.newConfig(kv);
      else this.changed(this.apply(kv, false));
    });
    this.watcher.on('delete', (kv) => this.changed(this.apply(kv, true)));
    this.watcher.on('error', (error) => this.emit('error', new KvDisconnectedError(`etcd watch: ${error.message}`)));
  }

  private refreshing: Promise<void> | undefined;

  /**
   * Reads config once more (one at a time): a replica said its config is newer than ours (its
   * read lease does not count for us until we have it) and our watch has not brought it, say
   * because this process was paused or its etcd connection stalled.
   */
  refreshConfig(): void {
    this.refreshing ??= this.client
      .get(this.keys.config)
      .exec()
      .then((read) => {
        const kv = read.kvs[0];
        if (kv) this.newConfig(kv);
      })
      .catch((error: unknown) => {
        this.emit('error', new KvDisconnectedError(`etcd: reading config again: ${(error as Error).message}`));
      })
      .finally(() => {
        this.refreshing = undefined;
      });
  }

  /** A config written after the first read: routed by once it parses. */
  private newConfig(kv: IKeyValue): void {
    if (this.apply(kv, false) && this.config) this.emit('config', this.config);
  }

  /** Applies one key; says whether anything changed. Malformed records are reported, not trusted. */
  private apply(kv: IKeyValue, deleted: boolean): boolean {
    const { keys } = this;
    const key = kv.key.toString();
    if (key === keys.config) {
      if (deleted) return false; // only an operator deletes it: keep routing by the last one
      try {
        const config = parseClusterConfig(kv.value.toString());
        // Epochs only grow: a watch event older than a config read since (refreshConfig) is not applied.
        if (this.config && config.epoch < this.config.epoch) return false;
        this.config = config;
        return true;
      } catch (error) {
        this.warn(error as Error);
        return false;
      }
    }
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
      if (typeof url !== 'string' || !isServerUrl(url)) {
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

  /** Cancels the watch (cancelWatch: an etcd that does not answer must not keep close() waiting), then closes the etcd client. */
  async close(): Promise<void> {
    await cancelWatch(this.watcher);
    this.watcher = undefined;
    this.client.close();
  }
}

/** Each member, where it is, its state and its share of slots (`owner`: slot → member index). */
export function memberLayouts(members: readonly string[], owner: ArrayLike<number>, status: (name: string) => KvStatusName | undefined, urls: ReadonlyMap<string, string | undefined>): MemberLayout[] {
  const counts = new Array<number>(members.length).fill(0);
  for (let slot = 0; slot < owner.length; slot++) counts[owner[slot]!]!++;
  return members.map((name, i) => {
    const entry: MemberLayout = { name, status: status(name) ?? 'down', slots: counts[i]! };
    const url = urls.get(name);
    if (url) entry.url = url;
    return entry;
  });
}

/** A cluster client's status from its members' connections: all ready, some, all closed, or none ready yet. */
export function clusterStatus(members: readonly string[], status: (name: string) => KvStatusName | undefined): KvStatusName {
  let ready = 0;
  let closed = 0;
  for (const name of members) {
    const now = status(name);
    if (now === 'ready') ready++;
    else if (now === 'closed') closed++;
  }
  const n = members.length;
  return n > 0 && ready === n ? 'ready' : ready > 0 ? 'degraded' : n > 0 && closed === n ? 'closed' : 'reconnecting';
}

/** What an op of hash slot `slot` gets when its member (by the member list's map), `name`, has no connection. */
export function slotDown(slot: number, name: string | undefined): KvDisconnectedError {
  return new KvDisconnectedError(
    name === undefined
      ? `no server holds slot ${slot}: the cluster has no members`
      : `slot ${slot} belongs to ${name}, which has no live registration (down since this client started, or never up)`,
  );
}
