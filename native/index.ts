// The typed face of the addon. Layers above (client, server, protocol, tests,
// benchmarks) use this module, never the addon directly; native/addon.ts is
// the one place that loads it, and only the modules below import that.
//
//   transport   provider.ts (Provider, the provider list), connection.ts
//               (Connection, ConnectionRequest, Listener), completion-queue.ts,
//               memory.ts (Memory, MemoryRegion, MemoryWindow), work-requests.ts, errors.ts
//   client core client-core.ts: the KV data path over one connection
//   layout      layout.ts: the key hash, and what the addon was compiled with
//   server      notice-drain.ts: the server's notice path (records, blocks retired)
//
// Two ways to post and poll:
//  - batch-raw (hot paths): write requests into provider.sendBuffer with
//    writeWorkRequest(), call connection.postSendRaw(n); cq.pollRaw(max) leaves
//    completions in cq.completions. One crossing per batch, nothing allocated.
//  - objects (tests, control paths): connection.postSend([...]), cq.poll().
export { Access, ConnEvent, ConnState, Limit, Opcode, SendFlag, WcStatus, WcFlag, constants } from './constants.generated.js';

export type { DeviceInfo, ProviderInfo } from './addon.js';
export { ClientCore, type CoreOptions, type CoreRegion, type LocationStats, freeRegistered, registeredBuffer } from './client-core.js';
// Where the client core's controlWords hold their completions.
export { ControlWords } from './constants.generated.js';
export { CompletionQueue, type PollMode } from './completion-queue.js';
export { type ConnectOptions, Connection, ConnectionRequest, Listener, type QueuePairOptions } from './connection.js';
export { TransportError, opcodeName, statusName } from './errors.js';
export { type Crc32cPath, crc32c, crc32cHardware, hashKey, itemChecksum, nativeBuildItem, nativeConstants, nativeIndexWords } from './layout.js';
export { NoticeDrain, NoticeOut, NoticeProblem, type NoticeDrainLayout } from './notice-drain.js';
export { Memory, MemoryRegion, MemoryWindow, type RemoteRegion, access } from './memory.js';
export { Provider, builtProviders, knownProviders } from './provider.js';
export { type Completion, type RecvRequest, type WorkRequest, readCompletion, writeWorkRequest } from './work-requests.js';
