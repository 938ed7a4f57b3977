// The client's data path: GET, PUT, DELETE, CAS, INCR, LOCK and UNLOCK as
// state machines driven entirely in native code. JS submits a batch of
// operations and, per poll, receives one result per finished operation;
// every RDMA round trip in between is posted and completed here, one
// doorbell per pass.
//
// The files: client_core.cc (the ops, poll, backoff, close), submit.cc (ops
// in from JS), get.cc (GET's round trips, and the lookup atomics start with),
// write.cc (PUT, DELETE, CAS and creation under the bucket locks),
// atomics.{h,cc} (INCR, LOCK, UNLOCK on an item's word; the address cache),
// location_cache.{h,cc} (GET in one READ where the client knows the item),
// buffer_pool.{h,cc} (item buffers), posting.{h,cc} (the send list), op.h
// (per-operation state).
//
// Connections: one core drives up to kMaxConnections connections of one
// provider (a cluster's members), all completing on its one CQ. Each op names
// the connection it runs on (OpDesc::connection); what belongs to a server's
// region (its rkey and layout, our ring there, the session's versions, the
// address and location caches) and the requests waiting for its doorbell are
// the connection's (Link); ops, scratch, item buffers and the CQ are shared.
// A pass posts one doorbell per connection that has requests.
//
// Ownership: the core owns its scratch memory (bucket images, item buffers,
// atomics results) and its ops (64, made once). A GET's value stays in scratch until the
// next poll() or submit(), so JS must copy it out before calling either again. The
// connections and the CQ are shared with JS, which posts control SENDs and
// receives control messages on them (the wr_id bit KvLayout::CONTROL_TAG_SHIFT
// marks control requests; their completions go back to JS as they came, and
// JS tells by their wr_id which connection each is for).
// Scratch is freed only once the NIC or provider can no longer write it:
// close() waits for that, and the destructor closes.
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../transport/transport.h"
#include "atomics.h"
#include "buffer_pool.h"
#include "layout.h"
#include "location_cache.h"
#include "posting.h"

namespace rkv::kv {

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
  // The access table (kv-server --eviction lru|lfu): a byte per heap unit, 0 = none.
  // A GET WRITEs 1 into its item's byte (access.cc); the server reads and clears them.
  uint64_t access_offset = 0;
  // The epoch table (region format 5): a word per hash slot that a write READs,
  // fenced, with its lock CASes (write.cc). 0: none (format 3 or 4, or a read client).
  uint64_t epoch_offset = 0;
};

// One operation as JS submits it. Key and value point into the caller's
// arena and are copied during submit().
struct OpDesc {
  KvOp type;
  uint32_t id;
  uint32_t connection = 0;  // the core's index of the connection it runs on
  const uint8_t* key;
  uint32_t key_len;
  const uint8_t* value;
  uint32_t value_len;
  uint32_t block;        // PUT, CAS, INCR, LOCK: granted heap block, in units from the heap's start
  uint32_t block_units;  // its size, in units
  // The one argument of the op's type (OpLayout's words of the same names).
  union {
    uint64_t expected_version = 0;  // CAS: the version to replace (0: only if absent)
    uint64_t delta;                 // INCR: added to the counter
    uint32_t lock_timeout_ms;       // LOCK: how long to wait for the lock (0: the op timeout)
    uint32_t token;                 // UNLOCK: the fencing token LOCK returned
  };
  // A registered buffer of the caller's for a large value (ext_lkey 0: none):
  // GET reads the value straight into ext (up to ext_len bytes); PUT and CAS
  // write it from there (value and value_len then point at it). ext_bad: the
  // op named a buffer that is gone (it fails with BAD_BUFFER).
  uint8_t* ext = nullptr;
  uint32_t ext_len = 0;
  uint32_t ext_lkey = 0;
  bool ext_bad = false;
  uint64_t expiry = 0;  // PUT, CAS: the new item's EXPIRY (absolute Unix ms, 0 = never)
  uint32_t epoch = 0;   // writes: the hash slot's epoch in the writer's configuration (0: none, any OPEN word)
  uint32_t lock_floor = 0;  // LOCK: its token is set above this one (0: none)
  bool keep_version = false;  // CAS: the new item keeps expected_version (OpFlag::KEEP_VERSION)
  // PUT, DELETE, CAS on a replicated hash slot: the backups it also writes,
  // each on its connection with the block that backup granted (op.h, GroupState).
  uint32_t backups = 0;
  struct Backup {
    uint32_t connection = 0;
    uint32_t block = 0;
    uint32_t block_units = 0;
  } backup[u32(OpLayout::MAX_BACKUPS)];
};

