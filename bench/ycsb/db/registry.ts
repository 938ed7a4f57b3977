/**
 * Bindings by name. Each entry loads its module lazily so that, for example, ioredis is only
 * imported by runs that use redis. Adding a store is one file plus one line here (the rdma-kv
 * binding will be `rdma-kv: () => import('./rdma-kv.js')` once the client library exists).
 * A name containing a path separator or ending in .js is imported as a module whose default
 * export is a DB class.
 */
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { UsageError } from '../../../protocol/operator-input.js';
import type { DB } from './db.js';

type BindingModule = { default: new () => DB };

const BINDINGS: { [name: string]: () => Promise<BindingModule> } = {
  basic: () => import('./basic.js'),
  redis: () => import('./redis.js'),
  memcached: () => import('./memcached.js'),
  'rdma-kv': () => import('./rdma-kv.js'),
};

/** YCSB class names that map onto the built-in bindings. */
const ALIASES: { [name: string]: string } = {
  'site.ycsb.BasicDB': 'basic',
  'site.ycsb.db.RedisClient': 'redis',
  'site.ycsb.db.MemcachedClient': 'memcached',
};

export function bindingNames(): string[] {
  return Object.keys(BINDINGS);
}

export function isModulePath(name: string): boolean {
  return name.includes('/') || name.endsWith('.js') || name.endsWith('.mjs');
}

/** Throws a UsageError for a name that is neither a binding nor a module path. */
export function checkBindingName(name: string): void {
  if (isModulePath(name)) return;
  if (!(name in BINDINGS) && !(name in ALIASES)) {
    throw new UsageError(`unknown db "${name}" (known: ${bindingNames().join(', ')}; or a path to a module exporting a DB class)`);
  }
}

export async function createBinding(name: string): Promise<DB> {
  checkBindingName(name);
  let mod: BindingModule;
  if (isModulePath(name)) {
    try {
      mod = (await import(pathToFileURL(resolve(name)).href)) as BindingModule;
    } catch (err) {
      throw new UsageError(`cannot load db module ${name}: ${(err as Error).message}`);
    }
    if (typeof mod.default !== 'function') throw new UsageError(`db module ${name} has no default export class`);
  } else {
    mod = await BINDINGS[ALIASES[name] ?? name]!();
  }
  return new mod.default();
}
