// The client's view of the shared constants (generated from constants.def).
export { KvLayout, KvOp, KvStatus, OpLayout, ResultLayout, Superblock, ItemHeader, ItemType, Record, RecordKind } from '../native/constants.generated.js';
export { statusName } from '../native/index.js';
