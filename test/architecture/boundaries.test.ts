// The shape of the tree, as docs/architecture.md draws it: who may import whom,
// and no source file grown into a god file. Reads the TypeScript sources.
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import test from 'ava';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
/** Most lines a hand-written TypeScript source file may have (tests and generated code aside). */
const MAX_LINES = 450;

/** Top-level folders each layer may import from (besides itself and node_modules). */
const MAY_IMPORT: Record<string, string[]> = {
  native: [],
  protocol: ['native'],
  client: ['protocol', 'native'],
  server: ['protocol', 'native', 'client'], // client: repair's copier is a client of its cluster (server/replication/copier.ts)
  tools: ['protocol', 'client', 'native'],
  bench: ['protocol', 'client', 'server', 'tools', 'native'],
};

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sources(path));
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** The top-level folders a file's relative imports reach. */
function importedLayers(file: string): Array<{ layer: string; spec: string }> {
  const text = readFileSync(join(root, file), 'utf8');
  const found: Array<{ layer: string; spec: string }> = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+'(\.[^']+)'/g)) {
    const target = relative(root, resolve(root, dirname(file), m[1]!));
    found.push({ layer: target.split('/')[0]!, spec: m[1]! });
  }
  return found;
}

for (const [layer, allowed] of Object.entries(MAY_IMPORT)) {
  test(`${layer}/ imports only from ${allowed.length ? allowed.join(', ') : 'itself'}`, (t) => {
    const wrong: string[] = [];
    for (const file of sources(layer)) {
      for (const { layer: target, spec } of importedLayers(file)) {
        if (target !== layer && !allowed.includes(target)) wrong.push(`${file} imports ${spec}`);
      }
    }
    t.deepEqual(wrong, []);
  });
}

test(`no hand-written TypeScript source file is over ${MAX_LINES} lines`, (t) => {
  const long: string[] = [];
  for (const layer of Object.keys(MAY_IMPORT)) {
    for (const file of sources(layer)) {
      if (file.includes('.generated.')) continue;
      const lines = readFileSync(join(root, file), 'utf8').split('\n').length - 1;
      if (lines > MAX_LINES) long.push(`${file}: ${lines} lines`);
    }
  }
  t.deepEqual(long, []);
});
