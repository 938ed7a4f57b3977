#!/usr/bin/env node
// kvctl launcher: the CLI is compiled TypeScript in dist/ (npm run build:ts).
let cli;
try {
  cli = await import('../dist/tools/kvctl/main.js');
} catch (err) {
  if (err && err.code === 'ERR_MODULE_NOT_FOUND' && String(err.message).includes('dist/tools/kvctl/main.js')) {
    process.stderr.write('kvctl: dist/tools/kvctl/main.js is missing; build it first with: npm run build\n');
    process.exit(2);
  }
  throw err;
}
const code = await cli.main(process.argv.slice(2));
// process.exit drops what a pipe has not taken yet (stdout to a pipe is asynchronous in Node):
// exit once everything written before this empty write is flushed.
process.stdout.once('error', () => process.exit(code));
process.stdout.write('', () => process.exit(code));
