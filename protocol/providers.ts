// The transport providers, as URL schemes. The list itself is the addon's
// (native/transport/provider.cc): adding a provider adds it there, and its
// listen-URL syntax here (LISTEN_SYNTAX).
import { isAbsolute } from 'node:path';

import { type ProviderInfo, knownProviders } from '../native/index.js';

import { UsageError } from './operator-input.js';

export type { ProviderInfo };
export { knownProviders };

/** The scheme of a URL ("shm" for shm:///x), or undefined when it names no known provider. */
export function schemeOf(url: string): string | undefined {
  const at = url.indexOf('://');
  const scheme = at > 0 ? url.slice(0, at).toLowerCase() : '';
  return knownProviders.some((p) => p.scheme === scheme) ? scheme : undefined;
}

/** "shm:///path/to.sock or rdma://host:port": what a URL may look like, for messages. */
export function urlExamples(): string {
  return knownProviders.map((p) => p.example).join(' or ');
}

/** Per scheme: what follows "scheme://" in a URL a client dials (LISTEN_SYNTAX below checks listen URLs fully). */
const DIAL_SHAPE: Record<string, RegExp> = {
  shm: /^\/./, // an absolute socket path
  rdma: /^[^/]+/, // host:port
};

/** A URL a client can dial: a known scheme, and after it what that scheme expects. */
export function isServerUrl(url: string): boolean {
  const scheme = schemeOf(url);
  const shape = scheme === undefined ? undefined : DIAL_SHAPE[scheme];
  return shape !== undefined && shape.test(url.slice(scheme!.length + 3));
}

/** Unix socket paths are limited by sockaddr_un.sun_path (108 bytes with the NUL). */
const MAX_SOCKET_PATH = 107;

/** Per scheme: checks the rest of a listen URL (after "scheme://") and returns the URL normalized. */
const LISTEN_SYNTAX: Record<string, (url: string, rest: string) => string> = {
  shm(url, path) {
    if (!isAbsolute(path)) throw new UsageError(`--listen ${url}: an shm URL names an absolute socket path, e.g. shm:///run/rdma-kv/kv.sock`);
    if (Buffer.byteLength(path) > MAX_SOCKET_PATH) {
      throw new UsageError(`--listen ${url}: the socket path is ${Buffer.byteLength(path)} bytes; Unix sockets allow at most ${MAX_SOCKET_PATH}`);
    }
    if (path.endsWith('/')) throw new UsageError(`--listen ${url}: the socket path names a directory`);
    return `shm://${path}`;
  },
  rdma(url, rest) {
    const match = /^([^/?#@\s]+?)(?::(\d*))?\/?$/.exec(rest);
    const host = match?.[1];
    if (!match || !host || (!host.startsWith('[') && host.includes(':')) || (host.startsWith('[') && !host.endsWith(']'))) {
      throw new UsageError(`--listen ${url}: expected rdma://host:port, e.g. rdma://0.0.0.0:7471`);
    }
    if (!match[2]) throw new UsageError(`--listen ${url}: name a port, e.g. rdma://${host}:7471`);
    const port = Number(match[2]);
    if (port > 65535) throw new UsageError(`--listen ${url}: port ${port} is out of range (0 to 65535)`);
    return `rdma://${host}:${port}`;
  },
};

/**
 * Checks a listen URL and returns it normalized. Only the syntax is checked
 * here; whether this machine can serve it (an RDMA device, a free socket path)
 * is KvServer.start's business.
 */
export function checkListenUrl(url: string): string {
  const scheme = schemeOf(url);
  const check = scheme === undefined ? undefined : LISTEN_SYNTAX[scheme];
  if (scheme === undefined || check === undefined) throw new UsageError(`--listen ${url}: no provider for this URL; use ${urlExamples()}`);
  return check(url, url.slice(url.indexOf('://') + 3));
}
