// PUT, DELETE and CAS, and the creation of a counter or lock: a key's slot
// changes only under both of its buckets' locks (docs/protocol.md, "PUT").
//
//   W_CREDIT    our notification ring looks full: read how far the server got
//   W_READ      the new item into its granted block (once), both buckets
//   W_LOCK      CAS both bucket locks (lower bucket first), reread both behind
//               a fence, read the header and key of same-fingerprint items,
//               and (region format 5) the key's hash slot's epoch word
//   W_VERIFY    items whose slots appeared between the reads
//   W_ALT(_LOCK) both buckets full: lock the emptiest bucket an entry can move to
//   W_COMMIT    the mark on the item unlinked, the slot(s), the lock releases,
//               the notification record
//   W_RELEASE   give the locks back, then retry or finish
#include <algorithm>

#include "client_core.h"
#include "hash_slot.h"
#include "op.h"

namespace rkv::kv {

namespace {
constexpr uint32_t kRingRecords = u32(KvLayout::RING_RECORDS);
}  // namespace

// RTT1: the new item into its granted block (PUT, once), and both buckets.
void ClientCore::write_read_buckets(Op& op) {
  WriteState& w = op.write();
  op.epoch_wait = false;  // set again only if this attempt finds its epoch word closed (retry_later's TIMEOUT)
  if (!op.ring_credit) {
    if (link(op).ring.written + link(op).ring.reserved >= link(op).ring.consumed + kRingRecords) {
      // Our ring is full as far as we know: read how far the server got.
      op.begin(Phase::W_CREDIT);
      link(op).sends.read(op.tag(), op.area(area::CREDIT), 8, link(op).region.addr + link(op).region.ring_offset);
      return link(op).sends.signal_last();
    }
    op.ring_credit = true;
    link(op).ring.reserved++;
  }
  op.begin(Phase::W_READ);
  if (op.item.held && !w.item_written) {
    const uint8_t* item = mem(op.item.offset);
    const uint32_t key_len = load_le<uint16_t>(item + u32(ItemHeader::KEY_LEN));
    const uint32_t value_len = load_le<uint32_t>(item + u32(ItemHeader::VALUE_LEN));
    if (op.ext.lkey != 0) {
      // Header and key from scratch, the value from the caller's registered
      // buffer: two WRITEs of one doorbell, in order before the slot's.
      link(op).sends.write(op.tag(), op.item.offset, kHeader + key_len, heap_addr(op, op.block.offset));
      if (value_len > 0) {
        link(op).sends.write_from(op.tag(), op.ext.data, op.ext.lkey, value_len, heap_addr(op, op.block.offset) + kHeader + key_len);
      }
    } else {
      link(op).sends.write(op.tag(), op.item.offset, static_cast<uint32_t>(item_bytes(key_len, value_len)),
                           heap_addr(op, op.block.offset));
    }
    w.item_written = true;
  }
  link(op).sends.read(op.tag(), op.area(area::B1), kBucketBytes, bucket_addr(op, w.locks[0].bucket));
  link(op).sends.read(op.tag(), op.area(area::B2), kBucketBytes, bucket_addr(op, w.locks[1].bucket));
  link(op).sends.signal_last();
}

void ClientCore::credit_done(Op& op) {
  link(op).ring.consumed = std::max(link(op).ring.consumed, load_le<uint64_t>(mem(op.area(area::CREDIT))));
  if (link(op).ring.written + link(op).ring.reserved >= link(op).ring.consumed + kRingRecords) return retry_later(op, Phase::W_READ);
  write_read_buckets(op);
}

// RTT2: lock both buckets (lower index first), then read them again behind a
// fence, plus the header and key of every item whose fingerprint matches.
void ClientCore::write_lock(Op& op) {
  WriteState& w = op.write();
  const uint8_t* images[2] = {mem(op.area(area::B1)), mem(op.area(area::B2))};
  const uint64_t w1 = lock_of(images[0]), w2 = lock_of(images[1]);
  if (lock_owner(w1) != 0 || lock_owner(w2) != 0) return retry_later(op, Phase::W_READ);
  w.locks[0].expect = w1;
  w.locks[1].expect = w2;
  op.begin(Phase::W_LOCK);
  const int first = w.locks[0].bucket < w.locks[1].bucket ? 0 : 1;
  for (int k : {first, 1 - first}) {
    const BucketLock& lock = w.locks[k];
    link(op).sends.cas(op.tag(), op.area(area::CAS + 8 * k), bucket_addr(op, lock.bucket), lock.expect,
                       lock_word(static_cast<uint32_t>(lock.expect >> kLockVersionShift), link(op).region.client_id));
  }
  link(op).sends.read(op.tag(), op.area(area::F1), kBucketBytes, bucket_addr(op, w.locks[0].bucket), true);
  link(op).sends.read(op.tag(), op.area(area::F2), kBucketBytes, bucket_addr(op, w.locks[1].bucket), true);
  if (link(op).region.epoch_offset != 0) {
    // Fenced: read after both CASes took effect. A barrier that closes the word
    // after this READ sees our locks held and waits for them (epoch-barrier.ts).
    const uint64_t word = link(op).region.epoch_offset + 8ull * key_hash_slot(op.key, op.key_len);
    link(op).sends.read(op.tag(), op.area(area::EPOCH), 8, link(op).region.addr + word, true);
  }
  w.ncandidates = 0;
  w.damaged_slot = false;
  for (const uint8_t* image : images) {
    for (uint32_t i = 0; i < kSlots; i++) add_candidate_read(op, slot_at(image, i));
  }
  link(op).sends.signal_last();
}

// Reads the header and key of a same-fingerprint item, to tell whether it is
// our key. Items shorter than our header + key cannot be.
void ClientCore::add_candidate_read(Op& op, uint64_t slot) {
  WriteState& w = op.write();
  if (slot == 0 || slot_fp(slot) != op.kh.fp || w.ncandidates >= kMaxCandidates) return;
  if (std::find(w.candidates, w.candidates + w.ncandidates, slot) != w.candidates + w.ncandidates) return;
  const uint32_t want = kHeader + op.key_len;
  if (static_cast<uint64_t>(slot_units(slot)) * kUnit < want) return;
  if (!slot_in_heap(op, slot)) {
    w.damaged_slot = true;  // maybe our key's: the write fails with KV_CORRUPT (write_decide)
    return;
  }
  link(op).sends.read(op.tag(), op.area(area::CAND + w.ncandidates * area::kCandStride), want, heap_addr(op, slot_offset(slot)));
  w.candidates[w.ncandidates++] = slot;
}

void ClientCore::write_locked(Op& op) {
  WriteState& w = op.write();
  w.locks[0].held = load_le<uint64_t>(mem(op.area(area::CAS))) == w.locks[0].expect;
  w.locks[1].held = load_le<uint64_t>(mem(op.area(area::CAS + 8))) == w.locks[1].expect;
  if (!w.locks[0].held || !w.locks[1].held) return release_and_retry(op);
  if (link(op).region.epoch_offset != 0) {
    const uint64_t word = load_le<uint64_t>(mem(op.area(area::EPOCH)));
    const uint32_t epoch = static_cast<uint32_t>(word >> u32(EpochWord::EPOCH_SHIFT));
    const uint32_t state = static_cast<uint32_t>(word);
    const bool known = state == u32(EpochWord::OPEN) || state == u32(EpochWord::CLOSED) || state == u32(EpochWord::FENCED);
    if (!known) return release_and_finish(op, KvStatus::CORRUPT);  // damage: its epoch means nothing either
    // Another epoch than our configuration's: the hash slot's replicas changed; the writer refreshes.
    if (op.epoch != 0 && epoch != op.epoch) return release_and_finish(op, KvStatus::EPOCH_MOVED, epoch);
    // A barrier is running, or the member does not serve the hash slot now: wait, within the timeout.
    if (state != u32(EpochWord::OPEN)) {
      op.epoch_wait = true;
      return release_and_retry(op);
    }
  }
  // Under the locks, the fenced images are the truth. Any same-fingerprint
  // slot whose item we have not read yet is read now (rare: it appeared
  // between the first read and the lock).
  const size_t before = link(op).sends.size();
  op.begin(Phase::W_VERIFY);
  for (const uint8_t* image : {mem(op.area(area::F1)), mem(op.area(area::F2))}) {
    for (uint32_t i = 0; i < kSlots; i++) add_candidate_read(op, slot_at(image, i));
  }
  if (link(op).sends.size() > before) return link(op).sends.signal_last();
  write_decide(op);
}

// Under both locks: which slot changes, or why the write ends here.
void ClientCore::write_decide(Op& op) {
  WriteState& w = op.write();
  const uint8_t* images[2] = {mem(op.area(area::F1)), mem(op.area(area::F2))};
  w.target_bucket = w.target_index = -1;
  w.old_slot = 0;
  w.seal_add = 0;
  w.final_status = KvStatus::OK;
  if (w.damaged_slot) return release_and_finish(op, KvStatus::CORRUPT);
  for (uint32_t b = 0; b < 2 && w.target_bucket < 0; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      const uint64_t slot = slot_at(images[b], i);
      if (slot == 0 || slot_fp(slot) != op.kh.fp) continue;
      const uint64_t* found = std::find(w.candidates, w.candidates + w.ncandidates, slot);
      if (found == w.candidates + w.ncandidates) continue;  // too short to be ours
      const uint8_t* header = mem(op.area(area::CAND + static_cast<size_t>(found - w.candidates) * area::kCandStride));
      if (load_le<uint16_t>(header + u32(ItemHeader::KEY_LEN)) != op.key_len ||
          std::memcmp(header + kHeader, op.key, op.key_len) != 0) {
        continue;
      }
      if (header_expired(header)) {
        // Our key's item has expired: the key is absent. This write replaces the
        // item (a CAS only "if absent"), a DELETE unlinks it and answers NOT_FOUND.
        if (op.type == KvOp::CAS && w.expected_version != 0 && !op.group.is_follower()) {
          return release_and_finish(op, KvStatus::VERSION_MISMATCH);
        }
        if (op.type == KvOp::DELETE) w.final_status = KvStatus::NOT_FOUND;
        w.target_bucket = static_cast<int>(b);
        w.target_index = static_cast<int>(i);
        w.old_slot = slot;
        break;  // only bytes items expire: no seal
      }
      const uint16_t type = load_le<uint16_t>(header + u32(ItemHeader::TYPE));
      if (op.group.is_follower() && !op.is_atomic()) {
        // A backup's slot is made to name the new item whatever it held: the
        // primary's images decided the type and the version (replicated.cc).
        // (An INCR's backup that finds a counter made meanwhile adds to it, below.)
        w.target_bucket = static_cast<int>(b);
        w.target_index = static_cast<int>(i);
        w.old_slot = slot;
        w.seal_add = type == u32(ItemType::COUNTER) ? kCounterSeal : type == u32(ItemType::LOCK) ? kLockSeal : 0;
        break;
      }
      if (op.type != KvOp::DELETE && type != u32(type_for(op.type))) {
        return release_and_finish(op, KvStatus::TYPE_MISMATCH);
      }
      if (op.is_atomic()) {
        // Created by someone else meanwhile: use theirs.
        AtomicState& a = op.atomic();
        a.addr = heap_addr(op, slot_offset(slot)) + kAtomicWord;
        a.expect = as_free(load_le<uint64_t>(header + kAtomicWord));
        w.then_atomic = true;
        return release_and_retry(op);
      }
      if (op.type == KvOp::CAS && load_le<uint64_t>(header + u32(ItemHeader::VERSION)) != w.expected_version) {
        return release_and_finish(op, KvStatus::VERSION_MISMATCH);
      }
      w.target_bucket = static_cast<int>(b);
      w.target_index = static_cast<int>(i);
      w.old_slot = slot;
      w.seal_add = type == u32(ItemType::COUNTER) ? kCounterSeal : type == u32(ItemType::LOCK) ? kLockSeal : 0;
      break;
    }
  }
  if (op.type == KvOp::DELETE) {
    // A backup that lacks the key keeps its locks until the group commits, so no
    // write of the key lands there between its look and the primary's DELETE.
    if (w.target_bucket < 0 && op.group.is_follower()) return write_commit(op);
    if (w.target_bucket < 0) return release_and_finish(op, KvStatus::NOT_FOUND);
    store_le<uint64_t>(mem(op.area(area::SLOT_NEW)), 0);
    return write_commit(op);
  }
  if (op.type == KvOp::CAS && w.target_bucket < 0 && w.expected_version != 0 && !op.group.is_follower()) {
    return release_and_finish(op, KvStatus::VERSION_MISMATCH);  // expected a version; the key is absent
  }
  store_le<uint64_t>(mem(op.area(area::SLOT_NEW)), make_slot(op.kh.fp, w.item_units, op.block.offset));
  op.block.published = true;  // once committed
  if (w.target_bucket < 0) {
    // A new key: the emptier of its two buckets.
    const int b = occupancy(images[0]) <= occupancy(images[1]) ? 0 : 1;
    const int index = empty_index(images[b]);
    if (index < 0) return write_displace(op);
    w.target_bucket = b;
    w.target_index = index;
  }
  write_commit(op);
}

