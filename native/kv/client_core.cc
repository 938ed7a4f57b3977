// The client's data path state machines. docs/protocol.md describes every
// round trip and why it is safe; the comments here say which step is which.
#include "client_core.h"

#include <algorithm>
#include <cerrno>

namespace rkv::kv {

using transport::Completion;
using transport::WorkRequest;

namespace {

// Each op owns a fixed area of scratch for bucket images, atomics results and
// small records; item buffers come from the size-class pool after the areas.
constexpr size_t kAreaBytes = 8192;
constexpr size_t A_B1 = 0, A_B2 = 64;              // bucket images read before locking
constexpr size_t A_F1 = 128, A_F2 = 192;           // images read under the locks (fenced)
constexpr size_t A_FALT = 256;                     // the displacement bucket, under its lock
constexpr size_t A_CAS = 320;                      // CAS results: b1, b2, alt
constexpr size_t A_FAA = 344;                      // FAA results: b1, b2, alt
constexpr size_t A_RECORD = 368;                   // notification record (32 B)
constexpr size_t A_SLOT_NEW = 400, A_SLOT_MOVE = 408, A_CREDIT = 416, A_ATOM = 424;
constexpr size_t A_ALT = 512;                      // up to 14 candidate displacement buckets
constexpr size_t A_CAND = 1536;                    // candidate headers: 32 + key bytes each
constexpr size_t kCandStride = kHeader + kMaxKey;  // 1056
static_assert(A_ALT + 2 * kSlots * kBucketBytes <= A_CAND);
static_assert(A_CAND + u32(KvLayout::MAX_CANDIDATES) * kCandStride <= kAreaBytes);

constexpr uint32_t kMaxCandidates = u32(KvLayout::MAX_CANDIDATES);
constexpr uint32_t kRingRecords = u32(KvLayout::RING_RECORDS);
constexpr uint32_t kMaxGetRetries = 64;
constexpr uint32_t kAtomicWord = u32(ItemHeader::ATOMIC_WORD);

// The item type an op works on (DELETE takes any).
ItemType type_for(KvOp op) {
  switch (op) {
    case KvOp::INCR: return ItemType::COUNTER;
    case KvOp::LOCK:
    case KvOp::UNLOCK: return ItemType::LOCK;
    default: return ItemType::BYTES;
  }
}
bool is_atomic_op(KvOp op) { return op == KvOp::INCR || op == KvOp::LOCK || op == KvOp::UNLOCK; }

uint64_t slot_at(const uint8_t* bucket, uint32_t i) { return load_le<uint64_t>(bucket + 8 + 8 * i); }
uint64_t lock_of(const uint8_t* bucket) { return load_le<uint64_t>(bucket); }
uint32_t occupancy(const uint8_t* bucket) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kSlots; i++) n += slot_at(bucket, i) != 0;
  return n;
}
int empty_index(const uint8_t* bucket) {
  for (uint32_t i = 0; i < kSlots; i++) {
    if (slot_at(bucket, i) == 0) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

struct ClientCore::Op {
  uint32_t index = 0;
  bool busy = false;
  Phase phase = Phase::IDLE;
  Phase resume = Phase::IDLE;  // what BACKOFF returns to
  uint8_t seq = 0;             // tags completions of the current phase
  KvOp type = KvOp::GET;
  uint32_t id = 0;
  uint8_t key[kMaxKey];
  uint32_t key_len = 0;
  KeyHash kh;
  uint32_t bucket[3] = {0, 0, 0};  // b1, b2, displacement target
  Clock::time_point deadline, rtt1, backoff_until;
  uint32_t retries = 0;

  // Item buffer in scratch: the item read (GET) or built (PUT).
  bool has_item = false;
  uint32_t item_class = 0;
  uint64_t item_offset = 0;
  uint32_t item_units = 0;
  uint64_t version = 0;
  uint32_t block = 0, block_units = 0;
  bool has_block = false, block_published = false;
  bool item_written = false;
  uint64_t arg = 0;
  uint64_t atomic_addr = 0, atomic_expect = 0, result_value = 0;
  uint64_t seal_add = 0;  // DELETE of a counter or lock item: its seal (layout.h)
  bool damaged_slot = false;  // a same-fingerprint slot pointing outside the heap
  bool then_atomic = false;  // after W_RELEASE: the key already existed, do the atomic on it
  bool credit_reserved = false;

  // GET: candidates from the bucket images, slots already ruled out.
  Candidate cands[2 * kSlots];
  uint32_t ncand = 0, next_cand = 0;
  uint64_t checked[2 * kSlots];
  uint32_t nchecked = 0;
  uint64_t seen_locks[2] = {0, 0};
  bool confirming = false;

  // Writes.
  uint64_t expect[3] = {0, 0, 0};
  bool locked[3] = {false, false, false};
  uint64_t cand_slot[kMaxCandidates];
  uint32_t ncand_read = 0;
  int target_bucket = -1, target_index = -1;  // 0 = b1, 1 = b2
  uint64_t old_slot = 0;
  bool moving = false;
  Candidate move{};
  int alt_index = -1;
  uint32_t alt_list[2 * kSlots];
  uint32_t nalt = 0;
  KvStatus final_status = KvStatus::OK;  // after W_RELEASE: finish with this instead of retrying
};

// ---- setup -----------------------------------------------------------------------

std::unique_ptr<ClientCore> ClientCore::create(std::shared_ptr<transport::Provider> provider,
                                               std::shared_ptr<transport::Connection> connection,
                                               std::shared_ptr<transport::CompletionQueue> cq,
                                               const RegionInfo& region, size_t scratch_bytes,
                                               uint32_t op_timeout_ms, std::string* error) {
  if (region.bucket_count < 2 || (region.bucket_count & (region.bucket_count - 1)) != 0) {
    *error = "the server's bucket count is not a power of two >= 2";
    return nullptr;
  }
  std::unique_ptr<ClientCore> core(new ClientCore());
  core->provider_ = std::move(provider);
  core->connection_ = std::move(connection);
  core->cq_ = std::move(cq);
  core->region_ = region;
  core->op_timeout_ms_ = op_timeout_ms;
  core->max_inline_ = core->connection_->max_inline();
  const size_t slots = u32(KvLayout::MAX_INFLIGHT);
  core->item_base_ = slots * kAreaBytes;
  const uint64_t largest = class_bytes(class_for(item_bytes(kMaxKey, region.max_value)));
  scratch_bytes = std::max<size_t>(scratch_bytes, core->item_base_ + 2 * largest);
  core->scratch_ = transport::Memory::allocate(scratch_bytes, "", error);
  if (!core->scratch_) return nullptr;
  core->mr_ = core->provider_->register_memory(*core->scratch_, 0, core->scratch_->length(),
                                               u32(Access::LOCAL_WRITE), error);
  if (!core->mr_) return nullptr;
  core->ops_.resize(slots);
  for (uint32_t i = 0; i < slots; i++) {
    core->ops_[i].index = i;
    core->free_ops_.push_back(static_cast<uint32_t>(slots - 1 - i));
  }
  core->free_items_.resize(40);
  core->item_bump_ = core->item_base_;
  core->completions_.resize(u32(Limit::MAX_POLL_BATCH));
  core->pending_.reserve(1024);
  core->rng_.seed(region.client_id * 2654435761u + 1);
  return core;
}

ClientCore::~ClientCore() = default;

uint8_t* ClientCore::area(const Op& op, size_t offset) const {
  return scratch_->data() + op.index * kAreaBytes + offset;
}
uint64_t ClientCore::area_offset(const Op& op, size_t offset) const { return op.index * kAreaBytes + offset; }
uint64_t ClientCore::bucket_addr(uint32_t bucket) const {
  return region_.addr + region_.index_offset + static_cast<uint64_t>(bucket) * kBucketBytes;
}
bool ClientCore::slot_in_heap(uint64_t slot) const {
  const uint64_t units = slot_units(slot);
  return units > 0 && (static_cast<uint64_t>(slot_offset(slot)) + units) * kUnit <= region_.heap_bytes;
}

uint64_t ClientCore::heap_addr(uint32_t units) const {
  return region_.addr + region_.heap_offset + static_cast<uint64_t>(units) * kUnit;
}

// ---- posting -------------------------------------------------------------------

namespace {
uint64_t tag(uint32_t index, uint8_t seq) { return static_cast<uint64_t>(index) << 8 | seq; }
}  // namespace

void ClientCore::add_read(Op& op, uint64_t local_offset, uint32_t length, uint64_t remote, bool fence) {
  WorkRequest wr;
  wr.wr_id = tag(op.index, op.seq);
  wr.opcode = Opcode::READ;
  wr.send_flags = fence ? u32(SendFlag::FENCE) : 0;
  wr.local_addr = reinterpret_cast<uint64_t>(scratch_->data() + local_offset);
  wr.length = length;
  wr.lkey = mr_->lkey();
  wr.remote_addr = remote;
  wr.rkey = region_.rkey;
  pending_.push_back(wr);
}

void ClientCore::add_write(Op& op, uint64_t local_offset, uint32_t length, uint64_t remote) {
  add_read(op, local_offset, length, remote);
  WorkRequest& wr = pending_.back();
  wr.opcode = Opcode::WRITE;
  if (length <= max_inline_) wr.send_flags |= u32(SendFlag::INLINE);
}

void ClientCore::add_write_imm(Op& op, uint64_t local_offset, uint32_t length, uint64_t remote, uint32_t imm) {
  add_write(op, local_offset, length, remote);
  pending_.back().opcode = Opcode::WRITE_WITH_IMM;
  pending_.back().imm = imm;
}

void ClientCore::add_cas(Op& op, uint64_t result_offset, uint64_t remote, uint64_t expect, uint64_t swap) {
  add_read(op, result_offset, 8, remote);
  WorkRequest& wr = pending_.back();
  wr.opcode = Opcode::CMP_AND_SWP;
  wr.compare_add = expect;
  wr.swap = swap;
}

void ClientCore::add_faa(Op& op, uint64_t result_offset, uint64_t remote, uint64_t add) {
  add_read(op, result_offset, 8, remote);
  WorkRequest& wr = pending_.back();
  wr.opcode = Opcode::FETCH_AND_ADD;
  wr.compare_add = add;
}

// A phase's requests are added after begin (phase set, seq bumped) and the
// last one is signaled: on one RC connection its completion implies the rest.
void ClientCore::close_phase(Op& op, Phase next) {
  (void)next;
  pending_.back().send_flags |= u32(SendFlag::SIGNALED);
}

void ClientCore::flush() {
  if (pending_.empty()) return;
  size_t bad = 0;
  int rc = connection_->post_send(pending_.data(), pending_.size(), &bad);
  doorbells_++;
  if (rc == 0) {
    pending_.clear();
  } else if (rc == ENOMEM) {
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(bad));  // the rest go next poll
  } else {
    pending_.clear();
    broken_ = true;
    fail_all(KvStatus::DISCONNECTED, 0);
  }
}

namespace {
#define BEGIN(op, p) ((op).phase = (p), (op).seq++)
}  // namespace

// ---- GET ---------------------------------------------------------------------------

// RTT1: both candidate buckets in one doorbell.
void ClientCore::get_read_buckets(Op& op, Phase phase) {
  BEGIN(op, phase);
  if (phase == Phase::G_BUCKETS) op.rtt1 = Clock::now();
  add_read(op, area_offset(op, A_B1), kBucketBytes, bucket_addr(op.bucket[0]));
  add_read(op, area_offset(op, A_B2), kBucketBytes, bucket_addr(op.bucket[1]));
  close_phase(op, phase);
}

void ClientCore::get_buckets_done(Op& op) {
  const uint8_t* images[2] = {area(op, A_B1), area(op, A_B2)};
  op.ncand = op.next_cand = 0;
  for (uint32_t b = 0; b < 2; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      uint64_t s = slot_at(images[b], i);
      if (s == 0 || slot_fp(s) != op.kh.fp) continue;
      if (std::find(op.checked, op.checked + op.nchecked, s) != op.checked + op.nchecked) continue;
      op.cands[op.ncand++] = {s, static_cast<uint8_t>(b), static_cast<uint8_t>(i)};
    }
  }
  if (op.ncand > 0) return get_item_next(op);
  // A miss is only final when two reads of both buckets agree, unlocked:
  // a displacement moves an entry between buckets under both buckets' locks,
  // and a reader's two READs could straddle it.
  uint64_t locks[2] = {lock_of(images[0]), lock_of(images[1])};
  if (op.confirming && locks[0] == op.seen_locks[0] && locks[1] == op.seen_locks[1] && lock_owner(locks[0]) == 0 &&
      lock_owner(locks[1]) == 0) {
    if (op.type == KvOp::INCR || op.type == KvOp::LOCK) return begin_create(op);
    return finish(op, KvStatus::NOT_FOUND);
  }
  const bool held = lock_owner(locks[0]) != 0 || lock_owner(locks[1]) != 0;
  op.seen_locks[0] = locks[0];
  op.seen_locks[1] = locks[1];
  op.confirming = true;
  if (held) {
    op.resume = Phase::G_CONFIRM;
    return retry_later(op);
  }
  get_read_buckets(op, Phase::G_CONFIRM);
}

