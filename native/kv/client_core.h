// The client's data path: GET, PUT and DELETE as state machines driven
// entirely in native code. JS submits a batch of operations and, per poll,
// receives one result per finished operation; every RDMA round trip in
// between is posted and completed here, one doorbell per pass.
//
// Ownership: the core owns its scratch memory (bucket images, item buffers,
// atomics results) and the op slots. A GET's value stays in scratch until the
// next poll() or submit(), so JS must copy it out before calling either again.
// The connection and its CQ are shared with JS, which posts control SENDs and
// receives control messages on them (wr_id bit 63 marks control requests).
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../transport/transport.h"
#include "layout.h"

namespace rkv::kv {

using Clock = std::chrono::steady_clock;

// What the hello told the client about the server's region.
struct RegionInfo {
  uint64_t addr = 0;  // the server's address of the region's first byte
  uint32_t rkey = 0;
  uint64_t length = 0;
  uint32_t bucket_count = 0;
  uint64_t index_offset = 0;
  uint64_t heap_offset = 0;
  uint64_t heap_bytes = 0;
  uint64_t seed = 0;
  uint64_t ring_offset = 0;  // this client's ring: header then records
  uint32_t client_id = 0;     // the lock owner id: unique among connected clients
  uint64_t version_base = 0;  // session << SESSION_VERSION_BITS: unique for the region's life
  uint32_t max_value = 0;
  uint32_t grace_ms = 1000;
};

struct OpDesc {
  KvOp type;
  uint32_t id;
  const uint8_t* key;
  uint32_t key_len;
  const uint8_t* value;
  uint32_t value_len;
  uint32_t block;        // PUT, CAS, INCR, LOCK: granted heap block, in units from the heap's start
  uint32_t block_units;  // its size, in units
  uint64_t arg;          // CAS: expected version (0: only if absent); INCR: delta; LOCK: timeout ms; UNLOCK: token
};

struct OpResult {
  uint32_t id = 0;
  KvStatus status = KvStatus::OK;
  uint64_t value_offset = 0;  // in scratch()
  uint32_t value_len = 0;
  uint64_t version = 0;       // GET, PUT, CAS: the item's version; INCR: the new value; LOCK: the token
  uint32_t detail = 0;        // RDMA_ERROR: the WcStatus; retries otherwise
  bool block_unused = false;  // a PUT that did not publish its block
};

// Control completions (not a data op's) handed back to JS.
constexpr uint64_t kControlTag = 1ull << u32(KvLayout::CONTROL_TAG_SHIFT);
constexpr uint32_t kControlResultId = 0xffffffffu;

class ClientCore {
 public:
  static std::unique_ptr<ClientCore> create(std::shared_ptr<transport::Provider> provider,
                                            std::shared_ptr<transport::Connection> connection,
                                            std::shared_ptr<transport::CompletionQueue> cq, const RegionInfo& region,
                                            size_t scratch_bytes, uint32_t op_timeout_ms, std::string* error);
  ~ClientCore();

  // Accepts ops while slots and scratch last; returns how many were taken
  // (the rest stay with the caller). Posts the first round trip of each.
  size_t submit(const OpDesc* ops, size_t count);
  // Polls completions, advances state machines, posts the next round trips
  // with one doorbell, and returns finished ops (and control completions).
  size_t poll(OpResult* out, size_t max);
  // Finishes every op with `status` (close, or a broken connection).
  void fail_all(KvStatus status, uint32_t detail);

  size_t inflight() const { return busy_; }
  // post_send calls so far: one per batch phase, whatever the batch's size.
  uint64_t doorbells() const { return doorbells_; }
  uint8_t* scratch() const { return scratch_->data(); }
  size_t scratch_length() const { return scratch_->length(); }

 private:
  enum class Phase : uint8_t {
    IDLE, G_BUCKETS, G_CONFIRM, G_ITEM,  // GET
    W_READ, W_LOCK, W_VERIFY, W_ALT, W_ALT_LOCK, W_CREDIT, W_COMMIT, W_RELEASE,  // PUT, DELETE, CAS, creation
    A_ATOMIC,  // INCR, LOCK, UNLOCK: one atomic on the item's word
    BACKOFF,
  };
  struct Candidate {
    uint64_t slot;
    uint8_t bucket;  // 0 = b1, 1 = b2
    uint8_t index;   // slot index 0..6 within the bucket
  };
  struct Op;