struct OpResult {
  uint32_t id = 0;
  KvStatus status = KvStatus::OK;
  uint64_t value_offset = 0;  // in scratch()
  uint32_t value_len = 0;
  uint64_t version = 0;       // GET, PUT, CAS: the item's version; INCR: the new value; LOCK: the token
  uint32_t detail = 0;        // RDMA_ERROR: the WcStatus; retries otherwise
  bool block_unused = false;  // a PUT that did not publish its block
  uint64_t expiry = 0;        // a GET that found the key: its item's EXPIRY (0 = never)
  uint32_t backup_blocks_unused = 0;  // a replicated write: bit i, backup i's block was not published
};

// The wr_id bit of JS's control requests (the SENDs and RECVs of control
// messages); the core's own requests never have it.
constexpr uint64_t kControlTag = 1ull << u32(KvLayout::CONTROL_TAG_SHIFT);

// Where a replicated write's member stopped (op.h, GroupState).
enum class GroupVote : uint8_t { RUNNING, HELD, RETRY, DONE };

class ClientCore {
 public:
  static constexpr uint32_t kCloseWaitMs = 2000;
  static constexpr size_t kDefaultLocationEntries = u32(KvLayout::DEFAULT_LOCATION_CACHE_ENTRIES);
  static constexpr uint32_t kMaxConnections = u32(KvLayout::MAX_CORE_CONNECTIONS);

  // A core with `connection` as its connection 0.
  static std::unique_ptr<ClientCore> create(std::shared_ptr<transport::Provider> provider,
                                            std::shared_ptr<transport::Connection> connection,
                                            std::shared_ptr<transport::CompletionQueue> cq, const RegionInfo& region,
                                            size_t scratch_bytes, uint32_t op_timeout_ms, std::string* error,
                                            size_t location_entries = kDefaultLocationEntries);
  // Closes (if not yet closed), then frees scratch unless the NIC might still write it.
  ~ClientCore();

  // Another connection of the core's provider whose requests complete on the
  // core's CQ. Returns its index (the lowest free one), or -1 with `error`
  // (too many, a region the core cannot serve, the core closed).
  int add_connection(std::shared_ptr<transport::Connection> connection, const RegionInfo& region, std::string* error);
  // Ends one connection as close() ends them all: its ops fail with
  // DISCONNECTED and it waits (up to wait_ms) until its requests are done;
  // then its index is free again. Returns whether they are all done (false:
  // the index stays taken, and close() waits for them again).
  bool close_connection(uint32_t connection, uint32_t wait_ms = kCloseWaitMs);

