// The client core's ops and passes: create and close; poll (drain the CQ,
// advance ops, retry due backoffs, one doorbell, hand out results); and how
// every op ends. Ops come in through submit.cc; their round trips are in
// get.cc, write.cc and atomics.cc; docs/protocol.md says why each is safe.
#include "client_core.h"

#include <algorithm>
#include <cerrno>
#include <thread>

#include "op.h"

namespace rkv::kv {

using transport::Completion;

namespace {

constexpr size_t kMaxOps = u32(KvLayout::MAX_INFLIGHT);
// The smallest largest-item the buffer pool is made for (client_core.h, item_limit).
constexpr uint64_t kPooledItemFloor = 2ull << 20;
// The most requests one phase adds (W_ALT: one READ per displacement
// bucket). An op adds at most one phase per pass and adds none while its
// phase is unposted, so the send list never holds more than every op's
// largest phase, plus close()'s drain marker.
constexpr size_t kMaxPhaseRequests = 2 * kSlots;
constexpr size_t kMaxUnposted = kMaxOps * kMaxPhaseRequests + 1;
// Results waiting for JS: a poll adds at most one per op, submit one per op
// it takes. Reserved once.
constexpr size_t kReadyReserve = 2 * u32(Limit::MAX_POLL_BATCH) + 2 * kMaxOps;
// Control completions waiting for JS: a CQ poll adds at most MAX_POLL_BATCH
// per pass, and JS takes as many with every poll() or submit(). Reserved once.
constexpr int kMaxPasses = 16;
constexpr size_t kControlsReserve = (kMaxPasses + 2) * u32(Limit::MAX_POLL_BATCH);

}  // namespace

// ---- setup and teardown ----------------------------------------------------------

std::unique_ptr<ClientCore> ClientCore::create(std::shared_ptr<transport::Provider> provider,
                                               std::shared_ptr<transport::Connection> connection,
                                               std::shared_ptr<transport::CompletionQueue> cq,
                                               const RegionInfo& region, size_t scratch_bytes,
                                               uint32_t op_timeout_ms, std::string* error, size_t location_entries) {
  std::unique_ptr<ClientCore> core(new ClientCore());
  core->provider_ = std::move(provider);
  core->cq_ = std::move(cq);
  core->op_timeout_ms_ = op_timeout_ms;
  core->location_entries_ = location_entries;
  const size_t items_begin = kMaxOps * area::kBytes;
  // The pool holds two of the largest items, or of 2 MiB ones (every item of the
  // default 1 MiB --max-value) when items are larger than that: items past
  // what scratch holds two of move through the caller's registered buffers.
  if (region.bucket_count < 2 || (region.bucket_count & (region.bucket_count - 1)) != 0) {
    *error = "the server's bucket count is not a power of two >= 2";
    return nullptr;
  }
  const uint64_t largest = largest_item(region);
  scratch_bytes = std::max<size_t>(scratch_bytes, items_begin + 2 * std::min<uint64_t>(largest, kPooledItemFloor));
  core->scratch_ = transport::Memory::allocate(scratch_bytes, "", error);
  if (!core->scratch_) return nullptr;
  core->mr_ = core->provider_->register_memory(*core->scratch_, 0, core->scratch_->length(),
                                               u32(Access::LOCAL_WRITE), error);
  if (!core->mr_) return nullptr;
  core->ops_ = std::make_unique<Op[]>(kMaxOps);
  core->free_ops_.reserve(kMaxOps);
  for (uint32_t i = 0; i < kMaxOps; i++) {
    core->ops_[i].index = i;
    core->ops_[i].area_base = i * area::kBytes;
    core->free_ops_.push_back(static_cast<uint32_t>(kMaxOps - 1 - i));
  }
  core->buffers_.init(items_begin, core->scratch_->length());
  core->links_ = std::make_unique<std::unique_ptr<Link>[]>(kMaxConnections);
  core->completions_.resize(u32(Limit::MAX_POLL_BATCH));
  core->ready_.reserve(kReadyReserve);
  core->controls_.reserve(kControlsReserve);
  core->lent_.reserve(kReadyReserve);
  core->rng_.seed(region.client_id * 2654435761u + 1);
  core->unchecked_ = unchecked_locations_from_env();
  if (core->add_connection(std::move(connection), region, error) != 0) return nullptr;
  return core;
}

int ClientCore::add_connection(std::shared_ptr<transport::Connection> connection, const RegionInfo& region,
                               std::string* error) {
  if (closed_) {
    *error = "the client core is closed";
    return -1;
  }
  if (region.bucket_count < 2 || (region.bucket_count & (region.bucket_count - 1)) != 0) {
    *error = "the server's bucket count is not a power of two >= 2";
    return -1;
  }
  constexpr uint64_t kEpochTableBytes = 8ull * u32(EpochWord::HASH_SLOTS);
  if (region.epoch_offset != 0 && (region.epoch_offset % 8 != 0 || region.epoch_offset > region.length ||
                                   region.length - region.epoch_offset < kEpochTableBytes)) {
    *error = "the server's epoch table lies outside its region";
    return -1;
  }
  const size_t items_begin = kMaxOps * area::kBytes;
  const uint64_t largest = largest_item(region);
  if (items_begin + 2 * std::min<uint64_t>(largest, kPooledItemFloor) > scratch_->length()) {
    *error = "the client core's scratch is too small for this server's --max-value";
    return -1;
  }
  uint32_t index = 0;
  while (index < kMaxConnections && links_[index]) index++;
  if (index == kMaxConnections) {
    *error = "the client core drives " + std::to_string(kMaxConnections) + " connections already";
    return -1;
  }
  auto l = std::make_unique<Link>();
  l->connection = std::move(connection);
  l->region = region;
  l->item_limit = largest;
  while (l->item_limit > kPooledItemFloor && items_begin + 2 * l->item_limit > scratch_->length()) l->item_limit /= 2;
  l->sends.attach(scratch_->data(), mr_->lkey(), region.rkey, l->connection->max_inline(), kMaxUnposted);
  l->locations.init(location_entries_);
  links_[index] = std::move(l);
  link_end_ = std::max(link_end_, index + 1);
  return static_cast<int>(index);
}

ClientCore::~ClientCore() {
  if (ops_) close();
  if (!quiescent_) {
    // A request may still land in scratch: leave it mapped and registered
    // (leaked) rather than free memory a device could write.
    (void)mr_.release();
    (void)scratch_.release();
  }
}

bool ClientCore::close(uint32_t wait_ms) {
  if (closed_) return quiescent_;
  closed_ = true;
  fail_all(KvStatus::DISCONNECTED, 0);
  for (uint32_t i = 0; i < link_end_; i++) {
    if (links_[i]) links_[i]->broken = true;  // later submits fail at once
  }
  quiescent_ = quiesce(nullptr, wait_ms);
  return quiescent_;
}

bool ClientCore::close_connection(uint32_t connection, uint32_t wait_ms) {
  Link* l = link_at(connection);
  if (l == nullptr) return true;
  fail_connection(connection, KvStatus::DISCONNECTED, 0);
  l->broken = true;
  if (!quiesce(l, wait_ms)) return false;  // the index stays taken: the NIC may still write scratch for it
  // Its counts stay in the core's (doorbells, location stats only grow).
  closed_counts_.doorbells += l->sends.doorbells();
  closed_counts_.locations.hits += l->locations.stats.hits;
  closed_counts_.locations.misses += l->locations.stats.misses;
  closed_counts_.locations.failures += l->locations.stats.failures;
  links_[connection].reset();
  while (link_end_ > 0 && !links_[link_end_ - 1]) link_end_--;
  return true;
}

bool ClientCore::drained(const Link* only) const {
  for (uint32_t i = 0; i < link_end_; i++) {
    const Link* l = links_[i].get();
    if (l == nullptr || (only != nullptr && l != only)) continue;
    if (!l->sends.empty() || l->sends.outstanding() != 0) return false;
  }
  return true;
}

bool ClientCore::quiesce(Link* only, uint32_t wait_ms) {
  const auto each = [&](auto&& fn) {
    for (uint32_t i = 0; i < link_end_; i++) {
      Link* l = links_[i].get();
      if (l != nullptr && (only == nullptr || l == only)) fn(*l, i);
    }
  };
  // A phase cut short by a full send queue (and dropped just now) left
  // requests no signaled completion will vouch for: a signaled zero-length
  // READ behind them does.
  each([&](Link& l, uint32_t i) {
    if (!l.sends.unsignaled_tail()) return;
    l.sends.read(wr_tag::make(i, wr_tag::kNoOp, 0), 0, 0, l.region.addr);
    l.sends.signal_last();
  });
  const auto start = Clock::now();
  const auto wait = std::chrono::milliseconds(wait_ms);
  bool disconnected = false;
  bool refused = false;
  for (;;) {
    each([&](Link& l, uint32_t) {
      if (l.sends.empty()) return;
      const int rc = l.sends.flush(*l.connection);
      if (rc != 0 && rc != ENOMEM) refused = true;  // nothing can vouch for the tail
    });
    if (refused) break;
    drain_completions(static_cast<int>(completions_.size()));
    if (drained(only)) break;
    const auto waited = Clock::now() - start;
    if (waited >= wait) break;
    if (!disconnected && waited >= wait / 2) {
      // A healthy peer answers in microseconds: this one is silent, and
      // only the queue pair's error state (a flush) ends its requests now.
      each([](Link& l, uint32_t) { l.connection->disconnect(); });
      disconnected = true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const bool done = !refused && drained(only);
  each([](Link& l, uint32_t) { l.sends.drop(); });
  return done;
}

uint64_t ClientCore::bucket_addr(const Op& op, uint32_t bucket) const {
  const RegionInfo& r = link(op).region;
  return r.addr + r.index_offset + static_cast<uint64_t>(bucket) * kBucketBytes;
}
uint64_t ClientCore::heap_addr(const Op& op, uint32_t units) const {
  const RegionInfo& r = link(op).region;
  return r.addr + r.heap_offset + static_cast<uint64_t>(units) * kUnit;
}
bool ClientCore::slot_in_heap(const Op& op, uint64_t slot) const {
  const uint64_t units = slot_units(slot);
  return units > 0 && (static_cast<uint64_t>(slot_offset(slot)) + units) * kUnit <= link(op).region.heap_bytes;
}
uint64_t ClientCore::largest_item(const RegionInfo& region) {
  return BufferPool::order_bytes(BufferPool::order_for(item_bytes(kMaxKey, region.max_value)));
}
uint64_t ClientCore::largest_item(const Op& op) const { return largest_item(link(op).region); }

uint64_t ClientCore::doorbells() const {
  uint64_t n = closed_counts_.doorbells;
  for (uint32_t i = 0; i < link_end_; i++) n += links_[i] ? links_[i]->sends.doorbells() : 0;
  return n;
}

uint32_t ClientCore::connections() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < link_end_; i++) n += links_[i] != nullptr;
  return n;
}

LocationCache::Stats ClientCore::location_stats() const {
  LocationCache::Stats sum = closed_counts_.locations;
  for (uint32_t i = 0; i < link_end_; i++) {
    if (!links_[i]) continue;
    sum.hits += links_[i]->locations.stats.hits;
    sum.misses += links_[i]->locations.stats.misses;
    sum.failures += links_[i]->locations.stats.failures;
  }
  return sum;
}

// A write's version: the session's base and our sequence in it. 0 once the
// session's 2^40 versions are used up: the session ends (we disconnect) and the
// client's reconnect starts a new one, with a new base, rather than reuse one.
uint64_t ClientCore::next_version(Op& op) {
  constexpr uint64_t kSequences = 1ull << u32(KvLayout::SESSION_VERSION_BITS);
  Link& l = link(op);
  if (l.version_seq + 1 >= kSequences) {
    if (!l.broken) l.connection->disconnect();
    return 0;
  }
  return l.region.version_base | ++l.version_seq;
}

bool ClientCore::take_item(Op& op, uint64_t bytes) { return buffers_.take(bytes, &op.item); }
void ClientCore::free_item(Op& op) { buffers_.give_back(&op.item); }

// ---- poll ------------------------------------------------------------------------

size_t ClientCore::poll(OpResult* out, size_t max) {
  // Values handed out by the previous poll or submit have been copied by now.
  for (BufferPool::Buffer& buffer : lent_) buffers_.give_back(&buffer);
  lent_.clear();
  for (uint32_t i = 0; i < link_end_; i++) {
    Link* l = links_[i].get();
    if (l == nullptr || l->broken || l->connection->state() == ConnState::CONNECTED) continue;
    l->broken = true;
    fail_connection(i, KvStatus::DISCONNECTED, 0);
  }
  advance();
  settle();
  return hand_out(out, max);
}

// Passes: drain the CQ, advance ops, retry due backoffs, post the next round
// trips with one doorbell; again while a pass found completions or posted
// something, because a provider that completes inside the post (shm; a NIC
// within a microsecond or two) has the next answers ready at once. So a shm
// GET's two round trips both finish in the call that posted the first one.
// Bounded: a pass that finds nothing new ends it (one empty CQ poll on a NIC).
// Due backoffs run in the first pass only: the passes chain round trips that
// complete at once, and an op that keeps backing off (a full ring waiting for
// the server's drain, a held lock) would otherwise post a retry in every pass,
// as fast as a slow provider's doorbell, keeping the thread (and a server that
// shares it, as in the tests) from running until the call's passes ran out.
void ClientCore::advance() {
  for (int pass = 0; pass < kMaxPasses; pass++) {
    const int n = drain_completions(static_cast<int>(completions_.size()));
    if (pass == 0 && backoffs_ > 0) run_due_backoffs();
    const bool posting = post_sends();
    if (n == 0 && !posting) return;
  }
}

// Event mode: arm after draining, then look once more (completions that raced
// with arm() bring no event). Anything found then may cost one spurious wake-up.
void ClientCore::settle() {
  if (!arm_when_done_ || closed_) return;
  cq_->arm();
  advance();
}

// Completions: control ones wait for JS; a data phase's advances its op.
// Returns how many the CQ gave.
int ClientCore::drain_completions(int budget) {
  const int n = cq_->poll(completions_.data(), budget);
  // Every completion of this batch happened before now: one clock read, at its first use, serves as their time.
  if (n > 0) polled_at_read_ = false;
  for (int i = 0; i < n; i++) {
    const Completion& c = completions_[i];
    if (c.wr_id & kControlTag) {
      controls_.push_back(c);
      continue;
    }
    const uint32_t connection = wr_tag::connection(c.wr_id);
    Link* l = link_at(connection);
    if (l == nullptr) continue;  // a closed connection's late completion
    l->sends.completed(c.wr_id);
    if (c.status != WcStatus::SUCCESS) {
      if (!l->broken) {
        l->broken = true;
        l->broken_detail = u32(c.status);
        fail_connection(connection, c.status == WcStatus::WR_FLUSH_ERR ? KvStatus::DISCONNECTED : KvStatus::RDMA_ERROR,
                        u32(c.status));
      }
      continue;
    }
    const uint32_t index = wr_tag::op(c.wr_id);
    if (index >= kMaxOps) continue;  // close()'s drain marker
    Op& op = ops_[index];
    if (!op.busy || op.seq != wr_tag::seq(c.wr_id) || op.connection != connection) continue;  // a finished op's late completion
    phase_done(op);
  }
  return n;
}

void ClientCore::run_due_backoffs() {
  const auto now = Clock::now();
  for (size_t i = 0; i < kMaxOps && backoffs_ > 0; i++) {
    Op& op = ops_[i];
    if (op.phase != Phase::BACKOFF || now < op.backoff_until) continue;
    backoffs_--;
    resume(op);
  }
}

// One doorbell per connection with requests waiting. Returns whether any waited.
bool ClientCore::post_sends() {
  bool posting = false;
  for (uint32_t i = 0; i < link_end_; i++) {
    Link* l = links_[i].get();
    if (l == nullptr || l->sends.empty()) continue;
    posting = true;
    const int rc = l->sends.flush(*l->connection);
    if (rc != 0 && rc != ENOMEM) {
      l->broken = true;
      fail_connection(i, KvStatus::DISCONNECTED, 0);
    }
  }
  return posting;
}

size_t ClientCore::take_controls(Completion* out, size_t max) {
  const size_t count = std::min(max, controls_.size());
  std::copy_n(controls_.begin(), count, out);
  controls_.erase(controls_.begin(), controls_.begin() + static_cast<long>(count));
  return count;
}

size_t ClientCore::hand_out(OpResult* out, size_t max) {
  const size_t count = std::min(max, ready_.size());
  for (size_t i = 0; i < count; i++) {
    out[i] = ready_[i].result;
    if (ready_[i].lent.held) lent_.push_back(ready_[i].lent);
  }
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<long>(count));
  return count;
}