// A write's version: the session's base and our sequence in it. 0 once the
// session's 2^40 versions are used up: the session ends (we disconnect) and the
// client's reconnect starts a new one, with a new base, rather than reuse one.
uint64_t ClientCore::next_version() {
  constexpr uint64_t kSequences = 1ull << u32(KvLayout::SESSION_VERSION_BITS);
  if (version_seq_ + 1 >= kSequences) {
    if (!broken_) connection_->disconnect();
    return 0;
  }
  return region_.version_base | ++version_seq_;
}

bool ClientCore::alloc_item(Op& op, uint64_t bytes) {
  uint32_t c = class_for(bytes);
  uint64_t offset;
  if (c < free_items_.size() && !free_items_[c].empty()) {
    offset = free_items_[c].back();
    free_items_[c].pop_back();
  } else if (item_bump_ + class_bytes(c) <= scratch_->length()) {
    offset = item_bump_;
    item_bump_ += class_bytes(c);
  } else {
    return false;
  }
  op.has_item = true;
  op.item_class = c;
  op.item_offset = offset;
  return true;
}

void ClientCore::free_item(Op& op) {
  if (!op.has_item) return;
  free_items_[op.item_class].push_back(op.item_offset);
  op.has_item = false;
}

// RTT2: the next candidate item, whole (its length is in the slot).
void ClientCore::get_item_next(Op& op) {
  if (op.next_cand >= op.ncand) {
    op.ncand = 0;
    return get_buckets_done(op);  // every candidate was another key: a miss, to be confirmed
  }
  const Candidate& c = op.cands[op.next_cand];
  const uint64_t bytes = static_cast<uint64_t>(slot_units(c.slot)) * kUnit;
  free_item(op);
  // A slot names memory we are about to READ: one outside the heap is damage
  // (slots are written whole), and a READ there would break the connection for
  // every operation on it. Only this operation fails.
  if (!slot_in_heap(c.slot)) return finish(op, KvStatus::CORRUPT);
  if (bytes < kHeader || bytes > class_bytes(class_for(item_bytes(kMaxKey, region_.max_value))) ||
      !alloc_item(op, bytes)) {
    op.resume = Phase::G_BUCKETS;  // no scratch now, or a slot from the future: read again later
    return retry_later(op);
  }
  BEGIN(op, Phase::G_ITEM);
  add_read(op, op.item_offset, static_cast<uint32_t>(bytes), heap_addr(slot_offset(c.slot)));
  close_phase(op, Phase::G_ITEM);
}

