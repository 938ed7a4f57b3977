// kv-server's command line: parse and check the options, start the metrics
// HTTP server and the store, print what it serves, and stop cleanly on
// SIGTERM or SIGINT. Bad configuration ends with one line on stderr,
// `kv-server: <reason>`: exit code 2 when the command line itself is wrong,
// 1 when this machine cannot do what it asks (socket in use, no RDMA device,
// port busy, unreadable token file).
import { hostname } from 'node:os';

import yargs from 'yargs';

import { DEFAULTS, LOG_LEVELS, type RawServerArgs, type ServerConfig, resolveConfig, unroutable } from './config.js';
import { StartupError, UsageError, formatBytes, packageVersion } from '../protocol/operator-input.js';
import { KvConfigError, KvServer } from './kv-server.js';
import { EtcdRegistration } from './membership.js';
import { createLogging } from './logging.js';
import { type MetricsServer, createRegistry, startMetricsServer } from './metrics.js';

/** A stuck close() must not keep a service manager waiting forever. */
const SHUTDOWN_TIMEOUT_MS = 10_000;

const EPILOG = [
  'Sizes are bytes with an optional binary unit: K, M, G, T (KB, KiB, ... mean the same; 1K = 1024).',
  'Durations are milliseconds, or a number with ms, s, m or h (250ms, 2s).',
  'Exit codes: 0 stopped by SIGTERM/SIGINT, 1 could not start or failed, 2 bad command line.',
  '',
  'Examples:',
  '  kv-server --memory 4GiB --token-file /etc/rdma-kv/token --metrics-port 9464',
  '  kv-server --listen shm:///run/rdma-kv/kv.sock --listen rdma://0.0.0.0:7471 --memory 1GiB',
  '',
  'Operations guide: docs/operations.md',
].join('\n');

function parser(argv: string[]) {
  return yargs(argv)
    .scriptName('kv-server')
    .usage('$0 [options]\n\nThe rdma-kv server: registers one memory region holding the hash index and the item heap,\naccepts clients, and stays out of their GETs.')
    .parserConfiguration({ 'parse-numbers': false, 'parse-positional-numbers': false, 'dot-notation': false })
    .option('listen', {
      alias: 'l',
      type: 'string',
      array: true,
      requiresArg: true,
      default: [...DEFAULTS.listen],
      describe: 'URL to serve, repeatable: shm:///path/to.sock (this host) or rdma://host:port (RDMA device)',
    })
    .option('memory', {
      alias: 'm',
      requiresArg: true,
      default: DEFAULTS.memory,
      describe: 'region size, bytes with unit (rings, hash index and item heap)',
    })
    .option('token', {
      requiresArg: true,
      defaultDescription: 'none: every client is accepted',
      describe: 'token clients must present (shows in ps: prefer --token-file)',
    })
    .option('token-file', {
      requiresArg: true,
      defaultDescription: 'none',
      describe: 'file holding the token (whitespace around it is trimmed)',
    })
    .option('buckets', {
      requiresArg: true,
      defaultDescription: 'memory / 1 KiB, rounded down to a power of two',
      describe: 'hash index buckets of 7 slots (count, a power of two)',
    })
    .option('max-value', {
      requiresArg: true,
      default: DEFAULTS.maxValue,
      describe: 'largest value, bytes with unit',
    })
    .option('grace-ms', {
      requiresArg: true,
      default: DEFAULTS.graceMs,
      describe: 'milliseconds a freed heap block stays unused, so slow readers never see it reused',
    })
    .option('keepalive-ms', {
      requiresArg: true,
      default: DEFAULTS.keepaliveMs,
      describe: 'milliseconds between client pings; a client silent for 3 is fenced, its locks released',
    })
    .option('max-clients', {
      requiresArg: true,
      default: DEFAULTS.maxClients,
      describe: 'clients connected at once (count, 1 to 65536)',
    })
    .option('region-file', {
      requiresArg: true,
      defaultDescription: 'none: anonymous memory, gone at exit',
      describe: 'keep the region in this file; restarting on it serves the same data',
    })
    .option('metrics-port', {
      requiresArg: true,
      default: DEFAULTS.metricsPort,
      describe: 'TCP port for /metrics (Prometheus) and /stats (JSON); 0: off',
    })
    .option('metrics-host', {
      requiresArg: true,
      default: DEFAULTS.metricsHost,
      describe: 'address the metrics port binds (0.0.0.0: every interface)',
    })
    .option('etcd', {
      type: 'string',
      array: true,
      requiresArg: true,
      defaultDescription: 'none: a standalone server',
      describe: 'register in etcd for cluster membership: http://host:2379 (repeat, or comma-separate, for more endpoints); docs/cluster.md',
    })
    .option('etcd-prefix', {
      requiresArg: true,
      defaultDescription: DEFAULTS.etcdPrefix,
      describe: 'with --etcd: the cluster\'s key prefix (one cluster per prefix)',
    })
    .option('name', {
      requiresArg: true,
      defaultDescription: '<hostname>-<port or socket name>',
      describe: 'with --etcd: this member\'s name, stable across restarts (it owns slots)',
    })
    .option('advertise', {
      requiresArg: true,
      defaultDescription: 'the first --listen URL',
      describe: 'with --etcd: the URL clients dial (needed when listening on 0.0.0.0)',
    })
    .option('etcd-ttl', {
      requiresArg: true,
      defaultDescription: DEFAULTS.etcdTtl,
      describe: 'with --etcd: lease time; a crashed server shows as down after this',
    })
    .option('log-level', {
      requiresArg: true,
      choices: LOG_LEVELS,
      default: DEFAULTS.logLevel,
      describe: 'JSON logs on stderr, one line per lifecycle event',
    })
    .strict()
    .epilog(EPILOG)
    .wrap(Math.max(100, Math.min(120, process.stdout.columns ?? 120)))
    .help()
    .alias('help', 'h')
    .version(packageVersion())
    .exitProcess(false);
}