// Both buckets full: move one resident entry to its other bucket. The other
// bucket of an entry follows from its slot (partial-key cuckoo hashing), so
// one doorbell reads every possible destination.
void ClientCore::write_displace(Op& op) {
  WriteState& w = op.write();
  const uint8_t* images[2] = {mem(op.area(area::F1)), mem(op.area(area::F2))};
  w.nalt = 0;
  op.begin(Phase::W_ALT);
  for (uint32_t b = 0; b < 2; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      const uint32_t alt = alternate_bucket(w.locks[b].bucket, slot_fp(slot_at(images[b], i)), link(op).region.bucket_count);
      if (alt == w.locks[0].bucket || alt == w.locks[1].bucket) continue;
      if (std::find(w.alt_buckets, w.alt_buckets + w.nalt, alt) != w.alt_buckets + w.nalt) continue;
      link(op).sends.read(op.tag(), op.area(area::ALT + w.nalt * kBucketBytes), kBucketBytes, bucket_addr(op, alt));
      w.alt_buckets[w.nalt++] = alt;
    }
  }
  if (w.nalt == 0) return release_and_finish(op, KvStatus::TABLE_FULL);
  link(op).sends.signal_last();
}

void ClientCore::write_alt_done(Op& op) {
  WriteState& w = op.write();
  const uint8_t* images[2] = {mem(op.area(area::F1)), mem(op.area(area::F2))};
  int best = -1;
  uint32_t best_fill = kSlots;
  for (uint32_t b = 0; b < 2; b++) {
    for (uint32_t i = 0; i < kSlots; i++) {
      const uint64_t slot = slot_at(images[b], i);
      const uint32_t alt = alternate_bucket(w.locks[b].bucket, slot_fp(slot), link(op).region.bucket_count);
      const uint32_t* at = std::find(w.alt_buckets, w.alt_buckets + w.nalt, alt);
      if (at == w.alt_buckets + w.nalt) continue;
      const uint8_t* image = mem(op.area(area::ALT + static_cast<size_t>(at - w.alt_buckets) * kBucketBytes));
      const uint32_t fill = occupancy(image);
      if (fill < best_fill && lock_owner(lock_of(image)) == 0) {
        best_fill = fill;
        best = static_cast<int>(at - w.alt_buckets);
        w.move = {slot, static_cast<uint8_t>(b), static_cast<uint8_t>(i)};
        w.locks[2].expect = lock_of(image);
      }
    }
  }
  if (best < 0) return release_and_finish(op, KvStatus::TABLE_FULL);
  BucketLock& lock = w.locks[2];
  lock.bucket = w.alt_buckets[best];
  op.begin(Phase::W_ALT_LOCK);
  link(op).sends.cas(op.tag(), op.area(area::CAS + 16), bucket_addr(op, lock.bucket), lock.expect,
                     lock_word(static_cast<uint32_t>(lock.expect >> kLockVersionShift), link(op).region.client_id));
  link(op).sends.read(op.tag(), op.area(area::FALT), kBucketBytes, bucket_addr(op, lock.bucket), true);
  link(op).sends.signal_last();
}

