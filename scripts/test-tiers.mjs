#!/usr/bin/env node
// npm test: runs every test tier this machine can run and says which it
// skipped and why.
//   shm  the whole suite on the host, shm provider (always; the files in ALONE
//        first, by themselves). Suites whose
//        program is missing here (etcd, redis-server, ...) are skipped with one
//        line each, "skipped: WHY" (test/helpers/tools.ts); under CI=true they
//        fail instead.
//   rxe  the transport suite on the verbs provider over Soft-RoCE, in a QEMU
//        guest (deploy/softroce-vm/run-tier.sh; required under CI=true)
// scripts/setup-test-host.sh installs everything both tiers need.
// Ends with each tier's count and the lines ava marked failed (a CI log may
// show only its end), then one line "tests: N passed, N failed[, N skipped, ...]" over all tiers.
import { spawn } from 'node:child_process';

import { avaCounts, avaFailures, relayText } from './ava-summary.mjs';

// Test files that need the host to themselves, run first and alone: huge-pages.test.js needs a
// few hugetlb pages free, and every server another file starts on an anonymous region takes
// what is free (all or nothing, for its whole region).
const ALONE = ['dist/test/server/huge-pages.test.js'];

const tiers = [
  { name: 'shm (alone)', command: 'npx', args: ['ava', ...ALONE] },
  { name: 'shm', command: 'npx', args: ['ava', 'dist/test/**/*.test.js', ...ALONE.map((file) => `!${file}`)] },
  { name: 'rxe', command: 'bash', args: ['deploy/softroce-vm/run-tier.sh'] },
];
// `node scripts/test-tiers.mjs shm`: only the tiers of that name (npm run test:shm).
const only = process.argv[2];
if (only !== undefined && !tiers.some((tier) => tier.name.split(' ')[0] === only)) {
  console.error(`test-tiers: no tier '${only}' (the tiers: ${[...new Set(tiers.map((tier) => tier.name.split(' ')[0]))].join(', ')})`);
  process.exit(2);
}

function run(tier) {
  return new Promise((resolve) => {
    const child = spawn(tier.command, tier.args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RKV_QUIET: '1' } });
    const stdout = relayText(child.stdout, process.stdout);
    const stderr = relayText(child.stderr, process.stderr);
    child.on('close', (code) => resolve({ code: code ?? 1, output: `${stdout()}\n${stderr()}` }));
  });
}

const summary = [];
const total = { passed: 0, failed: 0, skipped: 0, todo: 0, knownFailures: 0 };
let failed = false;
for (const tier of tiers) {
  if (only !== undefined && tier.name.split(' ')[0] !== only) continue;
  console.log(`\n=== tier ${tier.name} ===`);
  const { code, output } = await run(tier);
  if (code === 77) {
    const reason = /skipped: (.*)/.exec(output)?.[1] ?? 'not available here';
    summary.push(`${tier.name}: skipped (${reason})`);
    continue;
  }
  const c = avaCounts(output);
  for (const key of Object.keys(total)) total[key] += c[key];
  if (code !== 0 || c.failed > 0) failed = true;
  if (code === 0 && c.passed === 0) {
    failed = true; // a tier that ran no test proves nothing
    summary.push(`${tier.name}: ran no test`);
    continue;
  }
  summary.push(`${tier.name}: ${code === 0 ? 'passed' : `FAILED (exit ${code})`}: ${c.passed} passed, ${c.failed} failed${c.skipped ? `, ${c.skipped} skipped` : ''}`);
  for (const reason of c.skipReasons) summary.push(`  skipped: ${reason}`);
  for (const failure of avaFailures(output)) summary.push(`  ✘ ${failure}`);
}

const extra = [
  total.skipped && `${total.skipped} skipped`,
  total.todo && `${total.todo} todo`,
  total.knownFailures && `${total.knownFailures} known ${total.knownFailures === 1 ? 'failure' : 'failures'}`,
].filter(Boolean);
console.log('\n=== summary ===');
for (const line of summary) console.log(line);
console.log(`tests: ${[`${total.passed} passed`, `${total.failed} failed`, ...extra].join(', ')}`);
process.exitCode = failed ? 1 : 0;