  // Accepts ops while free ops and scratch last; returns how many were taken
  // (the rest stay with the caller). Posts the first round trip of each, then
  // runs advance(): where completions are synchronous (shm) the ops finish
  // here, and their results wait for take_results(). Values handed out
  // before are given back (JS copied them).
  size_t submit(const OpDesc* ops, size_t count);
  // advance(), then hands out finished ops (take_results). Control
  // completions it drained wait for take_controls().
  size_t poll(OpResult* out, size_t max);
  // Finished ops' results, up to max; a GET's value stays in scratch until
  // the next submit() or poll().
  size_t take_results(OpResult* out, size_t max) { return hand_out(out, max); }
  // Event mode: the core re-arms the CQ itself at the end of every submit()
  // and poll(), after draining it, and submit() disarms it before posting, so
  // completions that arrive inside the post (shm) wake no thread.
  void set_arm_when_done(bool on) { arm_when_done_ = on; }
  // The completions of JS's control requests drained since the last call, as
  // the CQ gave them (up to max; the rest wait for the next call).
  size_t take_controls(transport::Completion* out, size_t max);
  // Finishes every op with `status` and drops their requests not yet posted.
  void fail_all(KvStatus status, uint32_t detail);
  // The same for the ops of one connection (it was lost).
  void fail_connection(uint32_t connection, KvStatus status, uint32_t detail);
  // Fails every op in flight with DISCONNECTED and waits (up to wait_ms)
  // until every request the core posted has completed or been flushed, so
  // scratch can be freed. After half the wait it disconnects the connections,
  // which flushes whatever a silent peer still holds. Later submits fail with
  // DISCONNECTED; poll() still hands out the results. Idempotent. Returns
  // whether the requests are all done.
  bool close(uint32_t wait_ms = kCloseWaitMs);

  size_t inflight() const { return busy_; }
  // post_send calls so far, over every connection.
  uint64_t doorbells() const;
  uint32_t connections() const;  // connections in use
  // Ops waiting out a backoff: nothing of theirs is posted, so no completion
  // wakes an event-mode client for them (its op queue polls again on a timer).
  uint32_t backoffs() const { return backoffs_; }
  // The location caches' counts, summed over the connections.
  LocationCache::Stats location_stats() const;
  uint8_t* scratch() const { return scratch_->data(); }
  // The largest item of a connection's server the buffer pool holds (0: no
  // such connection): larger ones move only through a
  // registered buffer of the caller's (OpDesc::ext); without one a GET answers
  // BUFFER_TOO_SMALL with the value's length, a PUT is refused so.
  uint64_t item_limit(uint32_t connection = 0) const {
    const Link* l = link_at(connection);
    return l ? l->item_limit : 0;
  }
  // A replica's read lease (docs/replication-design.md §4.4): a GET's answer
  // from this connection counts only if it is handed over before `ms` from
  // now (negative: already over); later it ends READ_LEASE_LAPSED, and JS
  // runs it again once the lease is renewed or the key has moved. So does an
  // INCR's answer (its primary's word), but an INCR so ended may have added.
  // Connections whose server grants no leases (not replicated) are never limited.
  void permit_reads(uint32_t connection, int64_t ms);
  size_t scratch_length() const { return scratch_->length(); }

 private:
  struct Op;
  enum class Phase : uint8_t;
  // A finished op's result, and the item buffer its value is in (a GET's), lent to JS.
  struct Ready {
    OpResult result;
    BufferPool::Buffer lent;
  };
  // Our notification ring: records written, promised to ops in flight, and
  // taken by the server (as last read).
  struct RingCredits {
    uint64_t written = 0;
    uint64_t reserved = 0;
    uint64_t consumed = 0;
  };

  // One connection and what the core keeps of the server behind it.
  struct Link {
    std::shared_ptr<transport::Connection> connection;
    RegionInfo region;
    SendList sends;           // its requests waiting for its doorbell
    RingCredits ring;
    uint64_t version_seq = 0;
    uint64_t item_limit = 0;  // item_limit() for this server's items
    bool broken = false;      // lost: its submits fail at once
    Clock::time_point reads_until = Clock::time_point::max();  // permit_reads()
    uint32_t broken_detail = 0;
    AddressCache cache;
    LocationCache locations;
  };