const SCALAR_OPTIONS = [
  'memory', 'token', 'token-file', 'buckets', 'max-value', 'grace-ms', 'keepalive-ms', 'max-clients',
  'region-file', 'metrics-port', 'metrics-host', 'log-level', 'etcd-prefix', 'name', 'advertise', 'etcd-ttl',
] as const;

/** One line, whatever the message holds. */
function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

type Parsed = { ok: true; args: RawServerArgs } | { ok: false; code: number };

async function parseArgs(argv: string[]): Promise<Parsed> {
  let failure: string | undefined;
  let args: Record<string, unknown> = {};
  try {
    args = (await parser(argv)
      .fail((message, error) => {
        failure = message ?? error?.message ?? 'invalid arguments';
      })
      .parseAsync()) as Record<string, unknown>;
  } catch (error) {
    failure ??= (error as Error).message;
  }
  if (failure !== undefined) {
    process.stderr.write(`kv-server: ${oneLine(failure)} (see kv-server --help)\n`);
    return { ok: false, code: 2 };
  }
  if (args.help === true || args.version === true) return { ok: false, code: 0 };
  for (const name of SCALAR_OPTIONS) {
    if (Array.isArray(args[name])) {
      process.stderr.write(`kv-server: --${name} is given more than once (see kv-server --help)\n`);
      return { ok: false, code: 2 };
    }
    if (args[name] !== undefined) args[name] = String(args[name]);
  }
  return {
    ok: true,
    args: {
      listen: args.listen as string[],
      memory: args.memory as string,
      token: args.token as string | undefined,
      tokenFile: args['token-file'] as string | undefined,
      buckets: args.buckets as string | undefined,
      maxValue: args['max-value'] as string,
      graceMs: args['grace-ms'] as string,
      keepaliveMs: args['keepalive-ms'] as string,
      maxClients: args['max-clients'] as string,
      metricsPort: args['metrics-port'] as string,
      metricsHost: args['metrics-host'] as string,
      logLevel: args['log-level'] as RawServerArgs['logLevel'],
      regionFile: args['region-file'] as string | undefined,
      etcd: args.etcd as string[] | undefined,
      etcdPrefix: args['etcd-prefix'] as string | undefined,
      etcdTtl: args['etcd-ttl'] as string | undefined,
      name: args.name as string | undefined,
      advertise: args.advertise as string | undefined,
    },
  };
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

/** Runs kv-server; resolves to the process exit code once it has stopped (or failed to start). */
export async function main(argv: string[]): Promise<number> {
  process.stdout.on('error', () => {}); // a closed stdout (EPIPE) must not take the server down
  const parsed = await parseArgs(argv);
  if (!parsed.ok) return parsed.code;

  let config: ServerConfig;
  try {
    config = resolveConfig(parsed.args);
  } catch (error) {
    if (error instanceof UsageError || error instanceof StartupError) {
      process.stderr.write(`kv-server: ${oneLine(error.message)}\n`);
      return error instanceof UsageError ? 2 : 1;
    }
    throw error;
  }

  const { logger, stream } = createLogging(config.logLevel);
  const startedAt = performance.now();

  // Signals: the first stops the server cleanly, a second exits at once.
  let stopSignal: NodeJS.Signals | undefined;
  let wake: (() => void) | undefined;
  const stopRequested = new Promise<void>((resolve) => (wake = resolve));
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopSignal !== undefined) {
      process.stderr.write(`kv-server: ${signal} again: exiting at once\n`);
      process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
    }
    stopSignal = signal;
    wake!();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.on('uncaughtException', (error) => {
    stream.release();
    logger.fatal({ err: error }, 'uncaught exception');
    process.stderr.write(`kv-server: internal error: ${oneLine(error.message)}\n`);
    process.exit(1);
  });

  logger.info(
    {
      listen: config.listen,
      memoryBytes: config.memoryBytes,
      maxValueBytes: config.maxValueBytes,
      maxClients: config.maxClients,
      graceMs: config.graceMs,
      keepaliveMs: config.keepaliveMs,
      auth: config.token === undefined ? 'none' : 'token',
      regionFile: config.regionFile,
      metricsPort: config.metricsPort,
    },
    'starting',
  );

  let server: KvServer | undefined;
  let metrics: MetricsServer | undefined;
  let registration: EtcdRegistration | undefined;
  try {
    if (config.metricsPort !== 0) {
      const registry = createRegistry(() => server?.stats());
      try {
        metrics = await startMetricsServer({ host: config.metricsHost, port: config.metricsPort, registry, stats: () => server?.stats() });
      } catch (error) {
        throw metricsFailure(config, error as NodeJS.ErrnoException);
      }
      logger.info({ url: `${metrics.url}/metrics` }, 'metrics listening');
    }
    server = await KvServer.start({
      listen: config.listen,
      memoryBytes: config.memoryBytes,
      token: config.token,
      buckets: config.buckets,
      maxValueBytes: config.maxValueBytes,
      graceMs: config.graceMs,
      keepaliveMs: config.keepaliveMs,
      maxClients: config.maxClients,
      regionFile: config.regionFile,
      logger,
    });
    if (config.etcd) {
      const { advertise, ...etcd } = config.etcd;
      const url = advertise ?? server.urls[0]!;
      if (unroutable(url)) throw new StartupError(`--etcd: clients cannot dial ${url}; give --advertise`);
      // Registered only once serving: a client that sees us can use us.
      registration = await EtcdRegistration.register({ ...etcd, url, metricsUrl: metrics && dialableMetricsUrl(metrics.url, url), logger });
    }
  } catch (error) {
    stream.discard();
    await server?.close().catch(() => undefined);
    await metrics?.close();
    const message = oneLine((error as Error).message ?? String(error));
    process.stderr.write(`kv-server: ${error instanceof StartupError || error instanceof KvConfigError ? message : `cannot start: ${message}`}\n`);
    return 1;
  }
  stream.release();

  const startMs = performance.now() - startedAt;
  const { layout } = server;
  const out: string[] = [];
  for (const url of server.urls) out.push(`kv-server: listening on ${url}`);
  out.push(
    `kv-server: region ${formatBytes(layout.regionBytes)} (${layout.regionBytes} bytes): ${layout.bucketCount} buckets, ` +
      `${server.stats().slots} slots, heap ${formatBytes(layout.heapBytes)}, values up to ${formatBytes(layout.maxValueBytes)}, ` +
      `${layout.maxClients} clients` +
      (config.regionFile ? `, kept in ${config.regionFile}` : ''),
  );
  out.push(config.token === undefined ? 'kv-server: no token: every client that reaches a URL is accepted' : 'kv-server: clients must present the token');
  if (config.etcd) out.push(`kv-server: member '${config.etcd.name}' of the cluster at etcd ${config.etcd.hosts.join(',')} (prefix ${config.etcd.prefix})`);
  if (metrics) out.push(`kv-server: metrics on ${metrics.url}/metrics, stats on ${metrics.url}/stats`);
  out.push(`kv-server: ready in ${Math.round(startMs)} ms`);
  process.stdout.write(out.join('\n') + '\n');
  logger.info({ urls: server.urls, regionBytes: layout.regionBytes, startMs: Math.round(startMs) }, 'ready');

  // The providers keep the event loop alive while they listen; a daemon must not rely on it.
  const alive = setInterval(() => {}, 1 << 30);
  await stopRequested;
  clearInterval(alive);
  logger.info({ signal: stopSignal }, 'shutting down');
  const deadline = setTimeout(() => {
    logger.error({ timeoutMs: SHUTDOWN_TIMEOUT_MS }, 'shutdown timed out');
    process.stderr.write(`kv-server: shutdown took longer than ${SHUTDOWN_TIMEOUT_MS / 1000} s: exiting\n`);
    process.exit(1);
  }, SHUTDOWN_TIMEOUT_MS);
  deadline.unref();
  await registration?.close(); // first: clients stop dialing us before we go
  await server.close();
  await metrics?.close();
  clearTimeout(deadline);
  logger.info({ signal: stopSignal }, 'exiting');
  process.stdout.write(`kv-server: stopped (${stopSignal})\n`);
  return 0;
}
