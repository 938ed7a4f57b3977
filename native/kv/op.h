// One operation in the client core: a header every operation has (which op
// it is, its phase, deadline, key, item buffer, granted block) and the state
// of its type, so a GET carries no CAS fields. Internal to native/kv.
//
// Ownership: the core owns every Op (64, made once); JS never sees them, only
// the OpDesc it submits and the OpResult it polls.
#pragma once

#include <variant>

#include "buffer_pool.h"
#include "client_core.h"
#include "expiry.h"
#include "location_cache.h"

namespace rkv::kv {

// Reads of an item that fail its checks (checksum, key, state) before a GET
// calls it damaged (KV_CORRUPT) rather than torn by a concurrent writer: the
// small-item path (get.cc) and the large one (large.cc) alike.
constexpr uint32_t kMaxGetRetries = 64;

// Each op owns a fixed area of scratch for bucket images, atomics results and
// small records; item buffers come from the buffer pool after the areas.
namespace area {
constexpr size_t kBytes = 8192;
constexpr size_t B1 = 0, B2 = 64;            // bucket images read before locking
constexpr size_t F1 = 128, F2 = 192;         // images read under the locks (fenced)
constexpr size_t FALT = 256;                 // the displacement bucket, under its lock
constexpr size_t CAS = 320;                  // CAS results: b1, b2, alt
constexpr size_t FAA = 344;                  // FAA results: b1, b2, alt
constexpr size_t RECORD = 368;               // notification record (32 B)
constexpr size_t SLOT_NEW = 400, SLOT_MOVE = 408, CREDIT = 416, ATOM = 424;
constexpr size_t MARK = 432;                 // ItemState::SUPERSEDED, the mark a write puts on the item it unlinks
constexpr size_t ACCESS = 440;               // the 1 a GET WRITEs into its item's access byte (access.cc)
constexpr size_t EPOCH = 448;                // a write's hash slot's epoch word, read with its lock CASes
constexpr size_t ALT = 512;                  // up to 14 candidate displacement buckets
constexpr size_t LIVE = ALT;                 // a large GET's header read again (a GET never displaces)
constexpr size_t CAND = 1536;                // candidate headers: 48 + key bytes each
constexpr size_t kCandStride = kHeader + kMaxKey;  // 1072
static_assert(ALT + 2 * kSlots * kBucketBytes <= CAND);
static_assert(CAND + u32(KvLayout::MAX_CANDIDATES) * kCandStride <= kBytes);
}  // namespace area

constexpr uint32_t kMaxCandidates = u32(KvLayout::MAX_CANDIDATES);
constexpr uint32_t kAtomicWord = u32(ItemHeader::ATOMIC_WORD);

// Reading bucket images: [lock word | 7 slots].
inline uint64_t lock_of(const uint8_t* bucket) { return load_le<uint64_t>(bucket); }
inline uint64_t slot_at(const uint8_t* bucket, uint32_t i) { return load_le<uint64_t>(bucket + 8 + 8 * i); }
inline uint32_t occupancy(const uint8_t* bucket) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kSlots; i++) n += slot_at(bucket, i) != 0;
  return n;
}
inline int empty_index(const uint8_t* bucket) {
  for (uint32_t i = 0; i < kSlots; i++) {
    if (slot_at(bucket, i) == 0) return static_cast<int>(i);
  }
  return -1;
}
// A lock word as its holder will leave it: the CAS a LOCK or a write expects.
inline uint64_t as_free(uint64_t word) {
  return lock_owner(word) == 0 ? word : lock_word(static_cast<uint32_t>(word >> kLockVersionShift), 0);
}

// The item type an op works on (DELETE takes any).
inline ItemType type_for(KvOp op) {
  switch (op) {
    case KvOp::INCR: return ItemType::COUNTER;
    case KvOp::LOCK:
    case KvOp::UNLOCK: return ItemType::LOCK;
    default: return ItemType::BYTES;
  }
}

// Where an op is. G_*: finding the key's item (GET, and the first step of
// INCR, LOCK, UNLOCK; G_CACHED: a GET's one READ of the item the location
// cache names; G_CACHED_INTO: the same for a GET into a registered buffer,
// header and key into the op's area, the value into the buffer); W_*: changing a slot under the bucket locks (PUT,
// DELETE, CAS, creating a counter or lock); A_ATOMIC: one atomic on an item's
// word; BACKOFF: waiting to retry (resume says where).
enum class ClientCore::Phase : uint8_t {
  IDLE, G_BUCKETS, G_CONFIRM, G_ITEM, G_CACHED, G_CACHED_INTO, G_LARGE, G_LARGE_LIVE,
  W_CREDIT, W_READ, W_LOCK, W_VERIFY, W_ALT, W_ALT_LOCK, W_COMMIT, W_RELEASE,
  A_ATOMIC,
  BACKOFF,
  W_PARKED,  // a replicated write's member, stopped until its group decides (replicated.cc)
};

