// Token files: `<token> <role> [<namespace>]` per line, comments and blank
// lines, a bare token as before roles, and one clear error naming the file and
// line for anything else; a file readable by others is warned about.
import { chmodSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import test from 'ava';

import { StartupError } from '../../protocol/operator-input.js';
import { clientToken, loadTokenFile, parseTokenFile } from '../../protocol/tokens.js';

const F = '/etc/rdma-kv/tokens';

test('a bare token keeps its meaning: it may write', (t) => {
  t.deepEqual(parseTokenFile('  s3cret\n\n', F), [{ token: 's3cret', role: 'write', namespace: 'default' }]);
  t.deepEqual(parseTokenFile('# the one token\ns3cret\n', F), [{ token: 's3cret', role: 'write', namespace: 'default' }]);
});

test('roles, the default namespace, comments and blank lines', (t) => {
  const text = ['# operators', 'w-token write', '', '   # readers', 'r-token   read\tdefault', 'r2 read', ''].join('\n');
  t.deepEqual(parseTokenFile(text, F), [
    { token: 'w-token', role: 'write', namespace: 'default' },
    { token: 'r-token', role: 'read', namespace: 'default' },
    { token: 'r2', role: 'read', namespace: 'default' },
  ]);
  // One line with a role is fine too.
  t.deepEqual(parseTokenFile('only read\n', F), [{ token: 'only', role: 'read', namespace: 'default' }]);
});

test('malformed lines: a StartupError naming the file and the line', (t) => {
  const cases: Array<[string, RegExp]> = [
    ['', /tokens is empty$/],
    [' \n\t\n', /tokens is empty$/],
    ['# nothing but comments\n\n', /holds no token/],
    ['a write\nb\n', /line 2: a token without a role/],
    ['a write\nb admin\n', /line 2: unknown role 'admin': expected read or write/],
    ['a WRITE\n', /line 1: unknown role 'WRITE'/],
    ['\n\na read default extra\n', /line 3: 4 fields/],
    ['a read tenant/b\n', /line 1: namespace 'tenant\/b': a name is letters, digits/],
    ['a read a-name-of-twenty-one1\n', /line 1: namespace 'a-name-of-twenty-one1': at most 20 characters/],
    ['a read\nb write\na write\n', /line 3: the token of line 1 again/],
  ];
  for (const [text, message] of cases) {
    const error = t.throws(() => parseTokenFile(text, F), { instanceOf: StartupError }, JSON.stringify(text));
    t.true(error!.message.startsWith(`--token-file ${F}`), error!.message);
    t.regex(error!.message, message);
  }
});

test('permissions: a file readable by its group or by everyone is warned about; 0600 is not', (t) => {
  const file = join(tmpdir(), `rkv-tokens-${process.pid}`);
  writeFileSync(file, 'w write\nr read\n');
  chmodSync(file, 0o600);
  t.is(loadTokenFile(file).warning, undefined);
  t.is(loadTokenFile(file).entries.length, 2);
  chmodSync(file, 0o640);
  t.regex(loadTokenFile(file).warning!, /is readable by its group \(mode 640\).*chmod 600/);
  chmodSync(file, 0o644);
  t.regex(loadTokenFile(file).warning!, /is readable by everyone \(mode 644\)/);
  t.throws(() => loadTokenFile('/nonexistent/tokens'), { instanceOf: StartupError, message: 'cannot read --token-file /nonexistent/tokens: no such file' });
});

test('a client (kvctl) reads a token file as the server does: the bare token, else the first write token, else the first read one', (t) => {
  const file = join(tmpdir(), `rkv-client-token-${process.pid}`);
  t.teardown(() => writeFileSync(file, ''));
  const token = (text: string) => {
    writeFileSync(file, text, { mode: 0o600 });
    return clientToken(file).token;
  };
  t.is(token('\t s3cret \n'), 's3cret');
  t.is(token('r1 read\nw1 write\nw2 write\n'), 'w1');
  t.is(token('# readers only\nr1 read\nr2 read\n'), 'r1');
  // A line with a role names its token as the server reads it, not the whole line.
  t.is(token('s3cret write\n'), 's3cret');
  t.throws(() => token('\n\n'), { instanceOf: StartupError, message: /is empty/ });
  t.throws(() => token('a b c d\n'), { instanceOf: StartupError, message: /line 1/ });
  t.throws(() => clientToken('/nonexistent/token'), { instanceOf: StartupError, message: 'cannot read --token-file /nonexistent/token: no such file' });
});
