// watch: each member's state, items, clients, load and notifications/s, every
// --interval until --count refreshes or Ctrl-C. The client reconnects in the
// background, so states are live; membership changes are printed as the
// client reports them.
import { setTimeout as sleep } from 'node:timers/promises';

import type { Etcd3 } from 'etcd3';

import { KvClient } from '../../../client/index.js';
import { openEtcd } from '../../../protocol/registry.js';
import type { CtlArgs, EtcdTarget } from '../args.js';
import { clientOptions, warnOnErrors } from '../connect.js';
import { etcdMetrics, readCluster } from '../etcd.js';
import { type MemberState, clock, layoutEntries, memberState, oneLine } from '../format.js';
import type { Io } from '../io.js';
import { readStats, staticMetrics } from '../stats-http.js';

/** A member's numbers in one refresh of watch. */
interface MemberStats {
  items: number;
  clients: number;
  loadFactor: number;
  /** PUT and DELETE completions drained per second since the previous refresh; null when there is none to compare with. */
  notificationsPerSecond: number | null;
}

type Sample = { stats: MemberStats; error?: undefined } | { stats?: undefined; error: string };

/** Reads each member's /stats and turns its notification count into a rate since the previous read. */
class StatsSampler {
  private metricsOf: Map<string, string | undefined>;
  private readonly previous = new Map<string, { at: number; notifications: number }>();

  constructor(
    private readonly args: CtlArgs,
    private readonly io: Io,
    private readonly etcd?: { client: Etcd3; target: EtcdTarget },
  ) {
    this.metricsOf = etcd ? new Map() : staticMetrics(args);
  }

  /** The member's metrics address, as of the last sample. */
  metrics(name: string): string | undefined {
    return this.metricsOf.get(name);
  }

  async sample(names: string[]): Promise<Map<string, Sample>> {
    if (this.etcd) {
      // Read again each time: a member that restarts may serve metrics elsewhere.
      try {
        this.metricsOf = etcdMetrics(await readCluster(this.etcd.client, this.etcd.target));
      } catch (error) {
        this.io.stderr(`kvctl: warning: ${oneLine((error as Error).message)} (metrics addresses as last read)\n`);
      }
    }
    const samples = await Promise.all(
      names.map(async (name): Promise<Sample> => {
        const metrics = this.metricsOf.get(name);
        if (metrics === undefined) return { error: 'no stats' };
        try {
          return { stats: await this.read(metrics) };
        } catch (error) {
          return { error: oneLine((error as Error).message) };
        }
      }),
    );
    return new Map(names.map((name, i) => [name, samples[i]!]));
  }

  private async read(metrics: string): Promise<MemberStats> {
    const raw = await readStats(metrics, this.args.timeoutMs, this.args.namespace);
    const at = performance.now();
    const notifications = Number(raw.notifications);
    const before = this.previous.get(metrics);
    this.previous.set(metrics, { at, notifications });
    // A smaller count means the server restarted: no rate until the next refresh.
    const rate = before && notifications >= before.notifications && at > before.at ? ((notifications - before.notifications) * 1000) / (at - before.at) : null;
    const items = Number(raw.items);
    const slots = Number(raw.slots);
    return { items, clients: Number(raw.clients), loadFactor: slots > 0 ? items / slots : 0, notificationsPerSecond: rate };
  }
}

function watchLine(name: string, state: MemberState, sample: Sample | undefined): string {
  const s = sample?.stats;
  if (!s) return `${name}  ${state.padEnd(12)}  ${sample?.error ?? 'no stats'}`;
  const rate = s.notificationsPerSecond === null ? '-' : s.notificationsPerSecond.toFixed(1);
  return `${name}  ${state.padEnd(12)}  items ${s.items}  clients ${s.clients}  load ${(s.loadFactor * 100).toFixed(2)}%  notifications ${rate}/s`;
}

/** Ctrl-C (SIGINT) and SIGTERM end watch with exit code 0. */
export async function watch(args: CtlArgs, io: Io): Promise<void> {
  const { target } = args;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const etcd = target.kind === 'etcd' ? { client: openEtcd(target.hosts, args.timeoutMs), target } : undefined;
  const emit = (json: Record<string, unknown>, text: string) =>
    io.stdout(args.json ? JSON.stringify({ time: new Date().toISOString(), ...json }) + '\n' : `${clock()}  ${text}\n`);
  let kv: KvClient | undefined;
  try {
    kv = await KvClient.connect(clientOptions(args, io, { reconnect: true, requireReady: false })); // watch a cluster come up, too
    warnOnErrors(kv, io);
    kv.on('member', (name, status) => emit({ type: 'member', name, state: memberState(status) }, `member ${name}: ${memberState(status)}`));
    kv.on('layout', (members) => {
      const entries = layoutEntries(members);
      const text = entries.map((m) => `${m.name} (${m.slots} slots, ${m.percent.toFixed(1)}%)`).join(', ');
      emit({ type: 'layout', members: entries }, `layout: ${entries.length} member${entries.length === 1 ? '' : 's'}: ${text || 'none'}`);
    });

    const sampler = new StatsSampler(args, io, etcd);
    // A first sample gives every printed refresh a rate to show.
    await sampler.sample(kv.layout().map((m) => m.name));
    for (let n = 1; args.count === undefined || n <= args.count; n++) {
      await sleep(args.intervalMs, undefined, { signal: stop.signal }).catch(() => undefined);
      if (stop.signal.aborted) break;
      const entries = layoutEntries(kv.layout());
      const samples = await sampler.sample(entries.map((m) => m.name));
      if (args.json) {
        const members = entries.map((m) => ({ ...m, ...(sampler.metrics(m.name) ? { metrics: sampler.metrics(m.name) } : {}), ...samples.get(m.name) }));
        emit({ type: 'refresh', refresh: n, members }, '');
        continue;
      }
      const width = Math.max(...entries.map((m) => m.name.length));
      for (const m of entries) emit({}, watchLine(m.name.padEnd(width), m.state, samples.get(m.name)));
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    // Closing makes every member 'closed': that is kvctl leaving, not news.
    kv?.removeAllListeners('member').removeAllListeners('layout');
    await kv?.close();
    etcd?.client.close();
  }
}
