// GET's round trips (docs/protocol.md, "GET"), which are also the lookup
// INCR, LOCK and UNLOCK start with: read both buckets in one doorbell; read
// the item of each slot whose fingerprint matches, whole; confirm a miss
// with a second read of both buckets.
#include <algorithm>

#include "client_core.h"
#include "op.h"

namespace rkv::kv {

// RTT1: both candidate buckets in one doorbell.
void ClientCore::get_read_buckets(Op& op, Phase phase) {
  op.begin(phase);
  if (phase == Phase::G_BUCKETS) op.lookup().started = Clock::now();
  link(op).sends.read(op.tag(), op.area(area::B1), kBucketBytes, bucket_addr(op, op.kh.b1));
  link(op).sends.read(op.tag(), op.area(area::B2), kBucketBytes, bucket_addr(op, op.kh.b2));
  link(op).sends.signal_last();
}

void ClientCore::get_buckets_done(Op& op) {
  LookupState& s = op.lookup();
  const uint8_t* images[2] = {mem(op.area(area::B1)), mem(op.area(area::B2))};
  s.ncandidates = s.next = 0;
  for (uint32_t b = 0; b < 2; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      const uint64_t slot = slot_at(images[b], i);
      if (slot == 0 || slot_fp(slot) != op.kh.fp) continue;
      if (std::find(s.ruled_out, s.ruled_out + s.nruled_out, slot) != s.ruled_out + s.nruled_out) continue;
      s.candidates[s.ncandidates++] = {slot, static_cast<uint8_t>(b), static_cast<uint8_t>(i)};
    }
  }
  if (s.ncandidates > 0) return get_item_next(op);
  // A miss is only final when two reads of both buckets agree, unlocked:
  // a displacement moves an entry between buckets under both buckets' locks,
  // and a reader's two READs could straddle it.
  const uint64_t locks[2] = {lock_of(images[0]), lock_of(images[1])};
  const bool held = lock_owner(locks[0]) != 0 || lock_owner(locks[1]) != 0;
  if (s.confirming && !held && locks[0] == s.seen_locks[0] && locks[1] == s.seen_locks[1]) {
    if (op.type == KvOp::INCR || op.type == KvOp::LOCK) return begin_create(op);
    return finish(op, KvStatus::NOT_FOUND);
  }
  s.seen_locks[0] = locks[0];
  s.seen_locks[1] = locks[1];
  s.confirming = true;
  if (held) return retry_later(op, Phase::G_CONFIRM);
  get_read_buckets(op, Phase::G_CONFIRM);
}

// RTT2: the next candidate item, whole (its length is in the slot).
void ClientCore::get_item_next(Op& op) {
  LookupState& s = op.lookup();
  if (s.next >= s.ncandidates) {
    s.ncandidates = 0;
    return get_buckets_done(op);  // every candidate was another key: a miss, to be confirmed
  }
  const SlotRef& c = s.candidates[s.next];
  const uint64_t bytes = static_cast<uint64_t>(slot_units(c.slot)) * kUnit;
  free_item(op);
  // A slot names memory we are about to READ: one outside the heap is damage
  // (slots are written whole), and a READ there would break the connection for
  // every operation on it. Only this operation fails.
  if (!slot_in_heap(op, c.slot)) return finish(op, KvStatus::CORRUPT);
  if (op.ext.lkey != 0 || bytes > link(op).item_limit) return get_large_next(op, c.slot);  // large.cc
  if (bytes < kHeader || bytes > largest_item(op) || !take_item(op, bytes)) {
    return retry_later(op, Phase::G_BUCKETS);  // no scratch now, or a slot from the future: read again later
  }
  op.begin(Phase::G_ITEM);
  note_access(op, slot_offset(c.slot));
  link(op).sends.read(op.tag(), op.item.offset, static_cast<uint32_t>(bytes), heap_addr(op, slot_offset(c.slot)));
  link(op).sends.signal_last();
}