void ClientCore::get_item_done(Op& op) {
  const Candidate& c = op.cands[op.next_cand];
  const uint8_t* item = scratch_->data() + op.item_offset;
  const uint32_t key_len = load_le<uint16_t>(item + u32(ItemHeader::KEY_LEN));
  const uint32_t value_len = load_le<uint32_t>(item + u32(ItemHeader::VALUE_LEN));
  const uint64_t bytes = static_cast<uint64_t>(slot_units(c.slot)) * kUnit;
  const bool intact = item_bytes(key_len, value_len) <= bytes &&
                      load_le<uint64_t>(item + u32(ItemHeader::CHECKSUM)) == item_checksum(item, key_len, value_len);
  const bool late = Clock::now() - op.rtt1 > std::chrono::milliseconds(region_.grace_ms / 2);
  if (!intact || late) {
    // Torn, or a block that may have been freed and reused under us: start over.
    free_item(op);
    if (!intact && ++op.retries > kMaxGetRetries) return finish(op, KvStatus::CORRUPT, op.retries);
    op.confirming = false;
    op.nchecked = 0;
    return get_read_buckets(op, Phase::G_BUCKETS);
  }
  if (key_len != op.key_len || std::memcmp(item + kHeader, op.key, key_len) != 0) {
    op.checked[op.nchecked++] = c.slot;  // same fingerprint, another key
    op.next_cand++;
    return get_item_next(op);
  }
  if (load_le<uint16_t>(item + u32(ItemHeader::TYPE)) != u32(type_for(op.type))) {
    free_item(op);
    return finish(op, KvStatus::TYPE_MISMATCH);
  }
  if (is_atomic_op(op.type)) {
    op.atomic_addr = heap_addr(slot_offset(c.slot)) + kAtomicWord;
    const uint64_t word = load_le<uint64_t>(item + kAtomicWord);
    op.atomic_expect = lock_owner(word) == 0 ? word : lock_word(static_cast<uint32_t>(word >> 32), 0);
    free_item(op);
    cache_store(op);
    return atomic_step(op);
  }
  op.version = load_le<uint64_t>(item + u32(ItemHeader::VERSION));
  OpResult r;
  r.id = op.id;
  r.status = KvStatus::OK;
  r.value_offset = op.item_offset + kHeader + key_len;
  r.value_len = value_len;
  r.version = op.version;
  ready_.push_back(r);
  // The value stays in scratch until JS has copied it: freed at the next poll.
  deferred_frees_.emplace_back(op.item_class, op.item_offset);
  op.has_item = false;
  release_op(op);
}