// ---- every op's end ----------------------------------------------------------------

void ClientCore::phase_done(Op& op) {
  switch (op.phase) {
    case Phase::G_BUCKETS:
    case Phase::G_CONFIRM: return get_buckets_done(op);
    case Phase::G_ITEM: return get_item_done(op);
    case Phase::G_CACHED: return get_cached_done(op);
    case Phase::G_CACHED_INTO: return get_cached_into_done(op);
    case Phase::G_LARGE: return get_large_done(op);
    case Phase::G_LARGE_LIVE: return get_large_live(op);
    case Phase::W_CREDIT: return credit_done(op);
    case Phase::W_READ: return write_lock(op);
    case Phase::W_LOCK: return write_locked(op);
    case Phase::W_VERIFY: return write_decide(op);
    case Phase::W_ALT: return write_alt_done(op);
    case Phase::W_ALT_LOCK: return write_alt_locked(op);
    case Phase::W_COMMIT: return op.is_atomic() ? created(op) : finish(op, op.write().final_status);  // NOT_FOUND: an expired item deleted
    case Phase::W_RELEASE: return released(op);
    case Phase::A_ATOMIC: return atomic_done(op);
    default: return;
  }
}

// Randomized exponential backoff, 1 µs to 1 ms; past the deadline the op
// fails (a GET, or a write waiting for its epoch word to open, with TIMEOUT;
// anything that waits for a lock with LOCK_CONTENDED).
void ClientCore::retry_later(Op& op, Phase resume) {
  // A replicated write's member retries with its whole group (replicated.cc).
  if (op.group.grouped()) return group_stop(op, GroupState::Vote::RETRY);
  backoff(op, resume);
}

