// rdma-kv: the client library.
export { KvClient } from './kv-client.js';
export type { MemberLayout } from './kv-client.js';
export type { ClientStats, EtcdOptions, HistoryEvent, KvClientOptions, KvStatusName, Key, Value, VersionedValue } from './types.js';
export { SLOT_COUNT, keySlot } from '../protocol/hash-slots.js';
export * from '../protocol/errors.js';
export { MAX_TTL_MS, type PutOptions } from './expiry.js';