// ---- PUT and DELETE ------------------------------------------------------------------

// RTT1: the new item into its granted block (PUT, once), and both buckets.
void ClientCore::write_read_buckets(Op& op) {
  if (!op.credit_reserved) {
    if (notify_seq_ + reserved_credits_ >= server_consumed_ + kRingRecords) {
      // Our ring is full as far as we know: read how far the server got.
      BEGIN(op, Phase::W_CREDIT);
      add_read(op, area_offset(op, A_CREDIT), 8, region_.addr + region_.ring_offset);
      return close_phase(op, Phase::W_CREDIT);
    }
    op.credit_reserved = true;
    reserved_credits_++;
  }
  BEGIN(op, Phase::W_READ);
  if (op.has_item && !op.item_written) {
    const uint8_t* item = scratch_->data() + op.item_offset;
    const uint32_t bytes = static_cast<uint32_t>(item_bytes(load_le<uint16_t>(item + u32(ItemHeader::KEY_LEN)),
                                                            load_le<uint32_t>(item + u32(ItemHeader::VALUE_LEN))));
    add_write(op, op.item_offset, bytes, heap_addr(op.block));
    op.item_written = true;
  }
  add_read(op, area_offset(op, A_B1), kBucketBytes, bucket_addr(op.bucket[0]));
  add_read(op, area_offset(op, A_B2), kBucketBytes, bucket_addr(op.bucket[1]));
  close_phase(op, Phase::W_READ);
}

void ClientCore::credit_done(Op& op) {
  server_consumed_ = std::max(server_consumed_, load_le<uint64_t>(area(op, A_CREDIT)));
  if (notify_seq_ + reserved_credits_ >= server_consumed_ + kRingRecords) {
    op.resume = Phase::W_READ;
    return retry_later(op);
  }
  write_read_buckets(op);
}

// RTT2: lock both buckets (lower index first), then read them again behind a
// fence, plus the header and key of every item whose fingerprint matches.
void ClientCore::write_lock(Op& op) {
  const uint8_t* images[2] = {area(op, A_B1), area(op, A_B2)};
  const uint64_t w1 = lock_of(images[0]), w2 = lock_of(images[1]);
  if (lock_owner(w1) != 0 || lock_owner(w2) != 0) {
    op.resume = Phase::W_READ;
    return retry_later(op);
  }
  op.expect[0] = w1;
  op.expect[1] = w2;
  BEGIN(op, Phase::W_LOCK);
  const int first = op.bucket[0] < op.bucket[1] ? 0 : 1;
  for (int k : {first, 1 - first}) {
    add_cas(op, area_offset(op, A_CAS + 8 * k), bucket_addr(op.bucket[k]), op.expect[k],
            lock_word(static_cast<uint32_t>(op.expect[k] >> 32), region_.client_id));
  }
  add_read(op, area_offset(op, A_F1), kBucketBytes, bucket_addr(op.bucket[0]), true);
  add_read(op, area_offset(op, A_F2), kBucketBytes, bucket_addr(op.bucket[1]), true);
  op.ncand_read = 0;
  op.damaged_slot = false;
  for (const uint8_t* image : images) {
    for (uint32_t i = 0; i < kSlots; i++) add_candidate_read(op, slot_at(image, i));
  }
  close_phase(op, Phase::W_LOCK);
}

// Reads the header and key of a same-fingerprint item, to tell whether it is
// our key. Items shorter than our header + key cannot be.
void ClientCore::add_candidate_read(Op& op, uint64_t s) {
  if (s == 0 || slot_fp(s) != op.kh.fp || op.ncand_read >= kMaxCandidates) return;
  if (std::find(op.cand_slot, op.cand_slot + op.ncand_read, s) != op.cand_slot + op.ncand_read) return;
  const uint32_t want = kHeader + op.key_len;
  if (static_cast<uint64_t>(slot_units(s)) * kUnit < want) return;
  if (!slot_in_heap(s)) {
    op.damaged_slot = true;  // maybe our key's: the write fails with KV_CORRUPT (write_decide)
    return;
  }
  add_read(op, area_offset(op, A_CAND + op.ncand_read * kCandStride), want, heap_addr(slot_offset(s)));
  op.cand_slot[op.ncand_read++] = s;
}

void ClientCore::write_locked(Op& op) {
  op.locked[0] = load_le<uint64_t>(area(op, A_CAS)) == op.expect[0];
  op.locked[1] = load_le<uint64_t>(area(op, A_CAS + 8)) == op.expect[1];
  if (!op.locked[0] || !op.locked[1]) return release_and_retry(op);
  // Under the locks, the fenced images are the truth. Any same-fingerprint
  // slot whose item we have not read yet is read now (rare: it appeared
  // between the first read and the lock).
  const size_t before = pending_.size();
  BEGIN(op, Phase::W_VERIFY);
  for (const uint8_t* image : {area(op, A_F1), area(op, A_F2)}) {
    for (uint32_t i = 0; i < kSlots; i++) add_candidate_read(op, slot_at(image, i));
  }
  if (pending_.size() > before) return close_phase(op, Phase::W_VERIFY);
  write_decide(op);
}

