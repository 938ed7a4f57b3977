// The suites' throwaway etcd: the benchmarks' (bench/kv/etcd-process.ts).
export { type EtcdProcess, startEtcd } from '../../bench/kv/etcd-process.js';