// A slot seen in a bucket image, and where: bucket 0 = b1, 1 = b2; index 0..6.
struct SlotRef {
  uint64_t slot = 0;
  uint8_t bucket = 0;
  uint8_t index = 0;
};

// The heap block the server granted for the new item (PUT, CAS, INCR, LOCK).
struct GrantedBlock {
  uint32_t offset = 0;  // in units from the heap's start
  uint32_t units = 0;
  bool held = false;       // the op came with one
  bool published = false;  // a slot will name it once the commit lands
};

// Finding a key's item: GET, and the first step of INCR, LOCK and UNLOCK.
struct LookupState {
  Clock::time_point started;  // the first bucket read: an item read after grace/2 may be reused memory
  SlotRef candidates[2 * kSlots];  // same-fingerprint slots of the bucket images
  uint32_t ncandidates = 0, next = 0;
  uint64_t ruled_out[2 * kSlots];  // same fingerprint, another key
  uint32_t nruled_out = 0;
  uint64_t seen_locks[2] = {0, 0};  // a miss is final when a second read agrees, unlocked
  bool confirming = false;
  LocationCache::Entry cached;  // G_CACHED, G_CACHED_INTO: the entry whose item is being read
};

// A bucket lock a write takes: CAS (version, 0) -> (version, us).
struct BucketLock {
  uint32_t bucket = 0;
  uint64_t expect = 0;  // the free lock word the CAS expects
  bool held = false;
};

// Changing a key's slot under both bucket locks: PUT, DELETE, CAS, and
// creating a counter or lock (docs/protocol.md, "PUT").
struct WriteState {
  BucketLock locks[3];          // b1, b2, and the displacement target
  uint64_t expected_version = 0;  // CAS: the version to replace (0: only if absent)
  uint32_t item_units = 0;      // the new item's length (PUT, CAS, creation)
  bool item_written = false;    // the new item is in its block (once, in the first W_READ)
  // Same-fingerprint items whose header and key were read (area::CAND).
  uint64_t candidates[kMaxCandidates];
  uint32_t ncandidates = 0;
  bool damaged_slot = false;  // a same-fingerprint slot pointing outside the heap
  // The slot to change, and what it held.
  int target_bucket = -1, target_index = -1;
  uint64_t old_slot = 0;
  uint64_t seal_add = 0;  // DELETE of a counter or lock item: its seal (layout.h)
  // Displacement: a resident entry moved to its other bucket.
  bool moving = false;
  SlotRef move;
  int alt_index = -1;
  uint32_t alt_buckets[2 * kSlots];
  uint32_t nalt = 0;
  // After W_RELEASE: finish with this instead of retrying (OK: retry), and its detail.
  KvStatus final_status = KvStatus::OK;
  uint32_t final_detail = 0;
  bool then_atomic = false;  // creation found the key already there: do the atomic on it

  // The key's two buckets are the first two to lock.
  WriteState& aim(const KeyHash& kh) {
    locks[0].bucket = kh.b1;
    locks[1].bucket = kh.b2;
    return *this;
  }
};

// INCR, LOCK, UNLOCK: the item's atomic word, kept across the steps (find
// the item, or create it) that reach it.
struct AtomicState {
  union {
    uint64_t delta = 0;  // INCR
    uint32_t token;      // UNLOCK: the fencing token LOCK returned
  };
  uint64_t addr = 0;    // the word's address in the server's region (0: not known)
  uint64_t expect = 0;  // LOCK, UNLOCK: the word the CAS expects
  uint64_t result = 0;  // INCR: the new value; LOCK: the token
  uint64_t taken_from = 0;  // a replicated LOCK's backup: the word it replaced, which an undo puts back
  uint32_t create_token = 0;  // LOCK: the token a creation writes
  // A LOCK that took its word off its epoch gives it back, then ends so (OK: waits for the word to open).
  bool off_epoch = false;
  KvStatus off_status = KvStatus::OK;
  uint32_t off_detail = 0;
  std::variant<LookupState, WriteState> step;
};