void ClientCore::write_decide(Op& op) {
  const uint8_t* images[2] = {area(op, A_F1), area(op, A_F2)};
  op.target_bucket = op.target_index = -1;
  op.old_slot = 0;
  op.seal_add = 0;
  if (op.damaged_slot) {
    op.final_status = KvStatus::CORRUPT;
    return release_and_retry(op);
  }
  for (uint32_t b = 0; b < 2 && op.target_bucket < 0; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      const uint64_t s = slot_at(images[b], i);
      if (s == 0 || slot_fp(s) != op.kh.fp) continue;
      const uint64_t* found = std::find(op.cand_slot, op.cand_slot + op.ncand_read, s);
      if (found == op.cand_slot + op.ncand_read) continue;  // too short to be ours
      const uint8_t* header = area(op, A_CAND + static_cast<size_t>(found - op.cand_slot) * kCandStride);
      if (load_le<uint16_t>(header + u32(ItemHeader::KEY_LEN)) != op.key_len ||
          std::memcmp(header + kHeader, op.key, op.key_len) != 0) {
        continue;
      }
      if (op.type != KvOp::DELETE && load_le<uint16_t>(header + u32(ItemHeader::TYPE)) != u32(type_for(op.type))) {
        op.final_status = KvStatus::TYPE_MISMATCH;
        return release_and_retry(op);
      }
      if (is_atomic_op(op.type)) {
        // Created by someone else meanwhile: use theirs.
        op.atomic_addr = heap_addr(slot_offset(s)) + kAtomicWord;
        const uint64_t word = load_le<uint64_t>(header + kAtomicWord);
        op.atomic_expect = lock_owner(word) == 0 ? word : lock_word(static_cast<uint32_t>(word >> 32), 0);
        op.then_atomic = true;
        return release_and_retry(op);
      }
      if (op.type == KvOp::CAS && load_le<uint64_t>(header + u32(ItemHeader::VERSION)) != op.arg) {
        op.final_status = KvStatus::VERSION_MISMATCH;
        return release_and_retry(op);
      }
      op.target_bucket = static_cast<int>(b);
      op.target_index = static_cast<int>(i);
      op.old_slot = s;
      const uint16_t type = load_le<uint16_t>(header + u32(ItemHeader::TYPE));
      op.seal_add = type == u32(ItemType::COUNTER) ? kCounterSeal : type == u32(ItemType::LOCK) ? kLockSeal : 0;
      break;
    }
  }
  if (op.type == KvOp::DELETE) {
    if (op.target_bucket < 0) {
      op.final_status = KvStatus::NOT_FOUND;
      return release_and_retry(op);
    }
    store_le<uint64_t>(area(op, A_SLOT_NEW), 0);
    return write_commit(op);
  }
  if (op.type == KvOp::CAS && op.target_bucket < 0 && op.arg != 0) {
    op.final_status = KvStatus::VERSION_MISMATCH;  // expected a version; the key is absent
    return release_and_retry(op);
  }
  store_le<uint64_t>(area(op, A_SLOT_NEW), make_slot(op.kh.fp, op.item_units, op.block));
  op.block_published = true;  // once committed
  if (op.target_bucket < 0) {
    // A new key: the emptier of its two buckets.
    const uint32_t n1 = occupancy(images[0]), n2 = occupancy(images[1]);
    const int b = n1 <= n2 ? 0 : 1;
    const int index = empty_index(images[b]);
    if (index < 0) return write_displace(op);
    op.target_bucket = b;
    op.target_index = index;
  }
  write_commit(op);
}

// Both buckets full: move one resident entry to its other bucket. The other
// bucket of an entry follows from its slot (partial-key cuckoo hashing), so
// one doorbell reads every possible destination.
void ClientCore::write_displace(Op& op) {
  const uint8_t* images[2] = {area(op, A_F1), area(op, A_F2)};
  op.nalt = 0;
  BEGIN(op, Phase::W_ALT);
  for (uint32_t b = 0; b < 2; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      const uint32_t alt = alternate_bucket(op.bucket[b], slot_fp(slot_at(images[b], i)), region_.bucket_count);
      if (alt == op.bucket[0] || alt == op.bucket[1]) continue;
      if (std::find(op.alt_list, op.alt_list + op.nalt, alt) != op.alt_list + op.nalt) continue;
      add_read(op, area_offset(op, A_ALT + op.nalt * kBucketBytes), kBucketBytes, bucket_addr(alt));
      op.alt_list[op.nalt++] = alt;
    }
  }
  if (op.nalt == 0) {
    op.final_status = KvStatus::TABLE_FULL;
    return release_and_retry(op);
  }
  close_phase(op, Phase::W_ALT);
}

void ClientCore::write_alt_done(Op& op) {
  const uint8_t* images[2] = {area(op, A_F1), area(op, A_F2)};
  int best = -1;
  uint32_t best_fill = kSlots;
  for (uint32_t b = 0; b < 2; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      const uint64_t s = slot_at(images[b], i);
      const uint32_t alt = alternate_bucket(op.bucket[b], slot_fp(s), region_.bucket_count);
      const uint32_t* at = std::find(op.alt_list, op.alt_list + op.nalt, alt);
      if (at == op.alt_list + op.nalt) continue;
      const uint8_t* image = area(op, A_ALT + static_cast<size_t>(at - op.alt_list) * kBucketBytes);
      const uint32_t fill = occupancy(image);
      if (fill < best_fill && lock_owner(lock_of(image)) == 0) {
        best_fill = fill;
        best = static_cast<int>(at - op.alt_list);
        op.move = {s, static_cast<uint8_t>(b), static_cast<uint8_t>(i)};
        op.expect[2] = lock_of(image);
      }
    }
  }
  if (best < 0) {
    op.final_status = KvStatus::TABLE_FULL;
    return release_and_retry(op);
  }
  op.bucket[2] = op.alt_list[best];
  BEGIN(op, Phase::W_ALT_LOCK);
  add_cas(op, area_offset(op, A_CAS + 16), bucket_addr(op.bucket[2]), op.expect[2],
          lock_word(static_cast<uint32_t>(op.expect[2] >> 32), region_.client_id));
  add_read(op, area_offset(op, A_FALT), kBucketBytes, bucket_addr(op.bucket[2]), true);
  close_phase(op, Phase::W_ALT_LOCK);
}

void ClientCore::write_alt_locked(Op& op) {
  op.locked[2] = load_le<uint64_t>(area(op, A_CAS + 16)) == op.expect[2];
  op.alt_index = op.locked[2] ? empty_index(area(op, A_FALT)) : -1;
  if (op.alt_index < 0) return release_and_retry(op);
  op.moving = true;
  op.target_bucket = op.move.bucket;
  op.target_index = op.move.index;
  store_le<uint64_t>(area(op, A_SLOT_MOVE), op.move.slot);
  write_commit(op);
}

