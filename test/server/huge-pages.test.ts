// Huge pages for the region when the host has them (native/transport/memory.cc):
// what a memory got, why not when it did not, and the server saying so on its listening line.
import { Writable } from 'node:stream';

import test from 'ava';
import { pino } from 'pino';

import { Memory } from '../../native/index.js';
import { connect, startServer } from '../helpers/kv.js';
import { providersUnderTest } from '../helpers/providers.js';

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
