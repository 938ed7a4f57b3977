// The constants C++ and TypeScript share (generated from native/common/constants.def).
export { CopyLayout, IndexWord, KvLayout, KvOp, KvStatus, OpFlag, OpLayout, ResultLayout, Superblock, ItemHeader, ItemState, ItemType, Record, RecordKind, EpochWord } from '../native/constants.generated.js';
export { statusName } from '../native/index.js';