// RTT3: the slot(s), the releases (which clear the owner and bump the
// version), and the notification record with its immediate.
void ClientCore::write_commit(Op& op) {
  BEGIN(op, Phase::W_COMMIT);
  const bool seal = op.type == KvOp::DELETE && op.seal_add != 0;
  if (seal) {
    // Sealed before it is unlinked (the slot WRITE below waits for the atomic: FENCE).
    add_faa(op, area_offset(op, A_ATOM), heap_addr(slot_offset(op.old_slot)) + kAtomicWord, op.seal_add);
  }
  if (op.moving) {
    // The moved entry is written to its new home before its old slot is reused.
    add_write(op, area_offset(op, A_SLOT_MOVE), 8, bucket_addr(op.bucket[2]) + 8 + 8 * op.alt_index);
  }
  add_write(op, area_offset(op, A_SLOT_NEW), 8,
            bucket_addr(op.bucket[op.target_bucket]) + 8 + 8 * static_cast<uint32_t>(op.target_index));
  if (seal) pending_.back().send_flags |= u32(SendFlag::FENCE);
  for (int k = 0; k < 3; k++) {
    if (!op.locked[k]) continue;
    add_faa(op, area_offset(op, A_FAA + 8 * k), bucket_addr(op.bucket[k]), release_addend(region_.client_id));
    op.locked[k] = false;
  }
  uint8_t* record = area(op, A_RECORD);
  std::memset(record, 0, u32(KvLayout::RECORD_BYTES));
  store_le<uint64_t>(record + u32(Record::KIND),
                     u32(op.type == KvOp::DELETE ? RecordKind::DELETE : RecordKind::PUT));
  store_le<uint64_t>(record + u32(Record::NEW_SLOT), load_le<uint64_t>(area(op, A_SLOT_NEW)));
  store_le<uint64_t>(record + u32(Record::OLD_SLOT), op.old_slot);
  const uint64_t seq = notify_seq_++;
  reserved_credits_--;
  op.credit_reserved = false;
  const uint64_t record_addr = region_.addr + region_.ring_offset + u32(KvLayout::RING_HEADER_BYTES) +
                               (seq % kRingRecords) * u32(KvLayout::RECORD_BYTES);
  add_write_imm(op, area_offset(op, A_RECORD), u32(KvLayout::RECORD_BYTES), record_addr, static_cast<uint32_t>(seq));
  close_phase(op, Phase::W_COMMIT);
}

// Gives back every lock taken, then retries after a backoff (or, with a
// final status set, finishes with it).
void ClientCore::release_and_retry(Op& op) {
  const size_t before = pending_.size();
  BEGIN(op, Phase::W_RELEASE);
  for (int k = 0; k < 3; k++) {
    if (!op.locked[k]) continue;
    add_faa(op, area_offset(op, A_FAA + 8 * k), bucket_addr(op.bucket[k]), release_addend(region_.client_id));
    op.locked[k] = false;
  }
  if (pending_.size() > before) return close_phase(op, Phase::W_RELEASE);
  released(op);
}

void ClientCore::released(Op& op) {
  if (op.then_atomic) {
    op.then_atomic = false;
    op.block_published = false;
    free_item(op);
    cache_store(op);
    return atomic_step(op);
  }
  op.block_published = false;
  if (op.final_status != KvStatus::OK) return finish(op, op.final_status);
  op.resume = Phase::W_READ;
  retry_later(op);
}

// ---- INCR, LOCK, UNLOCK ------------------------------------------------------------------

// A missing counter or lock is created like a PUT, its word already holding
// the first result: the delta, or token 1 held by us.
void ClientCore::begin_create(Op& op) {
  const uint64_t bytes = item_bytes(op.key_len, 0);
  if (item_units(bytes) > op.block_units) return finish(op, KvStatus::PROTOCOL);
  if (!op.has_item && !alloc_item(op, bytes)) {
    op.resume = Phase::G_BUCKETS;
    return retry_later(op);
  }
  uint8_t* item = scratch_->data() + op.item_offset;
  op.version = next_version();
  if (op.version == 0) return finish(op, KvStatus::DISCONNECTED);
  build_item(item, type_for(op.type), op.key, op.key_len, nullptr, 0, op.version);
  store_le<uint64_t>(item + kAtomicWord, op.type == KvOp::INCR ? counter_word(op.arg) : lock_word(1, region_.client_id));
  op.item_units = item_units(bytes);
  op.item_written = false;
  write_read_buckets(op);
}

void ClientCore::atomic_step(Op& op) {
  BEGIN(op, Phase::A_ATOMIC);
  const uint32_t token = static_cast<uint32_t>(op.atomic_expect >> 32);
  switch (op.type) {
    case KvOp::INCR:
      add_faa(op, area_offset(op, A_ATOM), op.atomic_addr, counter_word(op.arg));
      break;
    case KvOp::LOCK:
      // Free (token t, owner 0) -> (t + 1, me): the fencing token grows with every acquisition.
      add_cas(op, area_offset(op, A_ATOM), op.atomic_addr, op.atomic_expect, lock_word(token + 1, region_.client_id));
      break;
    default:  // UNLOCK: (t, me) -> (t, 0)
      op.atomic_expect = lock_word(static_cast<uint32_t>(op.arg), region_.client_id);
      add_cas(op, area_offset(op, A_ATOM), op.atomic_addr, op.atomic_expect, lock_word(static_cast<uint32_t>(op.arg), 0));
      break;
  }
  close_phase(op, Phase::A_ATOMIC);
}

