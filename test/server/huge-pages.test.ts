// Huge pages for the region when the host has them (native/transport/memory.cc):
// what a memory got, why not when it did not, and the server saying so on its listening line.
import { Writable } from 'node:stream';

import test from 'ava';
import { pino } from 'pino';

import { readFileSync } from 'node:fs';

import { Memory, Opcode, SendFlag, access } from '../../native/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { connectPair } from '../helpers/pair.js';
import { providersUnderTest } from '../helpers/providers.js';

/**
 * Hugetlb pages of the default size free for a new mapping (free, less those a mapping already
 * reserved), and that size in bytes (0, 0 without any). npm test runs this file alone
 * (scripts/test-tiers.mjs): a server another file starts takes what is free.
 */
function hugetlb(): { free: number; bytes: number } {
  const meminfo = readFileSync('/proc/meminfo', 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(meminfo)?.[1] ?? 0);
  return { free: field('HugePages_Free') - field('HugePages_Rsvd'), bytes: field('Hugepagesize') * 1024 };
}

test('a memory asked for huge pages says what it got, and why not when it is on 4 KiB pages', (t) => {
  const memory = new Memory(8 << 20, undefined, { hugePages: true });
  const { kind, note } = memory.pages;
  t.true(['hugetlb', 'thp', '4k'].includes(kind));
  if (kind === '4k') {
    t.regex(note, /hugetlb pages/);
    t.regex(note, /transparent huge pages|madvise/);
  }
  if (kind === 'hugetlb') t.is(note, '');
  t.log(`this host: ${kind}${note ? ` (${note})` : ''}`);
  // Every byte is usable either way.
  memory.bytes[0] = 1;
  memory.bytes[memory.bytes.length - 1] = 2;
  t.is(memory.bytes[0]! + memory.bytes[memory.bytes.length - 1]!, 3);
  // Without the option nothing is asked for and nothing is said.
  t.deepEqual(new Memory(1 << 20).pages, { kind: '4k', note: '' });
});

for (const scheme of providersUnderTest()) {
  test(`${scheme}: the server's listening line says which pages its region is on, and it serves either way`, async (t) => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    const server = await startServer(scheme, { logger: pino({ level: 'info' }, sink) });
    t.teardown(() => server.close());
    const client = await connect(server);
    t.teardown(() => client.close());
    await client.put('paged', 'value');
    t.is((await client.get('paged'))?.toString(), 'value');
    // On its listening line (one URL: one line), with the region's size.
    const said = lines.filter((l) => l.pages !== undefined);
    t.is(said.length, 1);
    t.is(said[0]!.msg, 'listening');
    t.true(['hugetlb', 'thp', '4k'].includes(String(said[0]!.pages)));
    if (said[0]!.pages === '4k') t.truthy(said[0]!.pagesWhy, 'the 4 KiB fallback says why');
  });
}

for (const scheme of providersUnderTest()) {
  test(`${scheme}: a region on hugetlb pages whose length is no multiple of them, registered in parts at offsets that are not either, is read and written through every part`, async (t) => {
    const { free, bytes: huge } = hugetlb();
    if (huge === 0 || free < 3) {
      t.log(`skipped: ${free} hugetlb pages free (vm.nr_hugepages; scripts/setup-test-host.sh reserves some)`);
      return t.pass();
    }
    const length = 2 * huge + 12_288; // three huge pages mapped, the tail of the last unused
    const memory = new Memory(length, undefined, { hugePages: true });
    t.is(memory.pages.kind, 'hugetlb', memory.pages.note);
    t.is(memory.length, length);
    // A part that starts 4 KiB into the first huge page and ends in the third.
    const offset = 4096;
    const part = length - offset - 4096;
    const p = await connectPair(scheme, { region: (server) => server.register(memory, offset, part, access.REMOTE_ALL) });
    t.teardown(() => p.close());
    const at = [0, huge - offset, part - 8]; // its first bytes, the start of the second huge page, its last bytes
    p.scratch.bytes.write('hugepage', 0);
    p.clientConn.postSend(at.map((o, i) => ({ wrId: i, opcode: Opcode.WRITE, flags: SendFlag.SIGNALED, local: p.scratch, length: 8, remoteAddr: p.region.addr + BigInt(o), rkey: p.region.rkey })));
    const written = await p.clientCq.take(at.length);
    t.deepEqual(written.map((c) => c.statusName), at.map(() => 'SUCCESS'));
    for (const o of at) t.is(memory.bytes.subarray(offset + o, offset + o + 8).toString(), 'hugepage', `the server's memory at ${offset + o}`);
    memory.bytes.write('readback', offset + part - 8);
    p.clientConn.postSend([{ wrId: 9, opcode: Opcode.READ, flags: SendFlag.SIGNALED, local: p.scratch, localOffset: 64, length: 8, remoteAddr: p.region.addr + BigInt(part - 8), rkey: p.region.rkey }]);
    const [read] = await p.clientCq.take(1);
    t.is(read!.statusName, 'SUCCESS');
    t.is(p.scratch.bytes.subarray(64, 72).toString(), 'readback');
  });
}
