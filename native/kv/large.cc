// GET of an item in two pieces (docs/protocol.md, "Large values"): the header
// and key into the op's area, the value straight into the caller's registered
// buffer, in one doorbell, so a 64 MiB value is never copied through scratch.
// Also what a GET without such a buffer does with an item larger than the
// buffer pool holds: it reads the header and key alone and answers
// BUFFER_TOO_SMALL with the value's length, so the caller can bring a buffer.
//
// The READ of the value piece may run past the item up to the length its slot
// gives (a coarse length is rounded up to 4 KiB); it never runs past the block,
// whose class is whole granules (protocol/size-classes.ts). The header's exact
// VALUE_LEN, the key and the checksum over both pieces decide.
//
// A large READ may take longer than half the grace period (64 MiB over a slow
// link), after which the timing rule (get.cc) no longer proves its block was not
// reused. Then the header is READ again once the value has landed: the same
// VERSION with STATE still equal to it means the item was not superseded by
// then, so its block had not been retired, let alone reused, while the value
// was read (a reuse writes a new header; versions are never repeated).
#include <algorithm>

#include "client_core.h"
#include "op.h"

namespace rkv::kv {

void ClientCore::get_large_next(Op& op, uint64_t slot) {
  LookupState& s = op.lookup();
  const uint64_t bytes = static_cast<uint64_t>(slot_units(slot)) * kUnit;
  const uint32_t head = kHeader + op.key_len;
  if (bytes < head) {  // too short to be our key's
    if (s.nruled_out < std::size(s.ruled_out)) s.ruled_out[s.nruled_out++] = slot;
    s.next++;
    return get_item_next(op);
  }
  if (bytes > largest_item(op)) return retry_later(op, Phase::G_BUCKETS);  // a slot from the future, as get.cc
  const uint64_t item = heap_addr(op, slot_offset(slot));
  const uint32_t into = static_cast<uint32_t>(std::min<uint64_t>(bytes - head, op.ext.len));
  op.begin(Phase::G_LARGE);
  note_access(op, slot_offset(slot));
  link(op).sends.read(op.tag(), op.area(area::CAND), head, item);
  if (op.ext.lkey != 0 && into > 0) link(op).sends.read_into(op.tag(), op.ext.data, op.ext.lkey, into, item + head);
  link(op).sends.signal_last();
}

// getInto on a location-cache hit (location_cache.cc): the item the entry names, in two pieces
// as above, in one doorbell. The checks are a hit's, with the checksum over both pieces; a hit
// that fails them is forgotten and the full path reads the value into the buffer again. Only a
// READ longer than the hit's trust (a large value on a slow link) is confirmed as the full
// path's late READ is, by a second READ of the header (G_LARGE_LIVE).
bool ClientCore::get_cached_into(Op& op) {
  const uint32_t head = kHeader + op.key_len;
  const LocationCache::Entry* e = cached_location(op, head);
  if (e == nullptr) return false;
  const uint64_t bytes = static_cast<uint64_t>(e->units) * kUnit;
  LookupState& s = op.lookup();
  s.started = submitted_at_;  // called from submit() alone, as get_cached
  s.cached = *e;
  op.begin(Phase::G_CACHED_INTO);
  note_access(op, e->offset);
  const uint64_t item = heap_addr(op, e->offset);
  const uint32_t into = static_cast<uint32_t>(std::min<uint64_t>(bytes - head, op.ext.len));
  link(op).sends.read(op.tag(), op.area(area::CAND), head, item);
  if (into > 0) link(op).sends.read_into(op.tag(), op.ext.data, op.ext.lkey, into, item + head);
  link(op).sends.signal_last();
  return true;
}

void ClientCore::get_cached_into_done(Op& op) {
  const auto completed = polled_at();  // before the checksum, as get.cc
  LookupState& s = op.lookup();
  const uint8_t* head = mem(op.area(area::CAND));
  const uint64_t bytes = static_cast<uint64_t>(s.cached.units) * kUnit;
  const uint32_t key_len = load_le<uint16_t>(head + u32(ItemHeader::KEY_LEN));
  const uint32_t value_len = load_le<uint32_t>(head + u32(ItemHeader::VALUE_LEN));
  const uint64_t version = load_le<uint64_t>(head + u32(ItemHeader::VERSION));
  const bool ours = key_len == op.key_len && std::memcmp(head + kHeader, op.key, key_len) == 0 && item_bytes(key_len, value_len) <= bytes;
  if (ours && value_len > op.ext.len) {
    // Longer than the buffer: the full path answers BUFFER_TOO_SMALL. The entry may well be current:
    // kept, and counted as a miss, not as a failed check (that counter says stale or damaged).
    link(op).locations.stats.misses++;
    op.start_lookup();
    return get_read_buckets(op, Phase::G_BUCKETS);
  }
  const bool valid =
      ours && value_len <= op.ext.len && load_le<uint16_t>(head + u32(ItemHeader::TYPE)) == u32(ItemType::BYTES) &&
      cached_item_current(s.cached.version, head) &&
      load_le<uint32_t>(head + kChecksumAt) == item_checksum_parts(head, key_len, op.ext.data, value_len);
  if (!valid || expiry_of(head) == Expiry::BAD) return cached_location_failed(op);
  // From here on the full path's: its candidate is the slot the entry names.
  s.candidates[0] = {make_slot(op.kh.fp, s.cached.units, s.cached.offset), 0, 0};
  s.ncandidates = 1;
  s.next = 0;
  op.version = version;
  if (completed - s.started >= location_trust(op)) {
    // Two round trips after all: a miss in the counts (oneRoundTripGets is hits).
    link(op).locations.stats.misses++;
    op.begin(Phase::G_LARGE_LIVE);
    link(op).sends.read(op.tag(), op.area(area::LIVE), kHeader, heap_addr(op, s.cached.offset));
    link(op).sends.signal_last();
    return;
  }
  link(op).locations.stats.hits++;
  answer_large(op, head, value_len);
}

void ClientCore::get_large_done(Op& op) {
  const auto completed = Clock::now();  // before the checksum, as get.cc
  LookupState& s = op.lookup();
  const SlotRef& c = s.candidates[s.next];
  const uint8_t* head = mem(op.area(area::CAND));
  const uint32_t key_len = load_le<uint16_t>(head + u32(ItemHeader::KEY_LEN));
  const uint32_t value_len = load_le<uint32_t>(head + u32(ItemHeader::VALUE_LEN));
  const uint64_t bytes = static_cast<uint64_t>(slot_units(c.slot)) * kUnit;
  const bool late = completed - s.started > std::chrono::milliseconds(link(op).region.grace_ms / 2);
  const bool ours = key_len == op.key_len && std::memcmp(head + kHeader, op.key, key_len) == 0 &&
                    load_le<uint16_t>(head + u32(ItemHeader::TYPE)) == u32(type_for(op.type));
  // Late, only our key's intact item can be confirmed live; anything else may be
  // a reused block's, which says nothing of the key: start over.
  if (late && (!ours || op.ext.lkey == 0)) return retry_later(op, Phase::G_BUCKETS);
  if (key_len != op.key_len || std::memcmp(head + kHeader, op.key, key_len) != 0) {
    if (s.nruled_out < std::size(s.ruled_out)) s.ruled_out[s.nruled_out++] = c.slot;  // another key
    s.next++;
    return get_item_next(op);
  }
  if (!ours) return finish(op, KvStatus::TYPE_MISMATCH);
  if (op.ext.lkey == 0 || value_len > op.ext.len) {
    // The value does not fit where it was to land. Its length is the header's,
    // unchecked (the checksum needs the value): a hint the caller's retry with a
    // buffer that size verifies.
    finish(op, KvStatus::BUFFER_TOO_SMALL, value_len);  // the result's DETAIL: the bytes needed
    ready_.back().result.value_len = value_len;
    return;
  }
  const uint64_t read = std::min<uint64_t>(bytes - kHeader - key_len, op.ext.len);
  const bool intact = item_bytes(key_len, value_len) <= bytes && value_len <= read &&
                      load_le<uint32_t>(head + kChecksumAt) == item_checksum_parts(head, key_len, op.ext.data, value_len);
  if (!intact) {
    if (op.retries + 1 > kMaxGetRetries) return finish(op, KvStatus::CORRUPT, op.retries + 1);
    return retry_later(op, Phase::G_BUCKETS);
  }
  op.version = load_le<uint64_t>(head + u32(ItemHeader::VERSION));
  if (late) {  // is the item still live now that the value has landed?
    op.begin(Phase::G_LARGE_LIVE);
    link(op).sends.read(op.tag(), op.area(area::LIVE), kHeader, heap_addr(op, slot_offset(c.slot)));
    link(op).sends.signal_last();
    return;
  }
  answer_large(op, head, value_len);
}

void ClientCore::get_large_live(Op& op) {
  const uint8_t* now = mem(op.area(area::LIVE));
  const uint64_t version = load_le<uint64_t>(now + u32(ItemHeader::VERSION));
  if (version != op.version || load_le<uint64_t>(now + kStateAt) != version) {
    return retry_later(op, Phase::G_BUCKETS);  // superseded (and maybe reused) while we read
  }
  const uint8_t* head = mem(op.area(area::CAND));
  answer_large(op, head, load_le<uint32_t>(head + u32(ItemHeader::VALUE_LEN)));
}

void ClientCore::answer_large(Op& op, const uint8_t* head, uint32_t value_len) {
  // Intact and (if late) confirmed live: only now may its expiry say the key is absent.
  const Expiry expiry = expiry_of(head);
  if (expiry == Expiry::BAD) return finish(op, KvStatus::CORRUPT, op.retries);
  if (expiry == Expiry::EXPIRED) return found_expired(op);
  op.expiry = item_expiry(head);
  if (reads_lapsed(op)) return finish(op, KvStatus::READ_LEASE_LAPSED);
  const SlotRef& c = op.lookup().candidates[op.lookup().next];
  location_found(op, c.slot, head);
  Ready& r = ready_.emplace_back();
  r.result.id = op.id;
  r.result.status = KvStatus::OK;
  r.result.value_offset = 0;  // in the caller's buffer, at its offset
  r.result.value_len = value_len;
  r.result.version = op.version;
  r.result.expiry = op.expiry;
  r.result.detail = op.retries;
  release_op(op);
}

}  // namespace rkv::kv
