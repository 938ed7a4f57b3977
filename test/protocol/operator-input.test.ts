// protocol/operator-input.ts's guesses at mistyped names: which option a typo
// meant, and which keys of a parsed command line nobody declared.
import test from 'ava';

import { closestMatch, optionFlag, optionSuggestion, unknownOptionNames } from '../../protocol/operator-input.js';

const SERVER_OPTIONS = [
  'listen', 'memory', 'token', 'token-file', 'buckets', 'max-value', 'grace-ms', 'keepalive-ms', 'max-clients',
  'region-file', 'metrics-port', 'metrics-host', 'etcd', 'etcd-prefix', 'name', 'advertise', 'etcd-ttl', 'log-level',
];

test('a swap, a missing letter, a wrong letter or a wrong case each find the option meant', (t) => {
  t.is(closestMatch('memroy', SERVER_OPTIONS), 'memory');
  t.is(closestMatch('max-valu', SERVER_OPTIONS), 'max-value');
  t.is(closestMatch('keepalive_ms', SERVER_OPTIONS), 'keepalive-ms');
  t.is(closestMatch('Listen', SERVER_OPTIONS), 'listen');
  t.is(closestMatch('tokenfile', SERVER_OPTIONS), 'token-file');
});

test('the unique option a word begins is a match', (t) => {
  t.is(closestMatch('region', SERVER_OPTIONS), 'region-file');
  t.is(closestMatch('metrics', SERVER_OPTIONS), undefined); // -port or -host: no guess
});

test('a word near no option, or equally near two, gets no guess', (t) => {
  t.is(closestMatch('bogus', SERVER_OPTIONS), undefined);
  t.is(closestMatch('x', SERVER_OPTIONS), undefined);
  t.is(closestMatch('ab', ['ax', 'ay']), undefined);
  t.is(closestMatch('anything', []), undefined);
});

test('an edit budget of a third of the word', (t) => {
  t.is(closestMatch('mmmory', ['memory']), 'memory'); // 1 of 2
  t.is(closestMatch('mmmorx', ['memory']), 'memory'); // 2 of 2
  t.is(closestMatch('mmmxrx', ['memory']), undefined); // 3 of 2
});

test('suggestions are worded with the option as typed', (t) => {
  t.is(optionSuggestion('memroy', SERVER_OPTIONS), 'did you mean --memory?');
  t.is(optionSuggestion('--memroy', SERVER_OPTIONS), 'did you mean --memory?');
  t.is(optionSuggestion('bogus', SERVER_OPTIONS), undefined);
  t.is(optionFlag('m'), '-m');
  t.is(optionFlag('memory'), '--memory');
});

test('unknown names of a parsed command line: camelCase forms of known ones are known, twins of unknown ones fold', (t) => {
  const known = ['memory', 'm', 'token-file', 'help', 'version'];
  t.deepEqual(unknownOptionNames(['_', '$0', 'memory', 'm', 'tokenFile', 'token-file'], known), []);
  t.deepEqual(unknownOptionNames(['_', '$0', 'memroy'], known), ['memroy']);
  t.deepEqual(unknownOptionNames(['_', '$0', 'max-valu', 'maxValu', 'bogus'], known), ['max-valu', 'bogus']);
  t.deepEqual(unknownOptionNames(['maxValu'], known), ['maxValu']);
});
