// rdma-kv: the client library.
export { KvClient } from './kv-client.js';
export type { HistoryEvent, KvClientOptions, KvStatusName, Key, Value, VersionedValue } from './kv-client.js';
export * from './errors.js';