void ClientCore::get_item_done(Op& op) {
  // When the READ's bytes were ours: before the checksum, whose own time says
  // nothing of reuse (a 1 MiB CRC32C took over 25 ms under the guest's emulated CPU).
  const auto completed = polled_at();  // after the poll returned: after the READ completed
  LookupState& s = op.lookup();
  const SlotRef& c = s.candidates[s.next];
  const uint8_t* item = mem(op.item.offset);
  const uint32_t key_len = load_le<uint16_t>(item + u32(ItemHeader::KEY_LEN));
  const uint32_t value_len = load_le<uint32_t>(item + u32(ItemHeader::VALUE_LEN));
  const uint64_t bytes = static_cast<uint64_t>(slot_units(c.slot)) * kUnit;
  const bool intact = item_bytes(key_len, value_len) <= bytes &&
                      load_le<uint32_t>(item + kChecksumAt) == item_checksum(item, key_len, value_len);
  const bool late = completed - s.started > std::chrono::milliseconds(link(op).region.grace_ms / 2);
  if (!intact || late) {
    // Torn, or a block that may have been freed and reused under us: start
    // over, through the backoff, which counts the retry and ends the op at its
    // deadline (a grace period too short for any READ made every start late).
    free_item(op);
    if (!intact && op.retries + 1 > kMaxGetRetries) return finish(op, KvStatus::CORRUPT, op.retries + 1);
    return retry_later(op, Phase::G_BUCKETS);
  }
  if (key_len != op.key_len || std::memcmp(item + kHeader, op.key, key_len) != 0) {
    // Same fingerprint, another key. (Should the list fill, the slot is
    // merely read again.)
    if (s.nruled_out < std::size(s.ruled_out)) s.ruled_out[s.nruled_out++] = c.slot;
    s.next++;
    return get_item_next(op);
  }
  // Our key's item, intact. Expired: the key is absent (only bytes items
  // expire; an expiry no writer writes is damage, expiry.h).
  const Expiry expiry = expiry_of(item);
  if (expiry == Expiry::BAD) return finish(op, KvStatus::CORRUPT, op.retries);
  if (expiry == Expiry::EXPIRED) return found_expired(op);
  if (load_le<uint16_t>(item + u32(ItemHeader::TYPE)) != u32(type_for(op.type))) {
    free_item(op);
    return finish(op, KvStatus::TYPE_MISMATCH);
  }
  if (op.is_atomic()) {
    AtomicState& a = op.atomic();
    a.addr = heap_addr(op, slot_offset(c.slot)) + kAtomicWord;
    a.expect = as_free(load_le<uint64_t>(item + kAtomicWord));
    free_item(op);
    cache_store(op);
    return atomic_step(op);
  }
  op.version = load_le<uint64_t>(item + u32(ItemHeader::VERSION));
  op.expiry = item_expiry(item);
  location_found(op, c.slot, item);
  lend_value(op, key_len, value_len);
}

// The key's item has expired: the key is absent, as if no slot named it. A GET
// misses; INCR and LOCK create their item, which replaces the expired one under
// the bucket locks (write.cc); UNLOCK finds no lock.
void ClientCore::found_expired(Op& op) {
  if (op.type == KvOp::INCR || op.type == KvOp::LOCK) return begin_create(op);
  finish(op, KvStatus::NOT_FOUND);
}

// A GET's answer: the value stays in the item buffer, in scratch, until JS
// has copied it: lent until the poll after the one that hands it out.
void ClientCore::lend_value(Op& op, uint32_t key_len, uint32_t value_len) {
  if (reads_lapsed(op)) return finish(op, KvStatus::READ_LEASE_LAPSED);  // finish frees the item
  Ready& r = ready_.emplace_back();
  r.result.id = op.id;
  r.result.status = KvStatus::OK;
  r.result.value_offset = op.item.offset + kHeader + key_len;
  r.result.value_len = value_len;
  r.result.version = op.version;
  r.result.expiry = op.expiry;
  r.lent = op.item;
  op.item.held = false;
  release_op(op);
}

}  // namespace rkv::kv
