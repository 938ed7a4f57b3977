// Running kv-server: check the configuration, start the metrics HTTP server,
// the store and the etcd registration, print what it serves, and stop cleanly
// on SIGTERM or SIGINT; SIGHUP rereads --token-file (token-reload.ts).
// Bad configuration ends with one line on stderr,
// `kv-server: <reason>`: exit code 2 when the command line itself is wrong
// (cli-args.ts), 1 when this machine cannot do what it asks (socket in use,
// no RDMA device, port busy, unreadable token file).
import { hostname } from 'node:os';

import type { Logger } from 'pino';

import { StartupError, UsageError, formatBytes } from '../protocol/operator-input.js';
import { DEFAULT_NAMESPACE } from '../protocol/tokens.js';
import { oneLine, parseArgs } from './cli-args.js';
import { type RawServerArgs, type ServerConfig, resolveConfig, unroutable } from './config.js';
import { KvConfigError, KvServer, type KvServerStats } from './kv-server.js';
import { namespaceRegionFile } from './options.js';
import { type ServerLogging, createLogging } from './logging.js';
import { EtcdRegistration } from './membership.js';
import type { ReplicationController } from './replication/controller.js';
import { Copier } from './replication/copier.js';
import { SlotLoad } from './replication/slot-load.js';
import { beforeFirstGrant } from './replication/first-grant.js';
import { Quiesce } from './replication/quiesce.js';
import { EpochFollower } from './replication/epoch-follower.js';
import { SelfFence } from './replication/self-fence.js';
import { awaitFailoverOfPredecessor, checkReplicasBeforeJoining, startController } from './replication/join.js';
import { watchTokenFile } from './token-reload.js';
import { type MetricsServer, createRegistry, startMetricsServer } from './metrics.js';

/** A stuck close() must not keep a service manager waiting forever. */
const SHUTDOWN_TIMEOUT_MS = 10_000;

/** Runs kv-server; resolves to the process exit code once it has stopped (or failed to start). */
export async function main(argv: string[]): Promise<number> {
  process.stdout.on('error', () => {}); // a closed stdout (EPIPE) must not take the server down
  const parsed = await parseArgs(argv);
  if (!parsed.ok) return parsed.code;
  const config = checkConfig(parsed.args);
  if (typeof config === 'number') return config;

  const logging = createLogging(config.logLevel);
  const { logger } = logging;
  const startedAt = performance.now();
  const stop = watchSignals(logging);
  logStarting(logger, config);
  const running = await startServices(config, logger);
  if (running instanceof Error) {
    logging.stream.discard();
    const message = oneLine(running.message ?? String(running));
    process.stderr.write(`kv-server: ${running instanceof StartupError || running instanceof KvConfigError ? message : `cannot start: ${message}`}\n`);
    return 1;
  }
  logging.stream.release();
  const stopReloading = watchTokenFile(config.tokenFile?.path, running.server, logger);
  const startMs = performance.now() - startedAt;
  process.stdout.write(banner(config, running, startMs));
  logger.info({ urls: running.server.urls, regionBytes: running.server.layout.regionBytes, startMs: Math.round(startMs) }, 'ready');

  // The providers keep the event loop alive while they listen; a daemon must not rely on it.
  const alive = setInterval(() => {}, 1 << 30);
  const signal = await stop.requested;
  clearInterval(alive);
  stopReloading();
  await shutDown(running, logger, signal);
  process.stdout.write(`kv-server: stopped (${signal})\n`);
  return 0;
}

/** The configuration, or the exit code once its one-line error is printed. */
function checkConfig(args: RawServerArgs): ServerConfig | number {
  try {
    return resolveConfig(args);
  } catch (error) {
    if (error instanceof UsageError || error instanceof StartupError) {
      process.stderr.write(`kv-server: ${oneLine(error.message)}\n`);
      return error instanceof UsageError ? 2 : 1;
    }
    throw error;
  }
}

/**
 * Signals: the first SIGTERM or SIGINT asks for a clean stop (`requested` resolves with it), a
 * second exits at once. An uncaught exception is logged and exits 1.
 */
