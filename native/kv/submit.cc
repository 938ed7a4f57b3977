// Submit's steps: JS's descriptors become ops. Each takes a free op (and,
// for a PUT or CAS, an item buffer: without one the op stays with the
// caller), gets its header and the state of its type, is refused at once if
// its input is bad or the connection is gone, and posts its first round trip.
// All of a batch's first round trips go out with one doorbell; then the
// passes of advance() (client_core.cc) run, so a batch whose completions are
// synchronous is finished when submit returns.
#include "client_core.h"
#include "op.h"

namespace rkv::kv {

size_t ClientCore::submit(const OpDesc* descs, size_t count) {
  // Values handed out by the previous poll or submit have been copied by now.
  for (BufferPool::Buffer& buffer : lent_) buffers_.give_back(&buffer);
  lent_.clear();
  // Completions of this post are collected below: they must not wake a thread.
  if (arm_when_done_ && !closed_) cq_->disarm();
  const auto now = Clock::now();
  submitted_at_ = now;
  prefetch_locations(descs, count);
  size_t taken = 0;
  for (; taken < count; taken++) {
    const OpDesc& d = descs[taken];
    Op* op = claim(d);
    if (op == nullptr) break;  // no free op, or no item buffer now: the caller keeps the rest
    adopt(*op, d, now);
    KvStatus refused = refusal(*op, d);
    if (refused == KvStatus::OK && d.backups > 0) refused = backup_refusal(d);
    if (refused != KvStatus::OK) {
      op->group.unused = static_cast<uint8_t>((1u << std::min(d.backups, kMaxBackups)) - 1);  // none was used
      finish(*op, refused, refused == KvStatus::DISCONNECTED && op->linked ? link(*op).broken_detail : 0);
      continue;
    }
    if (d.backups > 0) attach_followers(*op, d);
    start(*op, d);
    start_followers(*op);
  }
  post_sends();
  advance();
  settle();
  return taken;
}

// A batch's GETs each look their key up in the location cache, a random line of a table of
// megabytes: a cache miss each, one after the other in the loop above. Touched for the whole
// batch first (a hash per key, computed again by adopt()), the misses overlap. A write's entry
// is stored (PUT, CAS) or forgotten (DELETE) when it ends: touched now, its miss overlaps the
// write's round trips instead of coming after them (~3 % of a sequential PUT's time on shm).
void ClientCore::prefetch_locations(const OpDesc* descs, size_t count) {
  for (size_t i = 0; i < count; i++) {
    const OpDesc& d = descs[i];
    // A lone GET finds its entry right away: nothing to overlap.
    const bool cached = (d.type == KvOp::GET && count > 1) || d.type == KvOp::PUT || d.type == KvOp::CAS || d.type == KvOp::DELETE;
    if (!cached || d.key_len > kMaxKey) continue;
    Link* l = link_at(d.connection);
    if (l == nullptr) continue;
    l->locations.prefetch(location_tag(hash_key(d.key, d.key_len, l->region.seed, l->region.bucket_count)));
  }
}

// A free op, with the item buffer a PUT or CAS builds its item in.
ClientCore::Op* ClientCore::claim(const OpDesc& d) {
  // A replicated write takes an op per backup too (replicated.cc).
  if (free_ops_.size() < 1 + std::min(d.backups, kMaxBackups)) return nullptr;
  Op& op = ops_[free_ops_.back()];
  // With the caller's buffer only the header and key are built here; an item
  // past the connection's item limit without one is refused (refusal), not
  // waited for; so is an op on no connection.
  const Link* l = link_at(d.connection);
  const uint64_t bytes = d.ext_lkey != 0 ? kHeader + d.key_len : item_bytes(d.key_len, d.value_len);
  const bool builds_item = l != nullptr && (d.type == KvOp::PUT || d.type == KvOp::CAS) && d.key_len <= kMaxKey &&
                           d.value_len <= l->region.max_value && bytes <= l->item_limit;
  if (builds_item && !take_item(op, bytes)) return nullptr;
  free_ops_.pop_back();
  busy_++;
  op.busy = true;
  return &op;
}

// The op's header and the state of its type, from the descriptor.
void ClientCore::adopt(Op& op, const OpDesc& d, Clock::time_point now) {
  op.type = d.type;
  op.id = d.id;
  // An op on no connection runs on none: refusal() turns it away before anything reads connection 0.
  op.linked = link_at(d.connection) != nullptr;
  op.connection = static_cast<uint8_t>(op.linked ? d.connection : 0);
  op.retries = 0;
  op.version = 0;  // a DELETE answers none; PUT and CAS set theirs in start()
  op.deadline = now + std::chrono::milliseconds(op_timeout_ms_);
  if (d.type == KvOp::LOCK && d.lock_timeout_ms > 0) op.deadline = now + std::chrono::milliseconds(d.lock_timeout_ms);
  if (d.type == KvOp::LOCK) op.group.lock_floor = d.lock_floor;
  const bool granted = d.type == KvOp::PUT || d.type == KvOp::CAS || d.type == KvOp::INCR || d.type == KvOp::LOCK;
  op.block = {d.block, d.block_units, granted, false};
  op.key_len = d.key_len;
  op.expiry = d.expiry;
  op.epoch = d.epoch;
  op.epoch_wait = false;
  op.ext = {d.ext, d.ext_len, d.ext_lkey};
  if (d.key_len <= kMaxKey && op.linked) {
    std::memcpy(op.key, d.key, d.key_len);
    const RegionInfo& r = link(op).region;
    op.kh = hash_key(op.key, op.key_len, r.seed, r.bucket_count);
  }
  switch (d.type) {
    case KvOp::PUT:
    case KvOp::DELETE:
      op.state.emplace<WriteState>().aim(op.kh);
      break;
    case KvOp::CAS:
      op.state.emplace<WriteState>().aim(op.kh).expected_version = d.expected_version;
      break;
    case KvOp::INCR:
      op.state.emplace<AtomicState>().delta = d.delta;
      break;
    case KvOp::LOCK:
      op.state.emplace<AtomicState>();
      break;
    case KvOp::UNLOCK:
      op.state.emplace<AtomicState>().token = d.token;
      break;
    default:  // GET, and what refusal() turns away
      op.state.emplace<LookupState>();
      break;
  }
}

// Why the op cannot start (OK: it can).
KvStatus ClientCore::refusal(const Op& op, const OpDesc& d) const {
  const Link* l = link_at(d.connection);
  if (l == nullptr) return KvStatus::PROTOCOL;  // no such connection
  if (d.key_len > kMaxKey) return KvStatus::KEY_TOO_LARGE;
  if (d.value_len > l->region.max_value) return KvStatus::VALUE_TOO_LARGE;
  if (d.ext_bad) return KvStatus::BAD_BUFFER;
  if (d.expiry >= kExpiryLimit) return KvStatus::PROTOCOL;  // JS checks TTLs: past the limit is no item's
  if (l->broken) return KvStatus::DISCONNECTED;
  if (op.block.held && (static_cast<uint64_t>(d.block) + d.block_units) * kUnit > l->region.heap_bytes) {
    return KvStatus::PROTOCOL;  // a block outside the heap
  }
  switch (d.type) {
    case KvOp::GET:
    case KvOp::DELETE:
    case KvOp::INCR:
    case KvOp::LOCK:
    case KvOp::UNLOCK:
      return KvStatus::OK;
    case KvOp::PUT:
    case KvOp::CAS:  // the caller's block must hold the item, as long as its slot will say
      if (d.ext_lkey == 0 && item_bytes(d.key_len, d.value_len) > l->item_limit) return KvStatus::BUFFER_TOO_SMALL;
      return slot_length_units(item_units(item_bytes(d.key_len, d.value_len))) > d.block_units ? KvStatus::PROTOCOL : KvStatus::OK;
    default:
      return KvStatus::PROTOCOL;  // not an operation
  }
}

// The first round trip: both buckets (GET, and atomics the address cache
// does not know), the atomic itself, or a write's first read.
void ClientCore::start(Op& op, const OpDesc& d) {
  switch (d.type) {
    case KvOp::GET:
      if (op.ext.lkey == 0 ? get_cached(op) : get_cached_into(op)) return;  // one READ of the item the location cache names
      return get_read_buckets(op, Phase::G_BUCKETS);
    case KvOp::INCR:
    case KvOp::LOCK:
    case KvOp::UNLOCK:
      return cache_lookup(op) ? atomic_step(op) : get_read_buckets(op, Phase::G_BUCKETS);
    case KvOp::DELETE:
      return write_read_buckets(op);
    default: {  // PUT, CAS: the new item, built in its buffer now
      op.write().item_units = item_units(item_bytes(d.key_len, d.value_len));
      // A rewrite as it is keeps the version it replaces (only if it still is the current one: a CAS).
      op.version = d.keep_version && d.type == KvOp::CAS && d.expected_version != 0 ? d.expected_version : next_version(op);
      if (op.version == 0) return finish(op, KvStatus::DISCONNECTED);
      if (op.ext.lkey != 0) {  // the value stays in the caller's buffer: W_READ writes it from there
        build_item_header(mem(op.item.offset), ItemType::BYTES, op.key, op.key_len, d.value, d.value_len, op.version,
                          op.expiry);
      } else {
        build_item(mem(op.item.offset), ItemType::BYTES, op.key, op.key_len, d.value, d.value_len, op.version, op.expiry);
      }
      return write_read_buckets(op);
    }
  }
}

}  // namespace rkv::kv