void ClientCore::atomic_done(Op& op) {
  const uint64_t original = load_le<uint64_t>(area(op, A_ATOM));
  if (op.type == KvOp::INCR ? counter_sealed(original) : lock_sealed(original)) {
    // A deleted item (reached through a cached address, or read just before its
    // DELETE): the atomic had no effect anyone can observe. Find the key again.
    cache_forget(op);
    if (op.type == KvOp::UNLOCK) return finish(op, KvStatus::VERSION_MISMATCH);  // the lock is gone
    op.resume = Phase::G_BUCKETS;
    return retry_later(op);
  }
  if (op.type == KvOp::INCR) {
    op.result_value = counter_value(original + counter_word(op.arg));
    return finish(op, KvStatus::OK);
  }
  if (op.type == KvOp::UNLOCK) {
    return finish(op, original == op.atomic_expect ? KvStatus::OK : KvStatus::VERSION_MISMATCH);
  }
  if (original == op.atomic_expect) {
    op.result_value = (op.atomic_expect >> 32) + 1;
    cache_store(op);
    return finish(op, KvStatus::OK);
  }
  if (lock_owner(original) == 0) {
    op.atomic_expect = original;  // free, our guess of the token was stale: try again now
    if (++op.retries < 8) return atomic_step(op);
  } else {
    op.atomic_expect = lock_word(static_cast<uint32_t>(original >> 32), 0);  // free as its holder will leave it
  }
  op.resume = Phase::A_ATOMIC;
  retry_later(op);
}

bool ClientCore::cache_lookup(Op& op) {
  if (op.key_len > 64) return false;
  const CacheEntry& e = cache_[hash_bytes(op.key, op.key_len, 1) % cache_.size()];
  if (e.addr == 0 || e.type != type_for(op.type) || e.key_len != op.key_len || std::memcmp(e.key, op.key, op.key_len) != 0) {
    return false;
  }
  if (Clock::now() - e.at >= std::chrono::milliseconds(region_.grace_ms / 2)) return false;
  op.atomic_addr = e.addr;
  op.atomic_expect = lock_word(static_cast<uint32_t>(e.word >> 32), 0);
  return true;
}

void ClientCore::cache_store(const Op& op) {
  if (op.key_len > 64 || op.atomic_addr == 0) return;
  CacheEntry& e = cache_[hash_bytes(op.key, op.key_len, 1) % cache_.size()];
  e.addr = op.atomic_addr;
  e.word = op.type == KvOp::LOCK ? lock_word(static_cast<uint32_t>(op.result_value ? op.result_value : op.atomic_expect >> 32), 0) : 0;
  e.at = Clock::now();
  e.type = type_for(op.type);
  e.key_len = static_cast<uint16_t>(op.key_len);
  std::memcpy(e.key, op.key, op.key_len);
}

void ClientCore::cache_forget(const Op& op) {
  if (op.key_len > 64) return;
  CacheEntry& e = cache_[hash_bytes(op.key, op.key_len, 1) % cache_.size()];
  if (e.key_len == op.key_len && std::memcmp(e.key, op.key, op.key_len) == 0) e.addr = 0;
}

// ---- common ----------------------------------------------------------------------------

void ClientCore::retry_later(Op& op) {
  op.retries++;
  if (Clock::now() > op.deadline) {
    return finish(op, op.type == KvOp::GET ? KvStatus::TIMEOUT : KvStatus::LOCK_CONTENDED, op.retries);
  }
  // Randomized exponential backoff, 1 µs to 1 ms.
  const uint32_t cap = 1u << std::min<uint32_t>(op.retries, 10);
  op.backoff_until = Clock::now() + std::chrono::microseconds(1 + rng_() % cap);
  op.phase = Phase::BACKOFF;
  backoff_.push_back(op.index);
}

void ClientCore::resume(Op& op) {
  switch (op.resume) {
    case Phase::G_BUCKETS:
      op.confirming = false;
      op.nchecked = 0;
      return get_read_buckets(op, Phase::G_BUCKETS);
    case Phase::G_CONFIRM:
      return get_read_buckets(op, Phase::G_CONFIRM);
    case Phase::A_ATOMIC:
      return atomic_step(op);
    default:
      op.moving = false;
      return write_read_buckets(op);
  }
}

void ClientCore::phase_done(Op& op) {
  switch (op.phase) {
    case Phase::G_BUCKETS:
    case Phase::G_CONFIRM: return get_buckets_done(op);
    case Phase::G_ITEM: return get_item_done(op);
    case Phase::W_CREDIT: return credit_done(op);
    case Phase::W_READ: return write_lock(op);
    case Phase::W_LOCK: return write_locked(op);
    case Phase::W_VERIFY: return write_decide(op);
    case Phase::W_ALT: return write_alt_done(op);
    case Phase::W_ALT_LOCK: return write_alt_locked(op);
    case Phase::W_COMMIT:
      if (is_atomic_op(op.type)) {
        // Created with the first result in its word: the counter holds the delta, the lock token 1.
        op.atomic_addr = heap_addr(op.block) + kAtomicWord;
        op.result_value = op.type == KvOp::INCR ? counter_value(counter_word(op.arg)) : 1;
        cache_store(op);
      }
      return finish(op, KvStatus::OK);
    case Phase::A_ATOMIC: return atomic_done(op);
    case Phase::W_RELEASE: return released(op);
    default: return;
  }
}

void ClientCore::finish(Op& op, KvStatus status, uint32_t detail) {
  OpResult r;
  r.id = op.id;
  r.status = status;
  // Errors other than RDMA_ERROR carry their retry count already; successes
  // carry it too, so clients can count retries (bucket locks busy, torn reads).
  r.detail = status == KvStatus::OK || status == KvStatus::NOT_FOUND || status == KvStatus::VERSION_MISMATCH ? op.retries : detail;
  r.version = status != KvStatus::OK ? 0 : is_atomic_op(op.type) ? op.result_value : op.version;
  r.block_unused = op.has_block && !(status == KvStatus::OK && op.block_published);
  if (op.type == KvOp::DELETE || status == KvStatus::TYPE_MISMATCH) cache_forget(op);
  ready_.push_back(r);
  free_item(op);
  release_op(op);
}

void ClientCore::release_op(Op& op) {
  if (op.credit_reserved) reserved_credits_--;
  op.credit_reserved = false;
  op.busy = false;
  op.phase = Phase::IDLE;
  op.seq++;  // late completions of this op's requests are ignored
  free_ops_.push_back(op.index);
  busy_--;
}

void ClientCore::fail_all(KvStatus status, uint32_t detail) {
  for (Op& op : ops_) {
    if (op.busy) finish(op, status, detail);
  }
  backoff_.clear();
}

