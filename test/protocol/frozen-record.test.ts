// <prefix>/frozen (protocol/registry.ts): its presence freezes placement; its text says why, for kvctl
// layout. Records written before `reason` existed (2026-11) still say why; one that cannot be read says so.
import test from 'ava';

import { frozenRecord, parseFrozenRecord } from '../../protocol/registry.js';

test('a record written now reads back: reason, epoch, members', (t) => {
  t.like(parseFrozenRecord(frozenRecord('drain', 7, ['m0'])), { reason: 'drain', epoch: 7, members: ['m0'] });
  t.like(parseFrozenRecord(frozenRecord('rebalance')), { reason: 'rebalance', members: [] });
  t.regex(parseFrozenRecord(frozenRecord('loaded')).since ?? '', /^\d{4}-\d\d-\d\dT/);
});

test('records of the versions before reason existed', (t) => {
  const since = '2026-11-20T00:00:00.000Z';
  t.like(parseFrozenRecord(JSON.stringify({ since, epoch: 3, failed: ['m1'] })), { since, reason: 'failover', epoch: 3, members: ['m1'] });
  t.like(parseFrozenRecord(JSON.stringify({ since, epoch: 4, drained: ['m0', 'm2'] })), { reason: 'drain', members: ['m0', 'm2'] });
  t.like(parseFrozenRecord(JSON.stringify({ since, epoch: 5, loaded: true })), { reason: 'loaded', members: [] });
  t.like(parseFrozenRecord(JSON.stringify({ since, epoch: 6, rebalanceGivenUp: true })), { reason: 'rebalance given up' });
  t.like(parseFrozenRecord(JSON.stringify({ since, by: 'kvctl rebalance' })), { reason: 'rebalance' });
});

test('a record that cannot be read still freezes: reason unknown, nothing taken from it that is not what it claims', (t) => {
  for (const text of ['', 'not json', 'null', '7', '[]', JSON.stringify({ reason: 'moon phase', members: 'm0', epoch: -1.5 })]) {
    const parsed = parseFrozenRecord(text);
    t.is(parsed.reason, 'unknown', text);
    t.deepEqual(parsed.members, [], text);
    t.is(parsed.epoch, undefined, text);
  }
  t.deepEqual(parseFrozenRecord(JSON.stringify({ reason: 'failover', members: ['m0', 3, null, 'm1'] })).members, ['m0', 'm1']);
});
