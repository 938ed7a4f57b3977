// The programs some suites need besides Node (etcd, redis-server, memcached,
// shellcheck, systemd's tools), and the one decision about a missing one:
// outside CI its tests are skipped, with one line per program and test file
// on stderr, "skipped: etcd not found (install etcd-server, or run
// scripts/setup-test-host.sh)", which npm test's summary repeats; under
// CI=true nothing may be skipped, so each of its tests fails with that line.
// scripts/setup-test-host.sh installs them all. Test files only name what they
// need: `const test = needing(ava, 'etcd')`, or per test.
import type { ExecutionContext, TestFn } from 'ava';

import { findBinary } from '../../bench/ycsb/compare/servers.js';

/** Each program a suite may need, with the Debian package that has it. */
const PACKAGES = {
  etcd: 'etcd-server',
  'redis-server': 'redis-server',
  memcached: 'memcached',
  shellcheck: 'shellcheck',
  'systemd-analyze': 'systemd',
  'systemd-sysusers': 'systemd',
} as const;
export type Tool = keyof typeof PACKAGES;

/** The line that names a missing program and how to get it. */
export function missingToolLine(tool: Tool): string {
  return `${tool} not found (install ${PACKAGES[tool]}, or run scripts/setup-test-host.sh)`;
}

/** The program's path, found as kv-bench finds its peers (PATH, then the sbin and bin directories); throws the missing line. */
export function toolPath(tool: Tool): string {
  const path = findBinary(tool);
  if (path === undefined) throw new Error(missingToolLine(tool));
  return path;
}

const HOOKS = new Set(['before', 'after', 'beforeEach', 'afterEach']);
const announced = new Set<Tool>();

/**
 * `test` itself when every tool is installed. Otherwise the same chain
 * (test, test.serial, test.before, ...), whose tests are skipped, or under
 * CI=true fail with the missing line, and whose hooks are dropped, so they never
 * start a missing program (ava runs a file's hooks when any of its tests runs).
 */
export function needing<Context>(test: TestFn<Context>, ...tools: Tool[]): TestFn<Context> {
  const missing = tools.filter((tool) => findBinary(tool) === undefined);
  if (missing.length === 0) return test;
  const reason = missing.map(missingToolLine).join('; ');
  const ci = process.env['CI'] === 'true';
  if (!ci) {
    for (const tool of missing.filter((tool) => !announced.has(tool))) {
      announced.add(tool);
      console.error(`skipped: ${missingToolLine(tool)}`);
    }
  }
  // Declares through the real chain what it would have declared, as a skip or a failure.
  const declare = (args: unknown[]) => {
    if (!ci) return (test.skip as (...a: unknown[]) => void)(...args);
    test(args[0] as string, (t: ExecutionContext<Context>) => t.fail(reason));
  };
  const chain = (node: object, path: string[]): object =>
    new Proxy(node, {
      get(target, key) {
        const value: unknown = Reflect.get(target, key);
        const fixed = Reflect.getOwnPropertyDescriptor(target, key)?.configurable === false; // test.default: a Proxy must return it as is
        return typeof value === 'function' && key !== 'macro' && !fixed ? chain(value, [...path, String(key)]) : value;
      },
      apply(target, thisArg, args: unknown[]) {
        // Its hooks serve only its tests, which are skipped or fail: never declared (ava would run a
        // hook in a file whose other tests, plain ones, still run, and the hook would start the missing program).
        if (path.some((step) => HOOKS.has(step))) return undefined;
        if (path.includes('todo') || path.includes('skip')) return Reflect.apply(target as () => void, thisArg, args);
        return declare(args);
      },
    });
  return chain(test, []) as TestFn<Context>;
}