// ---- JS-facing calls ---------------------------------------------------------------------

size_t ClientCore::submit(const OpDesc* descs, size_t count) {
  size_t taken = 0;
  const auto now = Clock::now();
  for (; taken < count; taken++) {
    const OpDesc& d = descs[taken];
    if (free_ops_.empty()) break;
    Op& op = ops_[free_ops_.back()];
    const bool writes_item = d.type == KvOp::PUT || d.type == KvOp::CAS;
    if (writes_item && d.key_len <= kMaxKey && d.value_len <= region_.max_value &&
        !alloc_item(op, item_bytes(d.key_len, d.value_len))) {
      break;  // no scratch for the item now: the caller keeps this op
    }
    free_ops_.pop_back();
    busy_++;
    op.busy = true;
    op.type = d.type;
    op.id = d.id;
    op.retries = 0;
    op.deadline = now + std::chrono::milliseconds(op_timeout_ms_);
    op.confirming = false;
    op.nchecked = 0;
    op.item_written = false;
    op.moving = false;
    op.final_status = KvStatus::OK;
    op.locked[0] = op.locked[1] = op.locked[2] = false;
    op.arg = d.arg;
    op.then_atomic = false;
    op.block_published = false;
    op.has_block = d.type == KvOp::PUT || d.type == KvOp::CAS || d.type == KvOp::INCR || d.type == KvOp::LOCK;
    op.block = d.block;
    op.block_units = d.block_units;
    if (d.type == KvOp::LOCK && d.arg > 0) op.deadline = now + std::chrono::milliseconds(d.arg);
    if (d.key_len > kMaxKey) {
      finish(op, KvStatus::KEY_TOO_LARGE);
      continue;
    }
    if (d.value_len > region_.max_value) {
      finish(op, KvStatus::VALUE_TOO_LARGE);
      continue;
    }
    if (broken_) {
      finish(op, KvStatus::DISCONNECTED, broken_detail_);
      continue;
    }
    op.key_len = d.key_len;
    std::memcpy(op.key, d.key, d.key_len);
    op.kh = hash_key(op.key, op.key_len, region_.seed, region_.bucket_count);
    op.bucket[0] = op.kh.b1;
    op.bucket[1] = op.kh.b2;
    if (op.has_block && (static_cast<uint64_t>(d.block) + d.block_units) * kUnit > region_.heap_bytes) {
      finish(op, KvStatus::PROTOCOL);  // a block outside the heap
      continue;
    }
    if (d.type == KvOp::GET) {
      get_read_buckets(op, Phase::G_BUCKETS);
    } else if (is_atomic_op(d.type)) {
      if (cache_lookup(op)) {
        atomic_step(op);
      } else {
        get_read_buckets(op, Phase::G_BUCKETS);
      }
    } else if (d.type == KvOp::PUT || d.type == KvOp::DELETE || d.type == KvOp::CAS) {
      if (writes_item) {
        const uint64_t bytes = item_bytes(d.key_len, d.value_len);
        if (item_units(bytes) > d.block_units) {
          finish(op, KvStatus::PROTOCOL);  // the caller's block does not hold this item
          continue;
        }
        op.item_units = item_units(bytes);
        op.version = next_version();
        if (op.version == 0) {
          finish(op, KvStatus::DISCONNECTED);
          continue;
        }
        build_item(scratch_->data() + op.item_offset, ItemType::BYTES, op.key, op.key_len, d.value, d.value_len,
                   op.version);
      }
      write_read_buckets(op);
    } else {
      finish(op, KvStatus::PROTOCOL);
    }
  }
  flush();
  return taken;
}

size_t ClientCore::poll(OpResult* out, size_t max) {
  // Values handed out by the previous poll have been copied by now.
  for (auto& [c, offset] : deferred_frees_) free_items_[c].push_back(offset);
  deferred_frees_.clear();

  if (!broken_ && connection_->state() != ConnState::CONNECTED) {
    broken_ = true;
    fail_all(KvStatus::DISCONNECTED, 0);
  }
  const int n = cq_->poll(completions_.data(), static_cast<int>(completions_.size()));
  for (int i = 0; i < n; i++) {
    const Completion& c = completions_[i];
    if (c.wr_id & kControlTag) {
      OpResult r;
      r.id = kControlResultId;
      r.status = static_cast<KvStatus>(u32(c.status));
      r.value_offset = c.wr_id & ~kControlTag;
      r.value_len = c.byte_len;
      r.detail = u32(c.opcode);
      ready_.push_back(r);
      continue;
    }
    if (c.status != WcStatus::SUCCESS) {
      if (!broken_) {
        broken_ = true;
        broken_detail_ = u32(c.status);
        fail_all(c.status == WcStatus::WR_FLUSH_ERR ? KvStatus::DISCONNECTED : KvStatus::RDMA_ERROR, u32(c.status));
      }
      continue;
    }
    const uint32_t index = static_cast<uint32_t>(c.wr_id >> 8);
    if (index >= ops_.size()) continue;
    Op& op = ops_[index];
    if (!op.busy || op.seq != static_cast<uint8_t>(c.wr_id)) continue;  // a finished op's late completion
    phase_done(op);
  }
  // Backoffs that are due go again.
  if (!backoff_.empty()) {
    const auto now = Clock::now();
    std::vector<uint32_t> due;
    for (size_t i = 0; i < backoff_.size();) {
      Op& op = ops_[backoff_[i]];
      if (op.phase != Phase::BACKOFF) {
        backoff_[i] = backoff_.back();
        backoff_.pop_back();
      } else if (now >= op.backoff_until) {
        due.push_back(backoff_[i]);
        backoff_[i] = backoff_.back();
        backoff_.pop_back();
      } else {
        i++;
      }
    }
    for (uint32_t index : due) resume(ops_[index]);
  }
  flush();
  const size_t count = std::min(max, ready_.size());
  std::copy(ready_.begin(), ready_.begin() + static_cast<long>(count), out);
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<long>(count));
  return count;
}

}  // namespace rkv::kv