void ClientCore::write_alt_locked(Op& op) {
  WriteState& w = op.write();
  w.locks[2].held = load_le<uint64_t>(mem(op.area(area::CAS + 16))) == w.locks[2].expect;
  w.alt_index = w.locks[2].held ? empty_index(mem(op.area(area::FALT))) : -1;
  if (w.alt_index < 0) return release_and_retry(op);
  w.moving = true;
  w.target_bucket = w.move.bucket;
  w.target_index = w.move.index;
  store_le<uint64_t>(mem(op.area(area::SLOT_MOVE)), w.move.slot);
  write_commit(op);
}

// RTT3: the slot(s), the releases (which clear the owner and bump the
// version), and the notification record with its immediate.
void ClientCore::write_commit(Op& op) {
  // A replicated write's member commits when its group says (replicated.cc).
  if (op.group.grouped() && !op.group.go) {
    op.group.at_atomic = false;
    return group_stop(op, GroupState::Vote::HELD);
  }
  WriteState& w = op.write();
  op.begin(Phase::W_COMMIT);
  if (w.target_bucket < 0 && op.group.is_follower() && op.type == KvOp::DELETE) {
    // A backup's DELETE of a key it lacks: nothing to change, only its locks to give back.
    add_releases(op);
    return link(op).sends.signal_last();
  }
  // A DELETE's of a counter or lock; a backup's write over one (only DELETE and backups set seal_add).
  const bool seal = w.seal_add != 0;
  if (seal) {
    // Sealed before it is unlinked (the slot WRITE below waits for the atomic: FENCE).
    link(op).sends.faa(op.tag(), op.area(area::ATOM), heap_addr(op, slot_offset(w.old_slot)) + kAtomicWord, w.seal_add);
  }
  if (w.old_slot != 0) {
    // Marked before it is unlinked (same queue pair: the mark lands first), so
    // a client READing it through its location cache never takes it for the
    // key's current item (location_cache.cc).
    store_le<uint64_t>(mem(op.area(area::MARK)), u32(ItemState::SUPERSEDED));
    link(op).sends.write(op.tag(), op.area(area::MARK), 8, heap_addr(op, slot_offset(w.old_slot)) + kStateAt);
  }
  if (w.moving) {
    // The moved entry is written to its new home before its old slot is reused.
    link(op).sends.write(op.tag(), op.area(area::SLOT_MOVE), 8, bucket_addr(op, w.locks[2].bucket) + 8 + 8 * w.alt_index);
  }
  link(op).sends.write(op.tag(), op.area(area::SLOT_NEW), 8,
                       bucket_addr(op, w.locks[w.target_bucket].bucket) + 8 + 8 * static_cast<uint32_t>(w.target_index));
  if (seal) link(op).sends.fence_last();
  add_releases(op);
  uint8_t* record = mem(op.area(area::RECORD));
  std::memset(record, 0, u32(KvLayout::RECORD_BYTES));
  // Only a LOCK's write makes a lock item (it creates one: atomics.cc); a backup's LOCK makes its own.
  const RecordKind kind = op.type == KvOp::DELETE ? RecordKind::DELETE : op.type == KvOp::LOCK ? RecordKind::PUT_LOCK : RecordKind::PUT;
  store_le<uint64_t>(record + u32(Record::KIND), u32(kind));
  store_le<uint64_t>(record + u32(Record::NEW_SLOT), load_le<uint64_t>(mem(op.area(area::SLOT_NEW))));
  store_le<uint64_t>(record + u32(Record::OLD_SLOT), w.old_slot);
  const uint64_t seq = link(op).ring.written++;
  link(op).ring.reserved--;
  op.ring_credit = false;
  const uint64_t record_addr = link(op).region.addr + link(op).region.ring_offset + u32(KvLayout::RING_HEADER_BYTES) +
                               (seq % kRingRecords) * u32(KvLayout::RECORD_BYTES);
  link(op).sends.write_imm(op.tag(), op.area(area::RECORD), u32(KvLayout::RECORD_BYTES), record_addr,
                           static_cast<uint32_t>(seq));
  link(op).sends.signal_last();
}