  ClientCore() = default;
  uint8_t* mem(uint64_t scratch_offset) const { return scratch_->data() + scratch_offset; }
  Link& link(const Op& op) const;
  Link* link_at(uint32_t connection) const {
    return connection < kMaxConnections ? links_[connection].get() : nullptr;
  }
  uint64_t bucket_addr(const Op& op, uint32_t bucket) const;
  uint64_t heap_addr(const Op& op, uint32_t units) const;
  bool slot_in_heap(const Op& op, uint64_t slot) const;  // its item lies inside the heap
  uint64_t largest_item(const Op& op) const;             // the largest buffer an item can need
  static uint64_t largest_item(const RegionInfo& region);
  // Waits, up to wait_ms, until every request posted on `only` (null: on
  // every connection) has completed or been flushed, posting what waits and
  // draining the CQ; after half the wait it disconnects those connections.
  bool quiesce(Link* only, uint32_t wait_ms);
  bool drained(const Link* only) const;

  // Submit's steps (submit.cc).
  Op* claim(const OpDesc& d);
  void adopt(Op& op, const OpDesc& d, Clock::time_point now);
  void prefetch_locations(const OpDesc* descs, size_t count);
  KvStatus refusal(const Op& op, const OpDesc& d) const;
  void start(Op& op, const OpDesc& d);
  // Poll's steps.
  void advance();
  void settle();
  int drain_completions(int budget);
  void run_due_backoffs();
  size_t hand_out(OpResult* out, size_t max);
  bool post_sends();
  // Every op's end.
  void phase_done(Op& op);
  void retry_later(Op& op, Phase resume);
  void backoff(Op& op, Phase resume);
  void resume(Op& op);
  // An op's end: a grouped op's goes through its group (group_end), the rest answer (complete).
  void finish(Op& op, KvStatus status, uint32_t detail = 0);
  // A GET's or INCR's answer came after its connection's read lease ended
  // (permit_reads). Every path that hands a GET's answer over checks it:
  // finish(), lend_value() and answer_large() (values in the caller's buffer).
  bool reads_lapsed(const Op& op) const;
  void complete(Op& op, KvStatus status, uint32_t detail);
  void release_op(Op& op);
  uint64_t next_version(Op& op);
  bool take_item(Op& op, uint64_t bytes);
  void free_item(Op& op);

  // GET (get.cc).
  void get_read_buckets(Op& op, Phase phase);
  void get_buckets_done(Op& op);
  void get_item_next(Op& op);
  // access.cc: marks the item at `block` (units) read, in the same doorbell as its READ.
  void note_access(Op& op, uint32_t block);
  void get_item_done(Op& op);
  void lend_value(Op& op, uint32_t key_len, uint32_t value_len);
  void found_expired(Op& op);
  // GET of an item read in two pieces: header and key into the op's area, the
  // value straight into the caller's registered buffer (large.cc).
  void get_large_next(Op& op, uint64_t slot);
  void get_large_done(Op& op);
  void get_large_live(Op& op);
  void answer_large(Op& op, const uint8_t* head, uint32_t value_len);
  // GET on a location-cache hit, and what ops teach the cache (location_cache.cc).
  static constexpr uint32_t kSkipVersion = 1, kSkipState = 2;  // test hook: checks a hit skips
  static uint32_t unchecked_locations_from_env();
  std::chrono::milliseconds location_trust(const Op& op) const;
  const LocationCache::Entry* cached_location(Op& op, uint64_t least_bytes);
  bool cached_item_current(uint64_t cached_version, const uint8_t* head) const;
  void cached_location_failed(Op& op);
  bool get_cached(Op& op);
  void get_cached_done(Op& op);
  bool get_cached_into(Op& op);
  void get_cached_into_done(Op& op);
  void location_found(const Op& op, uint64_t slot, const uint8_t* item);
  void location_after(Op& op, KvStatus status);
  // PUT, DELETE, CAS, creation (write.cc).
  void write_read_buckets(Op& op);
  void credit_done(Op& op);
  void write_lock(Op& op);
  void add_candidate_read(Op& op, uint64_t slot);
  void write_locked(Op& op);
  void write_decide(Op& op);
  void write_displace(Op& op);
  void write_alt_done(Op& op);
  void write_alt_locked(Op& op);
  void write_commit(Op& op);
  void add_releases(Op& op);
  void release_and_retry(Op& op);
  void release_and_finish(Op& op, KvStatus status, uint32_t detail = 0);
  void released(Op& op);
  // Replicated writes: a leader and its followers (replicated.cc).
  KvStatus backup_refusal(const OpDesc& d) const;
  void attach_followers(Op& leader, const OpDesc& d);
  void start_followers(Op& leader);
  bool has_followers(const Op& leader) const;
  void group_stop(Op& op, GroupVote vote, KvStatus status = KvStatus::OK, uint32_t detail = 0);
  void group_end(Op& op, KvStatus status, uint32_t detail);
  void end_follower(Op& follower, KvStatus status, uint32_t detail, bool committed);
  void group_decide(Op& leader);
  void group_restart(Op& leader);
  void restart_member(Op& op);
  void group_go(Op& op);
  void abandon(Op& follower);
  void lock_undo(Op& follower);
  // INCR, LOCK, UNLOCK (atomics.cc).
  void begin_create(Op& op);
  void atomic_step(Op& op);
  void atomic_done(Op& op);
  void created(Op& op);
  void lock_taken(Op& op, uint64_t from);
  bool epoch_checked(const Op& op) const;
  void atomic_off_epoch(Op& op, uint64_t original, uint64_t word);
  void off_epoch_undone(Op& op, KvStatus status, uint32_t epoch);
  uint32_t next_lock_token(const Op& op) const;
  bool cache_lookup(Op& op);
  void cache_store(Op& op);
  void cache_forget(const Op& op);