void ClientCore::backoff(Op& op, Phase resume) {
  op.retries++;
  const auto now = Clock::now();
  if (now > op.deadline) {
    return finish(op, op.type == KvOp::GET || op.epoch_wait ? KvStatus::TIMEOUT : KvStatus::LOCK_CONTENDED, op.retries);
  }
  const uint32_t cap = 1u << std::min<uint32_t>(op.retries, 10);
  op.backoff_until = now + std::chrono::microseconds(1 + rng_() % cap);
  op.resume = resume;
  op.phase = Phase::BACKOFF;
  backoffs_++;
}

void ClientCore::resume(Op& op) {
  switch (op.resume) {
    case Phase::G_BUCKETS:
      op.start_lookup();
      return get_read_buckets(op, Phase::G_BUCKETS);
    case Phase::G_CONFIRM:
      return get_read_buckets(op, Phase::G_CONFIRM);
    case Phase::A_ATOMIC:
      return atomic_step(op);
    default:  // W_READ
      if (op.group.is_leader()) return group_restart(op);
      op.write().moving = false;
      return write_read_buckets(op);
  }
}

void ClientCore::permit_reads(uint32_t connection, int64_t ms) {
  Link* l = link_at(connection);
  if (l) l->reads_until = Clock::now() + std::chrono::milliseconds(ms);
}

