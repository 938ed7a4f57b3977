// INCR, LOCK and UNLOCK: one RDMA atomic on an item's word (docs/protocol.md,
// "INCR"), found through the address cache or a lookup (get.cc), or created
// like a PUT (write.cc) with its first result already in the word. A DELETE
// seals the word first, so an atomic that lands on a deleted item sees the
// seal in its own result and starts over.
#include "atomics.h"

#include "client_core.h"
#include "hash_slot.h"
#include "op.h"

namespace rkv::kv {

// A missing counter or lock is created like a PUT, its word already holding
// the first result: the delta, or token 1 held by us.
void ClientCore::begin_create(Op& op) {
  const uint64_t bytes = item_bytes(op.key_len, 0);
  if (item_units(bytes) > op.block.units) return finish(op, KvStatus::PROTOCOL);
  // A LOCK's backup whose block holds the lock it created earlier in this op, deleted since:
  // no block to create it again with. Nothing is held; the caller may try again.
  if (op.group.created) return finish(op, KvStatus::LOCK_CONTENDED, op.retries);
  // The buffer of the lookup's last candidate (another key's item) may be too small for ours.
  if (op.item.held && BufferPool::order_bytes(op.item.order) < bytes) free_item(op);
  if (!op.item.held && !take_item(op, bytes)) return retry_later(op, Phase::G_BUCKETS);
  op.version = next_version(op);
  if (op.version == 0) return finish(op, KvStatus::DISCONNECTED);
  AtomicState& a = op.atomic();
  uint8_t* item = mem(op.item.offset);
  build_item(item, type_for(op.type), op.key, op.key_len, nullptr, 0, op.version);
  // Above its floor: a replicated LOCK's backup's is its primary's token, so a backup's token is never below it.
  if (op.type == KvOp::LOCK) a.create_token = (op.group.is_follower() ? ops_[op.group.leader].group.lock_floor : op.group.lock_floor) + 1;
  store_le<uint64_t>(item + kAtomicWord, op.type == KvOp::INCR ? counter_word(a.delta) : lock_word(a.create_token, link(op).region.client_id));
  op.start_write().item_units = item_units(bytes);
  write_read_buckets(op);
}

// Created: the counter holds the delta, the lock its first token, held by us.
void ClientCore::created(Op& op) {
  AtomicState& a = op.atomic();
  a.addr = heap_addr(op, op.block.offset) + kAtomicWord;
  a.result = op.type == KvOp::INCR ? counter_value(counter_word(a.delta)) : a.create_token;
  cache_store(op);
  if (op.type == KvOp::LOCK && op.group.is_follower()) {
    op.group.created = true;
    return lock_taken(op, lock_word(static_cast<uint32_t>(a.result), 0));
  }
  finish(op, KvStatus::OK);
}

// A replicated LOCK's backup took the lock word on its replica (replicated.cc): it
// stays in the group, holding it, until the leader answers or the group gives it back.
void ClientCore::lock_taken(Op& op, uint64_t from) {
  op.atomic().taken_from = from;
  op.group.taken = true;
  op.group.at_atomic = false;
  group_stop(op, GroupState::Vote::HELD);
}

// The token a LOCK's CAS sets: one above the free word's, and above its floor: on a backup the
// primary's token, on repair's copy the token of the lock copied.
uint32_t ClientCore::next_lock_token(const Op& op) const {
  const uint32_t token = static_cast<uint32_t>(std::get<AtomicState>(op.state).expect >> kLockVersionShift);
  const uint32_t floor = op.group.is_follower() ? ops_[op.group.leader].group.lock_floor : op.group.lock_floor;
  return std::max(token, floor) + 1;
}

void ClientCore::atomic_step(Op& op) {
  // A replicated INCR's member applies its delta when its group says: backups first (replicated.cc).
  if (op.group.grouped() && !op.group.go) {
    op.group.at_atomic = true;
    return group_stop(op, GroupState::Vote::HELD);
  }
  AtomicState& a = op.atomic();
  op.begin(Phase::A_ATOMIC);
  const uint64_t result = op.area(area::ATOM);
  switch (op.type) {
    case KvOp::INCR:
      link(op).sends.faa(op.tag(), result, a.addr, counter_word(a.delta));
      break;
    case KvOp::LOCK:
      if (op.group.undoing) {
        // A replicated LOCK's backup gives back the word it took: exactly as it found it.
        link(op).sends.cas(op.tag(), result, a.addr, lock_word(static_cast<uint32_t>(a.result), link(op).region.client_id), a.taken_from);
        break;
      }
      // Free (token t, owner 0) -> (t + 1, me): the fencing token grows with every acquisition.
      link(op).sends.cas(op.tag(), result, a.addr, a.expect, lock_word(next_lock_token(op), link(op).region.client_id));
      break;
    default:  // UNLOCK: (t, me) -> (t, 0)
      a.expect = lock_word(a.token, link(op).region.client_id);
      link(op).sends.cas(op.tag(), result, a.addr, a.expect, lock_word(a.token, 0));
      break;
  }
  if (epoch_checked(op)) {
    // Fenced: read after the atomic took effect (docs/replication-design.md §4.2). A barrier's
    // store of the word comes before or after it; either way this READ tells which epoch it met.
    const uint64_t word = link(op).region.epoch_offset + 8ull * key_hash_slot(op.key, op.key_len);
    link(op).sends.read(op.tag(), op.area(area::EPOCH), 8, link(op).region.addr + word, true);
  }
  link(op).sends.signal_last();
}

// An INCR or LOCK of a client routing by a config READs its hash slot's epoch word after the atomic
// (UNLOCK does not: releasing a lock this client holds is right in any configuration).
bool ClientCore::epoch_checked(const Op& op) const {
  return op.epoch != 0 && op.type != KvOp::UNLOCK && !op.group.undoing && link(op).region.epoch_offset != 0;
}

// The atomic met its hash slot's epoch word other than (our epoch, OPEN): another configuration
// (EPOCH_MOVED), a barrier or a fenced member (wait), or damage (CORRUPT). If it took no effect the
// op ends so, or waits; an INCR that added may count in another configuration: it ends as one that
// may have taken effect (TIMEOUT); a LOCK that took its word gives it back first.
void ClientCore::atomic_off_epoch(Op& op, uint64_t original, uint64_t word) {
  AtomicState& a = op.atomic();
  const uint32_t epoch = static_cast<uint32_t>(word >> u32(EpochWord::EPOCH_SHIFT));
  const uint32_t state = static_cast<uint32_t>(word);
  const bool known = state == u32(EpochWord::OPEN) || state == u32(EpochWord::CLOSED) || state == u32(EpochWord::FENCED);
  const KvStatus status = !known ? KvStatus::CORRUPT : epoch != op.epoch ? KvStatus::EPOCH_MOVED : KvStatus::OK;
  if (op.type == KvOp::INCR) return finish(op, known ? KvStatus::TIMEOUT : KvStatus::CORRUPT, op.retries);
  if (original == a.expect) {
    a.result = next_lock_token(op);
    a.taken_from = original;
    a.off_epoch = true;
    a.off_status = status;
    a.off_detail = epoch;
    op.group.undoing = true;
    return atomic_step(op);  // atomic_done goes on at off_epoch_undone
  }
  off_epoch_undone(op, status, epoch);
}

void ClientCore::off_epoch_undone(Op& op, KvStatus status, uint32_t epoch) {
  if (status != KvStatus::OK) return finish(op, status, status == KvStatus::EPOCH_MOVED ? epoch : op.retries);
  op.epoch_wait = true;  // at the deadline: TIMEOUT
  retry_later(op, Phase::A_ATOMIC);
}

void ClientCore::atomic_done(Op& op) {
  AtomicState& a = op.atomic();
  const uint64_t original = load_le<uint64_t>(mem(op.area(area::ATOM)));
  if (op.group.undoing) {
    // Given back (or released already by the server, the client fenced there): not ours either way.
    op.group.undoing = op.group.taken = false;
    a.result = 0;
    a.expect = a.taken_from;
    cache_store(op);  // the next guess: the word as it was given back
    if (a.off_epoch) {
      a.off_epoch = false;
      return off_epoch_undone(op, a.off_status, a.off_detail);
    }
    return group_stop(op, GroupState::Vote::RETRY);
  }
  const bool sealed = op.type == KvOp::INCR ? counter_sealed(original) : lock_sealed(original);
  if (!sealed && epoch_checked(op)) {
    const uint64_t word = load_le<uint64_t>(mem(op.area(area::EPOCH)));
    if (word != (static_cast<uint64_t>(op.epoch) << u32(EpochWord::EPOCH_SHIFT) | u32(EpochWord::OPEN))) return atomic_off_epoch(op, original, word);
  }
  if (sealed) {
    // A deleted item (reached through a cached address, or read just before its
    // DELETE): the atomic had no effect anyone can observe. Find the key again.
    cache_forget(op);
    if (op.type == KvOp::UNLOCK) return finish(op, KvStatus::VERSION_MISMATCH);  // the lock is gone
    // A replicated INCR's backups have added already (into the counter the DELETE
    // removed, or one created since): finding the key again would add twice there.
    // The op may have taken effect (a backup ahead): TIMEOUT, as an op cut short.
    if (op.type == KvOp::INCR && op.group.followers_committed) return finish(op, KvStatus::TIMEOUT, op.retries);
    return retry_later(op, Phase::G_BUCKETS);  // a replicated LOCK's group gives back what its backups took, and starts over
  }
  if (op.type == KvOp::INCR) {
    a.result = counter_value(original + counter_word(a.delta));
    return finish(op, KvStatus::OK);
  }
  if (op.type == KvOp::UNLOCK) {
    // A backup's token may differ from its primary's (after a failure between their CASes): held by
    // us there all the same, it is released. The primary's answer is the op's.
    const bool ours = lock_owner(original) == link(op).region.client_id;
    if (original != a.expect && op.group.is_follower() && ours && ++op.retries < 8) {
      a.token = static_cast<uint32_t>(original >> kLockVersionShift);
      return atomic_step(op);
    }
    // The primary holds it for us under another token: a stale UNLOCK, which must not free the
    // backups. Any other answer leaves this client holding nothing the primary counts: they release.
    if (op.group.is_leader() && original != a.expect && ours) op.group.release_backups = false;
    return finish(op, original == a.expect ? KvStatus::OK : KvStatus::VERSION_MISMATCH);
  }
  if (original == a.expect) {
    a.result = next_lock_token(op);
    cache_store(op);
    if (op.group.is_follower()) return lock_taken(op, original);
    return finish(op, KvStatus::OK);
  }
  if (lock_owner(original) == 0 && op.group.is_leader()) {
    // The primary's token moved past the leader's guess, which its backups' words were set
    // above: they give them back and the group starts over from this token.
    op.group.lock_floor = std::max(op.group.lock_floor, static_cast<uint32_t>(original >> kLockVersionShift));
    return retry_later(op, Phase::A_ATOMIC);
  }
  if (lock_owner(original) == 0) {
    a.expect = original;  // free, our guess of the token was stale: try again now
    if (++op.retries < 8) return atomic_step(op);
  } else {
    a.expect = as_free(original);  // free as its holder will leave it
  }
  retry_later(op, Phase::A_ATOMIC);
}

// ---- the address cache --------------------------------------------------------------

bool ClientCore::cache_lookup(Op& op) {
  AddressCache::Hit hit;
  const auto ttl = std::chrono::milliseconds(link(op).region.grace_ms / 2);
  if (!link(op).cache.lookup(op.key, op.key_len, type_for(op.type), Clock::now(), ttl, &hit)) return false;
  AtomicState& a = op.atomic();
  a.addr = hit.addr;
  a.expect = lock_word(static_cast<uint32_t>(hit.word >> kLockVersionShift), 0);
  return true;
}

void ClientCore::cache_store(Op& op) {
  const AtomicState& a = op.atomic();
  if (a.addr == 0) return;
  // LOCK's next first guess: the token as we leave it (or as we found it).
  const uint64_t word = op.type == KvOp::LOCK
                            ? lock_word(static_cast<uint32_t>(a.result ? a.result : a.expect >> kLockVersionShift), 0)
                            : 0;
  link(op).cache.store(op.key, op.key_len, type_for(op.type), a.addr, word, Clock::now());
}

void ClientCore::cache_forget(const Op& op) { link(op).cache.forget(op.key, op.key_len); }

size_t AddressCache::position(const uint8_t* key, uint32_t key_len) const {
  return hash_bytes(key, key_len, 1) % entries_.size();
}

bool AddressCache::lookup(const uint8_t* key, uint32_t key_len, ItemType type, Clock::time_point now,
                          std::chrono::milliseconds ttl, Hit* hit) const {
  if (key_len > kMaxKey) return false;
  const Entry& e = entries_[position(key, key_len)];
  if (e.addr == 0 || e.type != type || e.key_len != key_len || std::memcmp(e.key, key, key_len) != 0) return false;
  if (now - e.at >= ttl) return false;
  *hit = {e.addr, e.word};
  return true;
}

void AddressCache::store(const uint8_t* key, uint32_t key_len, ItemType type, uint64_t addr, uint64_t word,
                         Clock::time_point now) {
  if (key_len > kMaxKey) return;
  Entry& e = entries_[position(key, key_len)];
  e.addr = addr;
  e.word = word;
  e.at = now;
  e.type = type;
  e.key_len = static_cast<uint16_t>(key_len);
  std::memcpy(e.key, key, key_len);
}

void AddressCache::forget(const uint8_t* key, uint32_t key_len) {
  if (key_len > kMaxKey) return;
  Entry& e = entries_[position(key, key_len)];
  if (e.key_len == key_len && std::memcmp(e.key, key, key_len) == 0) e.addr = 0;
}

}  // namespace rkv::kv