// One FETCH_AND_ADD per lock held: clears the owner and bumps the version.
void ClientCore::add_releases(Op& op) {
  WriteState& w = op.write();
  for (size_t k = 0; k < 3; k++) {
    if (!w.locks[k].held) continue;
    link(op).sends.faa(op.tag(), op.area(area::FAA + 8 * k), bucket_addr(op, w.locks[k].bucket), release_addend(link(op).region.client_id));
    w.locks[k].held = false;
  }
}

// Gives back every lock taken, then retries after a backoff (or, with a
// final status set, finishes with it).
void ClientCore::release_and_retry(Op& op) {
  const size_t before = link(op).sends.size();
  op.begin(Phase::W_RELEASE);
  add_releases(op);
  if (link(op).sends.size() > before) return link(op).sends.signal_last();
  released(op);
}

void ClientCore::release_and_finish(Op& op, KvStatus status, uint32_t detail) {
  op.write().final_status = status;
  op.write().final_detail = detail;
  release_and_retry(op);
}

void ClientCore::released(Op& op) {
  WriteState& w = op.write();
  op.block.published = false;
  if (w.then_atomic) {
    w.then_atomic = false;
    free_item(op);
    cache_store(op);
    return atomic_step(op);
  }
  if (op.group.grouped()) {
    return group_stop(op, w.final_status == KvStatus::OK ? GroupState::Vote::RETRY : GroupState::Vote::DONE,
                      w.final_status, w.final_detail);
  }
  if (w.final_status != KvStatus::OK) return finish(op, w.final_status, w.final_detail);
  retry_later(op, Phase::W_READ);
}

}  // namespace rkv::kv