bool ClientCore::reads_lapsed(const Op& op) const {
  // Checked when the answer is handed over, after its last READ completed: a
  // stricter time than the READ's own, never a laxer one. An INCR's answer is
  // its primary's word (a replicated INCR's leader; its backups answer nothing).
  const bool answers = op.type == KvOp::GET || (op.type == KvOp::INCR && !op.group.is_follower());
  // Without a lease (no replicas) there is nothing to lapse, and no clock to read.
  return answers && link(op).reads_until != Clock::time_point::max() && Clock::now() > link(op).reads_until;
}

void ClientCore::finish(Op& op, KvStatus status, uint32_t detail) {
  // Every answer read from the server's data (a value, its absence, its type, its length).
  const bool from_data = status == KvStatus::OK || status == KvStatus::NOT_FOUND || status == KvStatus::TYPE_MISMATCH || status == KvStatus::BUFFER_TOO_SMALL;
  if (from_data && reads_lapsed(op)) status = KvStatus::READ_LEASE_LAPSED;
  if (op.group.grouped()) return group_end(op, status, detail);
  complete(op, status, detail);
}

void ClientCore::complete(Op& op, KvStatus status, uint32_t detail) {
  Ready& r = ready_.emplace_back();
  r.result.id = op.id;
  r.result.status = status;
  // Errors other than RDMA_ERROR carry their retry count already; successes
  // carry it too, so clients can count retries (bucket locks busy, torn reads).
  const bool answered = status == KvStatus::OK || status == KvStatus::NOT_FOUND || status == KvStatus::VERSION_MISMATCH;
  r.result.detail = answered ? op.retries : detail;
  r.result.version = status != KvStatus::OK ? 0 : op.is_atomic() ? op.atomic().result : op.version;
  // A lapsed answer (finish) is a completed op's, only late: an INCR that created its counter has linked its block.
  const bool completed = status == KvStatus::OK || status == KvStatus::READ_LEASE_LAPSED;
  r.result.block_unused = op.block.held && !(completed && op.block.published);
  r.result.backup_blocks_unused = op.group.unused;
  if (op.linked) {
    if (op.type == KvOp::DELETE || status == KvStatus::TYPE_MISMATCH) cache_forget(op);
    location_after(op, status);
  }
  free_item(op);
  release_op(op);
}

void ClientCore::release_op(Op& op) {
  if (op.ring_credit) link(op).ring.reserved--;
  op.ring_credit = false;
  if (op.phase == Phase::BACKOFF) backoffs_--;
  op.busy = false;
  op.phase = Phase::IDLE;
  op.group = GroupState{};
  if (op.shares_item) op.item.held = false;  // the leader's: a later use of this op must not give it back
  op.shares_item = false;
  op.seq++;  // late completions of this op's requests are ignored
  free_ops_.push_back(op.index);
  busy_--;
}

void ClientCore::fail_all(KvStatus status, uint32_t detail) {
  for (uint32_t i = 0; i < link_end_; i++) {
    if (links_[i]) fail_connection(i, status, detail);
  }
}

void ClientCore::fail_connection(uint32_t connection, KvStatus status, uint32_t detail) {
  Link* l = link_at(connection);
  if (l == nullptr) return;
  l->sends.drop();  // requests of the ops failed here must never be posted
  for (size_t i = 0; i < kMaxOps; i++) {
    if (ops_[i].busy && ops_[i].connection == connection) finish(ops_[i], status, detail);
  }
}

}  // namespace rkv::kv
