#!/usr/bin/env node
// npm run bench:checksum: builds bench/checksum/checksum-bench.cc with g++ -O2
// (with the addon's CRC32C source, native/kv/crc32c.cc) into build/ and runs it.
// Needs only g++; the constants header is generated first, as the build does.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const run = (cmd, args) => {
  const { status, error } = spawnSync(cmd, args, { stdio: 'inherit', cwd: root });
  if (error || status !== 0) {
    console.error(`${cmd} ${args.join(' ')}: ${error ? error.message : `exit ${status}`}`);
    process.exit(1);
  }
};
run(process.execPath, ['scripts/gen-constants.mjs']);
mkdirSync(join(root, 'build'), { recursive: true });
const out = 'build/checksum-bench';
run(process.env.CXX ?? 'g++', ['-O2', '-std=c++17', '-Wall', '-Wextra', '-o', out, 'bench/checksum/checksum-bench.cc', 'native/kv/crc32c.cc']);
run(join(root, out), []);
