// Operation names, as histories, metrics and error messages show them.
import { KvOp } from '../protocol/constants.js';
import type { HistoryEvent } from './types.js';

export type OpName = HistoryEvent['f'];

const NAMES: Record<KvOp, OpName> = {
  [KvOp.GET]: 'get', [KvOp.PUT]: 'put', [KvOp.DELETE]: 'delete', [KvOp.CAS]: 'cas',
  [KvOp.INCR]: 'incr', [KvOp.LOCK]: 'lock', [KvOp.UNLOCK]: 'unlock',
};

export function opName(type: KvOp): OpName {
  return NAMES[type];
}