  std::shared_ptr<transport::Provider> provider_;  // destroyed last
  std::shared_ptr<transport::CompletionQueue> cq_;
  std::unique_ptr<transport::Memory> scratch_;
  std::unique_ptr<transport::MemoryRegion> mr_;
  std::unique_ptr<std::unique_ptr<Link>[]> links_;  // by index; null: free
  uint32_t link_end_ = 0;  // one past the highest index in use: the passes look no further
  struct {
    uint64_t doorbells = 0;
    LocationCache::Stats locations;
  } closed_counts_;  // of the connections closed so far
  uint32_t op_timeout_ms_ = 5000;
  size_t location_entries_ = 0;

  std::unique_ptr<Op[]> ops_;
  std::vector<uint32_t> free_ops_;  // reserved for every op
  size_t busy_ = 0;
  uint32_t backoffs_ = 0;  // ops in BACKOFF
  // One clock read per pass instead of several per op: submit()'s (before it posts anything: a
  // READ's start no later than its post) and the last poll's (read when a GET's check first
  // asks for it after that poll returned: no earlier than any completion it gave; a poll whose
  // completions are writes' reads no clock). The READ-duration bounds of get.cc and
  // location_cache.cc only grow with them, never shrink.
  Clock::time_point submitted_at_{};
  Clock::time_point polled_at_{};
  bool polled_at_read_ = false;
  Clock::time_point polled_at() {
    if (!polled_at_read_) {
      polled_at_ = Clock::now();
      polled_at_read_ = true;
    }
    return polled_at_;
  }
  BufferPool buffers_;
  std::vector<transport::Completion> completions_;
  std::vector<Ready> ready_;                  // finished, waiting for poll() to hand them out
  std::vector<transport::Completion> controls_;  // JS's, waiting for take_controls()
  std::vector<BufferPool::Buffer> lent_;      // values handed out by the last poll()
  bool closed_ = false;
  bool quiescent_ = true;  // after close(): every posted request completed or flushed
  bool arm_when_done_ = false;  // event mode (set_arm_when_done)
  std::minstd_rand rng_;
  uint32_t unchecked_ = 0;  // kSkip*: a test hook, 0 in use
};

}  // namespace rkv::kv
