#!/usr/bin/env node
// kv-bench launcher: the CLI is compiled TypeScript in dist/ (npm run build:ts).
let cli;
try {
  cli = await import('../dist/bench/ycsb/cli.js');
} catch (err) {
  if (err && err.code === 'ERR_MODULE_NOT_FOUND') {
    process.stderr.write('kv-bench: dist/bench/ycsb/cli.js is missing; build it first with: npm run build:ts\n');
    process.exit(2);
  }
  throw err;
}
process.exitCode = await cli.main(process.argv.slice(2));