// A replicated write (docs/replication-design.md, scheme A): the op on the
// primary leads one follower op per backup. Each member locks and decides on
// its own replica, then stops (a vote); the leader decides for the group:
// all held → the followers commit, then the leader; any retry → all release
// and the group retries together; any failure → all release and the leader
// answers. The leader answers only once every follower has ended.
constexpr uint32_t kMaxBackups = u32(OpLayout::MAX_BACKUPS);
struct GroupState {
  static constexpr uint8_t kNone = 0xff;
  using Vote = GroupVote;
  Vote vote = Vote::RUNNING;
  KvStatus status = KvStatus::OK;  // DONE: why
  uint32_t detail = 0;
  bool go = false;  // the group decided: this member's W_COMMIT (or atomic) posts
  bool at_atomic = false;  // HELD before its atomic (INCR on a found word): it holds no locks
  // Follower.
  uint8_t leader = kNone;   // its leader's index
  uint8_t backup = 0;       // which backup of the descriptor it writes
  bool abandoned = false;   // its leader is ending: give the locks back and end at the next stop
  bool taken = false;       // a LOCK's: it holds the lock word on its replica until the leader answers
  bool undoing = false;     // a LOCK's: its CAS putting back the word it took is in flight
  bool created = false;     // a LOCK's: it created the lock item (its block is in use, whatever follows)
  // Leader.
  uint8_t followers[kMaxBackups] = {kNone, kNone};  // by backup; kNone: ended (or none)
  uint8_t nbackups = 0;
  bool committing = false;           // the followers' commits are posted
  bool any_committed = false;        // some follower committed (an INCR: added its delta)
  bool followers_committed = false;  // all did: the leader's own commit (or add) is posted
  bool ending = false;               // answering end_status once every follower has ended
  bool abandoning = false;           // group_end is ending the followers: they must not answer for it
  KvStatus end_status = KvStatus::OK;
  uint32_t end_detail = 0;
  KvStatus failure = KvStatus::OK;   // the first follower failure
  uint32_t failure_detail = 0;
  uint8_t unused = 0;                // bit i: backup i's block was not published
  bool release_backups = true;      // UNLOCK: its backups release this client's words (not after a stale token)
  uint32_t lock_floor = 0;           // LOCK: its token goes above this: the primary's as last seen (a backup's word), or the one a copy names

  bool is_follower() const { return leader != kNone; }
  bool is_leader() const { return nbackups > 0; }
  bool grouped() const { return is_follower() || is_leader(); }
};

struct ClientCore::Op {
  // Which of the core's ops this is, whether in use, and the tag of its phase.
  uint32_t index = 0;
  uint64_t area_base = 0;  // scratch offset of this op's area
  bool busy = false;
  Phase phase = Phase::IDLE;
  Phase resume = Phase::IDLE;  // what BACKOFF returns to
  uint8_t seq = 0;             // tags completions of the current phase
  uint8_t connection = 0;      // the core's index of the connection it runs on
  bool linked = false;         // that connection exists (else the op is refused before it starts)
  // The operation.
  KvOp type = KvOp::GET;
  uint32_t id = 0;
  Clock::time_point deadline, backoff_until;
  uint32_t retries = 0;
  uint8_t key[kMaxKey];
  uint32_t key_len = 0;
  KeyHash kh;
  BufferPool::Buffer item;  // the item read (GET) or built (PUT, CAS, creation); with ext, its header and key only
  // The caller's registered buffer for the value (lkey 0: none): OpDesc::ext.
  struct External {
    uint8_t* data = nullptr;
    uint32_t len = 0;
    uint32_t lkey = 0;
  } ext;
  uint64_t version = 0;     // the item's version: read (GET) or written
  uint64_t expiry = 0;      // the item's EXPIRY: read (GET) or written (PUT, CAS); 0 = never
  uint32_t epoch = 0;       // writes: the epoch the hash slot's word must hold (0: any, while OPEN)
  bool epoch_wait = false;  // the last retry waited for a closed or fenced epoch word (at the deadline: TIMEOUT)
  GrantedBlock block;
  bool ring_credit = false;  // a record of our notification ring is promised to this op (writes)
  bool shares_item = false;  // a follower: `item` is its leader's (never freed by it)
  GroupState group;
  std::variant<LookupState, WriteState, AtomicState> state;

  uint64_t area(size_t offset) const { return area_base + offset; }
  uint64_t tag() const { return wr_tag::make(connection, index, seq); }
  void begin(Phase p) {
    phase = p;
    seq++;
  }
  bool is_atomic() const { return std::holds_alternative<AtomicState>(state); }
  AtomicState& atomic() { return std::get<AtomicState>(state); }
  // The state of the step the op is in (an atomic op's own step).
  LookupState& lookup() { return is_atomic() ? std::get<LookupState>(atomic().step) : std::get<LookupState>(state); }
  WriteState& write() { return is_atomic() ? std::get<WriteState>(atomic().step) : std::get<WriteState>(state); }
  // A fresh lookup (a GET or an atomic op starting over) or write (an atomic
  // op creating its item); PUT, DELETE and CAS start theirs in submit.
  void start_lookup() {
    if (is_atomic()) {
      atomic().step.emplace<LookupState>();
    } else {
      state.emplace<LookupState>();
    }
  }
  WriteState& start_write() {
    return (is_atomic() ? atomic().step.emplace<WriteState>() : state.emplace<WriteState>()).aim(kh);
  }
};

inline ClientCore::Link& ClientCore::link(const Op& op) const { return *links_[op.connection]; }

}  // namespace rkv::kv
