#!/usr/bin/env node
// npm test: runs every test tier this machine can run and says which it
// skipped and why.
//   shm  the whole suite on the host, shm provider (always)
//   rxe  the transport suite on the verbs provider over Soft-RoCE, in a QEMU
//        guest (deploy/softroce-vm/run-tier.sh; required under CI=true)
// Ends with one line "tests: N passed, N failed[, N skipped]" over all tiers.
import { spawn } from 'node:child_process';

const tiers = [
  { name: 'shm', command: 'npx', args: ['ava', 'dist/test/**/*.test.js'] },
  { name: 'rxe', command: 'bash', args: ['deploy/softroce-vm/run-tier.sh'] },
];

// ava's closing lines: "34 tests passed", "1 test failed", "2 tests skipped", ...
function count(output) {
  const grab = (re) => [...output.matchAll(re)].reduce((sum, m) => sum + Number(m[1]), 0);
  return {
    passed: grab(/^\s*(\d+) tests? passed/gm),
    failed: grab(/^\s*(\d+) tests? failed/gm) + grab(/^\s*(\d+) uncaught exceptions?/gm) + grab(/^\s*(\d+) tests? remained pending/gm),
    skipped: grab(/^\s*(\d+) tests? skipped/gm),
  };
}

function run(tier) {
  return new Promise((resolve) => {
    let output = '';
    const child = spawn(tier.command, tier.args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RKV_QUIET: '1' } });
    const relay = (stream, sink) =>
      stream.on('data', (chunk) => {
        output += chunk;
        sink.write(chunk);
      });
    relay(child.stdout, process.stdout);
    relay(child.stderr, process.stderr);
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

const summary = [];
const total = { passed: 0, failed: 0, skipped: 0 };
let failed = false;
for (const tier of tiers) {
  console.log(`\n=== tier ${tier.name} ===`);
  const { code, output } = await run(tier);
  if (code === 77) {
    const reason = /skipped: (.*)/.exec(output)?.[1] ?? 'not available here';
    summary.push(`${tier.name}: skipped (${reason})`);
    continue;
  }
  const c = count(output);
  total.passed += c.passed;
  total.failed += c.failed;
  total.skipped += c.skipped;
  if (code !== 0 || c.failed > 0) failed = true;
  if (code === 0 && c.passed === 0) {
    failed = true; // a tier that ran no test proves nothing
    summary.push(`${tier.name}: ran no test`);
    continue;
  }
  summary.push(`${tier.name}: ${code === 0 ? 'passed' : `FAILED (exit ${code})`}: ${c.passed} passed, ${c.failed} failed`);
}

console.log('\n=== summary ===');
for (const line of summary) console.log(line);
console.log(`tests: ${total.passed} passed, ${total.failed} failed${total.skipped ? `, ${total.skipped} skipped` : ''}`);
process.exitCode = failed ? 1 : 0;