function watchSignals({ logger, stream }: ServerLogging): { requested: Promise<NodeJS.Signals> } {
  let stopSignal: NodeJS.Signals | undefined;
  let wake: ((signal: NodeJS.Signals) => void) | undefined;
  const requested = new Promise<NodeJS.Signals>((resolve) => (wake = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopSignal !== undefined) {
      process.stderr.write(`kv-server: ${signal} again: exiting at once\n`);
      process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
    }
    stopSignal = signal;
    wake!(signal);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.on('uncaughtException', (error) => {
    stream.release();
    logger.fatal({ err: error }, 'uncaught exception');
    process.stderr.write(`kv-server: internal error: ${oneLine(error.message)}\n`);
    process.exit(1);
  });
  return { requested };
}

function logStarting(logger: Logger, config: ServerConfig): void {
  logger.info(
    {
      listen: config.listen,
      memoryBytes: config.memoryBytes,
      ...(config.namespaces.length > 0 ? { namespaces: config.namespaces } : {}),
      maxValueBytes: config.maxValueBytes,
      maxClients: config.maxClients,
      graceMs: config.graceMs,
      keepaliveMs: config.keepaliveMs,
      auth: config.tokenFile ? 'token-file' : config.token === undefined ? 'none' : 'token',
      regionFile: config.regionFile,
      eviction: config.eviction,
      metricsPort: config.metricsPort,
    },
    'starting',
  );
}

interface Running {
  server: KvServer;
  metrics: MetricsServer | undefined;
  registration: EtcdRegistration | undefined;
  controller: ReplicationController | undefined;
  follower: EpochFollower | undefined;
  copier: Copier | undefined;
  load: SlotLoad | undefined;
  selfFence: SelfFence | undefined;
  drain: Quiesce | undefined;
}

/**
 * The metrics HTTP server (first: a busy port fails before the region is mapped), the store,
 * then the etcd registration (last: a client that sees us can use us). On a failure what has
 * started is stopped, and the error is returned.
 */
async function startServices(config: ServerConfig, logger: Logger): Promise<Running | Error> {
  let server: KvServer | undefined;
  let metrics: MetricsServer | undefined;
  let registration: EtcdRegistration | undefined;
  let controller: ReplicationController | undefined;
  let selfFence: SelfFence | undefined;
  let copier: Copier | undefined;
  let load: SlotLoad | undefined;
  let drain: Quiesce | undefined;
  // Every member of an etcd cluster follows the config's epochs, at --replicas 1 too: hash slots
  // move with their keys (rebalance, drain) by the copies repair makes (docs/cluster.md).
  const followsConfig = config.etcd !== undefined;
  try {
    if (config.metricsPort !== 0) {
      const registry = createRegistry(() => server && namespaceStats(server));
      try {
        metrics = await startMetricsServer({ host: config.metricsHost, port: config.metricsPort, registry, stats: (namespace) => server?.stats(namespace), namespaces: () => server?.namespaces ?? [] });
      } catch (error) {
        throw metricsFailure(config, error as NodeJS.ErrnoException);
      }
      logger.info({ url: `${metrics.url}/metrics` }, 'metrics listening');
    }
    if (config.tokenFile?.warning) logger.warn(config.tokenFile.warning);
    server = await KvServer.start({
      listen: config.listen,
      memoryBytes: config.memoryBytes,
      namespaces: config.namespaces,
      token: config.token,
      tokens: config.tokenFile?.entries,
      buckets: config.buckets,
      maxValueBytes: config.maxValueBytes,
      graceMs: config.graceMs,
      keepaliveMs: config.keepaliveMs,
      maxClients: config.maxClients,
      regionFile: config.regionFile,
      eviction: config.eviction,
      evictionHighPercent: config.evictionHigh,
      evictionLowPercent: config.evictionLow,
      expirySweepMs: config.expirySweepMs,
      replica: followsConfig,
      logger,
    });
    let follower: EpochFollower | undefined;
    if (followsConfig) {
      // Writes routed by the config check every replica's epoch word (protocol v7); a region without the table cannot take part.
      const old = server.namespaces.map((name) => ({ name, format: server!.namespace(name).layout.format })).find(({ format }) => format < 5);
      if (old) throw new StartupError(`--etcd: ${config.regionFile} (namespace '${old.name}') is of region format ${old.format}, which has no epoch table; a cluster member needs format 5 (hash slots move with their keys by copying, at every --replicas): serve it without --etcd, or copy its data into a new region`);
      // No write lands here until the config says which hash slots are ours (replication/epoch-follower.ts).
      for (const { table } of server.epochTables()) table!.fenceAll();
      // Nor is a block granted before this member's load record says it may hold keys (replication/first-grant.ts).
      // RKV_TEST_GRANTS_UNRECORDED (tests only): grants go at once, as before 2026-12-05.
      if (!process.env.RKV_TEST_GRANTS_UNRECORDED) {
        const prefix = config.etcd!.prefix;
        server.checkBeforeFirstGrant(() => beforeFirstGrant({ prefix, client: registration?.client, load, follower }));
      }
    }
    // With --replicas > 1 a replica cut off from etcd fences itself before its lease can lapse (its hash
    // slots then fail over), and its read leases end by then. With 1 nothing fails over: no fence.
    if (config.replicas > 1 && config.etcd) {
      const words = server;
      selfFence = new SelfFence({
        ttlMs: config.etcd.ttlSeconds * 1000,
        keepaliveMs: config.keepaliveMs,
        fence: () => {
          for (const { table } of words.epochTables()) table?.fenceAll();
        },
        lift: () => void follower?.poke(),
        logger,
      });
    }
    if (followsConfig) {
      // Only while the config applied since our lease was last granted names us (epoch-follower.ts),
      // and only to clients whose config is at least as new as the one applied here.
      // None at all while a drain or a rebalance quiesces this member (replication/quiesce.ts).
      // With --replicas 1 there is no failover, hence no self-fence: a lease lasts two keepalives.
      server.grantReadLeases(() => {
        const leaseMs = follower?.namedInConfig ? (selfFence ? selfFence.leaseMs() : 2 * config.keepaliveMs) : undefined;
        return { leaseMs: drain ? drain.lease(leaseMs) : leaseMs, configEpoch: follower?.appliedEpoch ?? 0 };
      });
    }
    if (config.etcd) {
      const { advertise, ...etcd } = config.etcd;
      const { replicas } = config;
      const url = advertise ?? server.urls[0]!;
      if (unroutable(url)) throw new StartupError(`--etcd: clients cannot dial ${url}; give --advertise`);
      registration = await EtcdRegistration.register({
        ...etcd, url, metricsUrl: metrics && dialableMetricsUrl(metrics.url, url), logger, replicas,
        ...(selfFence ? { onKeepalive: (sentAt: number) => selfFence!.acknowledged(sentAt), onLost: () => follower?.forgetConfig(), onClaimed: () => follower?.forgetConfig() } : {}),
        beforeClaim: async (client) => {
          await checkReplicasBeforeJoining(client, etcd.prefix, replicas);
          await awaitFailoverOfPredecessor(client, etcd.prefix, etcd.name, url, performance.now() + etcd.ttlSeconds * 1000 + 15_000, logger);
        },
      });
      controller = await startController(registration, { ...etcd, replicas }, logger);
      if (followsConfig) {
        const { tokenFile, token } = config;
        // Repair, drain and rebalance: what this member is primary of, it copies to the members syncing into it.
        copier = new Copier({
          name: etcd.name, prefix: etcd.prefix, client: registration.client, etcdHosts: etcd.hosts, namespaces: () => server!.regionStores(), logger, rateBytesPerSecond: etcd.repairRateBytes,
          leaseId: () => registration!.leaseId,
          tokenFor: (namespace) => (tokenFile ? tokenFile.entries.find((e) => e.role === 'write' && (e.namespace ?? DEFAULT_NAMESPACE) === namespace)?.token : token),
        });
        // kvctl rebalance --by bytes reads what each member holds per hash slot.
        const loadInterval = Number(process.env.RKV_TEST_LOAD_INTERVAL_MS) || undefined;
        load = SlotLoad.start({ name: etcd.name, prefix: etcd.prefix, client: registration.client, regions: () => server!.regionStores(), leaseId: () => registration!.leaseId, logger, intervalMs: loadInterval });
        drain = await Quiesce.start(registration.client, etcd.prefix, etcd.name, () => follower?.appliedEpoch ?? 0, logger);
        const copies = copier;
        follower = await EpochFollower.start({ client: registration.client, prefix: etcd.prefix, name: etcd.name, server, logger, selfFenced: () => selfFence?.fenced === true, onApplied: (applied) => copies.configApplied(applied), applyDelayMs: Number(process.env.RKV_TEST_APPLY_DELAY_MS) || 0 });
        const [following, controlling] = [follower, controller];
        server.watchReplication(() => ({ shortHashSlots: following.shortHashSlots, syncingHashSlots: following.syncingHashSlots, failovers: controlling.failovers, copyKeysLeft: copies.keysLeft, rebalanceHashSlotsLeft: controlling.rebalanceLeft }));
      }
    }
    return { server, metrics, registration, controller, follower, selfFence, copier, load, drain };
  } catch (error) {
    drain?.close();
    await copier?.close();
    await load?.close();
    selfFence?.close();
    await controller?.close();
    await registration?.close();
    await server?.close().catch(() => undefined);
    await metrics?.close();
    return error instanceof Error ? error : new Error(String(error));
  }
}

/** What kv-server prints once it serves: its URLs, the region, authentication, membership, metrics. */
function banner(config: ServerConfig, { server, metrics }: Running, startMs: number): string {
  const { layout } = server;
  const out: string[] = [];
  for (const url of server.urls) out.push(`kv-server: listening on ${url}`);
  out.push(
    `kv-server: region ${formatBytes(layout.regionBytes)} (${layout.regionBytes} bytes): ${layout.bucketCount} buckets, ` +
      `${server.stats().slots} slots, heap ${formatBytes(layout.heapBytes)}, values up to ${formatBytes(layout.maxValueBytes)}, ` +
      `${layout.maxClients} clients` +
      (config.regionFile ? `, kept in ${config.regionFile}` : ''),
  );
  for (const { name, memoryBytes } of config.namespaces) {
    const { layout: own, stats } = server.namespace(name);
    out.push(
      `kv-server: namespace ${name}: region ${formatBytes(memoryBytes)}: ${own.bucketCount} buckets, ${stats().slots} slots, heap ${formatBytes(own.heapBytes)}` +
        (config.regionFile ? `, kept in ${namespaceRegionFile(config.regionFile, name)}` : ''),
    );
  }
  out.push(authLine(config));
  if (config.etcd) {
    const { name, hosts, prefix, zone } = config.etcd;
    out.push(`kv-server: member '${name}' of the cluster at etcd ${hosts.join(',')} (prefix ${prefix}, --replicas ${config.replicas}${zone === undefined ? '' : `, zone ${zone}`})`);
  }
  if (metrics) out.push(`kv-server: metrics on ${metrics.url}/metrics, stats on ${metrics.url}/stats`);
  out.push(`kv-server: ready in ${Math.round(startMs)} ms`);
  return out.join('\n') + '\n';
}

/** Each namespace's stats, by name (the metrics' namespace label). */
function namespaceStats(server: KvServer): Map<string, KvServerStats> {
  return new Map(server.namespaces.map((name) => [name, server.stats(name)]));
}

function authLine({ token, tokenFile }: ServerConfig): string {
  if (tokenFile) {
    const read = tokenFile.entries.filter((e) => e.role === 'read').length;
    const write = tokenFile.entries.length - read;
    return `kv-server: clients must present a token of ${tokenFile.path} (${write} write, ${read} read; SIGHUP rereads it)`;
  }
  return token === undefined ? 'kv-server: no token: every client that reaches a URL is accepted' : 'kv-server: clients must present the token';
}

/** Leaves the cluster first (clients stop dialing us), then stops serving; exits 1 if that takes too long. */
async function shutDown({ server, metrics, registration, controller, follower, selfFence, copier, load, drain }: Running, logger: Logger, signal: NodeJS.Signals): Promise<void> {
  logger.info({ signal }, 'shutting down');
  const deadline = setTimeout(() => {
    logger.error({ timeoutMs: SHUTDOWN_TIMEOUT_MS }, 'shutdown timed out');
    process.stderr.write(`kv-server: shutdown took longer than ${SHUTDOWN_TIMEOUT_MS / 1000} s: exiting\n`);
    process.exit(1);
  }, SHUTDOWN_TIMEOUT_MS);
  deadline.unref();
  await follower?.close();
  await copier?.close();
  await load?.close();
  drain?.close();
  selfFence?.close();
  await controller?.close();
  await registration?.close();
  await server.close();
  await metrics?.close();
  clearTimeout(deadline);
  logger.info({ signal }, 'exiting');
}

function metricsFailure(config: ServerConfig, error: NodeJS.ErrnoException): StartupError {
  const where = `${config.metricsHost}:${config.metricsPort}`;
  switch (error.code) {
    case 'EADDRINUSE':
      return new StartupError(`cannot serve metrics on ${where}: the port is in use`);
    case 'EADDRNOTAVAIL':
      return new StartupError(`cannot serve metrics on ${where}: no such address on this machine`);
    case 'EACCES':
      return new StartupError(`cannot serve metrics on ${where}: permission denied`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new StartupError(`cannot serve metrics on ${where}: unknown host ${config.metricsHost}`);
    default:
      return new StartupError(`cannot serve metrics on ${where}: ${error.message}`);
  }
}

/** A metrics URL others can dial: a wildcard bind address becomes the host clients dial for RDMA (or this host's name). */
function dialableMetricsUrl(metricsUrl: string, advertised: string): string {
  const wildcard = /^http:\/\/(0\.0\.0\.0|\[::\]|::)(:\d+)$/.exec(metricsUrl);
  if (!wildcard) return metricsUrl;
  const host = /^rdma:\/\/(.+):\d+$/.exec(advertised)?.[1] ?? hostname();
  return `http://${host}${wildcard[2]}`;
}
