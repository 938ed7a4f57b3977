// writeText puts a string key or value into the op arena: short ASCII strings char by char,
// anything else through Buffer.write. Both paths must give the bytes Buffer.from gives.
import test from 'ava';
import fc from 'fast-check';

import { writeText } from '../../client/keys.js';

function written(s: string, at = 3): Buffer {
  const bytes = Buffer.byteLength(s);
  const target = Buffer.alloc(at + bytes + 2, 0xee);
  writeText(target, s, at, bytes);
  return target;
}

test('writeText writes exactly Buffer.from(s) at its offset, ASCII or not, short or long', (t) => {
  const cases = ['', 'k', 'user:1000', 'a'.repeat(64), 'b'.repeat(65), 'c'.repeat(300), '\u0000\u007f', 'é', 'ключ-鍵-🔑', 'x'.repeat(63) + 'é', '\ud800', 'a\udc00b'];
  for (const s of cases) {
    const out = written(s);
    const bytes = Buffer.from(s, 'utf8');
    t.deepEqual(out.subarray(3, 3 + bytes.length), bytes, JSON.stringify(s));
    t.deepEqual([...out.subarray(0, 3), ...out.subarray(3 + bytes.length)], [0xee, 0xee, 0xee, 0xee, 0xee], `${JSON.stringify(s)}: nothing outside its bytes`);
  }
});

// Any UTF-16 code units, lone surrogates included.
const utf16Units = fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 40 }).map((units) => String.fromCharCode(...units));

test('writeText agrees with Buffer.from on any string', (t) => {
  fc.assert(
    fc.property(fc.oneof(fc.string({ maxLength: 80 }), fc.string({ unit: 'binary', maxLength: 40 }), utf16Units), (s) => {
      const bytes = Buffer.from(s, 'utf8');
      return written(s, 0).subarray(0, bytes.length).equals(bytes);
    }),
    { numRuns: 2000 },
  );
  t.pass();
});