  ClientCore() = default;
  uint8_t* area(const Op& op, size_t offset) const;
  uint64_t area_offset(const Op& op, size_t offset) const;
  uint64_t bucket_addr(uint32_t bucket) const;
  uint64_t heap_addr(uint32_t units) const;
  bool slot_in_heap(uint64_t slot) const;  // its item lies inside the heap

  // Posting helpers: append to the pending list; flush() posts it once.
  void add_read(Op& op, uint64_t local_offset, uint32_t length, uint64_t remote, bool fence = false);
  void add_write(Op& op, uint64_t local_offset, uint32_t length, uint64_t remote);
  void add_cas(Op& op, uint64_t result_offset, uint64_t remote, uint64_t expect, uint64_t swap);
  void add_faa(Op& op, uint64_t result_offset, uint64_t remote, uint64_t add);
  void add_write_imm(Op& op, uint64_t local_offset, uint32_t length, uint64_t remote, uint32_t imm);
  void close_phase(Op& op, Phase next);  // signals the phase's last request
  void flush();

  // State machines.
  void start(Op& op);
  void get_read_buckets(Op& op, Phase phase);
  void get_buckets_done(Op& op);
  void get_item_next(Op& op);
  void get_item_done(Op& op);
  void write_read_buckets(Op& op);
  void write_lock(Op& op);
  void write_locked(Op& op);
  void write_decide(Op& op);
  void write_alt_done(Op& op);
  void write_alt_locked(Op& op);
  void write_commit(Op& op);
  void add_candidate_read(Op& op, uint64_t slot);
  void write_displace(Op& op);
  void credit_done(Op& op);
  void release_and_retry(Op& op);
  void released(Op& op);
  void finish(Op& op, KvStatus status, uint32_t detail = 0);
  void release_op(Op& op);
  void retry_later(Op& op);
  void resume(Op& op);
  void phase_done(Op& op);
  void begin_create(Op& op);
  void atomic_step(Op& op);
  void atomic_done(Op& op);
  bool cache_lookup(Op& op);
  void cache_store(const Op& op);
  void cache_forget(const Op& op);
  uint64_t next_version();
  bool alloc_item(Op& op, uint64_t bytes);
  void free_item(Op& op);

  std::shared_ptr<transport::Provider> provider_;  // destroyed last
  std::shared_ptr<transport::Connection> connection_;
  std::shared_ptr<transport::CompletionQueue> cq_;
  std::unique_ptr<transport::Memory> scratch_;
  std::unique_ptr<transport::MemoryRegion> mr_;
  RegionInfo region_;
  uint32_t op_timeout_ms_ = 5000;
  uint32_t max_inline_ = 0;

  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;
  size_t busy_ = 0;
  uint64_t doorbells_ = 0;
  size_t item_base_ = 0;  // scratch offset where item buffers start
  // Item buffers by size class: free lists and a bump pointer.
  std::vector<std::vector<uint64_t>> free_items_;
  uint64_t item_bump_ = 0;
  std::vector<std::pair<uint32_t, uint64_t>> deferred_frees_;  // (class, offset) of returned GET values

  std::vector<transport::WorkRequest> pending_;
  std::vector<transport::Completion> completions_;
  std::vector<OpResult> ready_;  // finished, waiting for poll() to hand them out
  std::vector<uint32_t> backoff_;
  uint64_t version_seq_ = 0;
  uint64_t notify_seq_ = 0;       // records written to our ring
  uint64_t reserved_credits_ = 0; // ring records promised to ops in flight
  uint64_t server_consumed_ = 0;  // records the server has taken (last seen)
  bool broken_ = false;
  uint32_t broken_detail_ = 0;
  std::minstd_rand rng_;

  // Addresses of counter and lock items, so INCR and LOCK take one atomic.
  // Trusted for half the grace period only: a block is not reused within the
  // grace period of its retirement. Short keys only; direct-mapped.
  struct CacheEntry {
    uint64_t addr = 0;
    uint64_t word = 0;  // last lock word seen (LOCK's first guess)
    Clock::time_point at;
    uint16_t key_len = 0;
    ItemType type = ItemType::BYTES;  // a counter's address serves INCR only, a lock's LOCK and UNLOCK only
    uint8_t key[64];
  };
  std::vector<CacheEntry> cache_ = std::vector<CacheEntry>(1024);
};

}  // namespace rkv::kv
