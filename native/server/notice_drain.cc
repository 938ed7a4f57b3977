// See notice_drain.h. Mirrors, record for record, what the server did in JS
// before (server/notices.ts kept the JS half).
#include "notice_drain.h"

#include <algorithm>
#include <cstring>

#include "../common/constants.generated.h"
#include "../kv/layout.h"

namespace rkv::server {

using transport::Completion;
using transport::RecvRequest;

namespace {

uint64_t load64(const uint8_t* at) {
  uint64_t v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

bool bit(const uint32_t* bits, uint64_t at) { return (bits[at >> 5] & (1u << (at & 31))) != 0; }

// Any bit set in [from, to)? Word at a time.
bool any_bit(const uint32_t* bits, uint64_t from, uint64_t to) {
  for (uint64_t at = from; at < to;) {
    uint32_t first = static_cast<uint32_t>(at & 31);
    uint32_t span = static_cast<uint32_t>(std::min<uint64_t>(32 - first, to - at));
    uint32_t mask = span == 32 ? 0xffffffffu : ((1u << span) - 1) << first;
    if ((bits[at >> 5] & mask) != 0) return true;
    at += span;
  }
  return false;
}

// The slot's length, decoded by the one decoder (layout.h): rounded up to a
// granule for a coarse length, which its block (a class of whole granules) covers.
using kv::slot_units;
uint32_t slot_block(uint64_t slot) { return static_cast<uint32_t>(slot); }

static_assert(u32(NoticeOut::RETIRED_AT) == u32(NoticeOut::HEADER_WORDS), "NoticeOut sections");
static_assert(u32(NoticeOut::PUBLISHED_AT) == u32(NoticeOut::RETIRED_AT) + 2 * u32(NoticeOut::CAPACITY), "NoticeOut sections");
static_assert(u32(NoticeOut::LOCKS_AT) == u32(NoticeOut::PUBLISHED_AT) + 2 * u32(NoticeOut::CAPACITY), "NoticeOut sections");
static_assert(u32(NoticeOut::PROBLEMS_AT) == u32(NoticeOut::LOCKS_AT) + u32(NoticeOut::CAPACITY), "NoticeOut sections");
static_assert(u32(NoticeOut::SEEN_AT) == u32(NoticeOut::PROBLEMS_AT) + 3 * u32(NoticeOut::CAPACITY), "NoticeOut sections");
static_assert(u32(NoticeOut::WORDS) == u32(NoticeOut::SEEN_AT) + u32(NoticeOut::CAPACITY), "NoticeOut sections");

}  // namespace

NoticeDrain::NoticeDrain(NoticeLayout layout, RecvBuffers recv)
    : layout_(std::move(layout)), recv_(recv), heap_units_(layout_.heap_bytes / u32(KvLayout::UNIT_BYTES)) {
  touched_.reserve(u32(NoticeOut::CAPACITY));
  batch_.resize(u32(Limit::MAX_POLL_BATCH));
  owners_.resize(u32(Limit::MAX_POLL_BATCH));
}

void NoticeDrain::attach(uint32_t qp_num, uint32_t ring, std::shared_ptr<transport::Connection> connection) {
  Client& client = clients_[qp_num];
  client.ring = ring;
  client.ring_base = layout_.region + layout_.ring_offset + static_cast<uint64_t>(ring) * layout_.ring_bytes;
  client.connection = std::move(connection);
  client.reposts.clear();
  client.reposts.reserve(u32(Limit::MAX_POLL_BATCH));
  client.seen_stamp = 0;
  client.consumed = 0;
}

void NoticeDrain::detach(uint32_t qp_num) { clients_.erase(qp_num); }

bool NoticeDrain::slot_in_heap(uint64_t slot) const {
  if (slot == 0) return true;
  uint64_t units = slot_units(slot);
  return units > 0 && (static_cast<uint64_t>(slot_block(slot)) + units) * u32(KvLayout::UNIT_BYTES) <= layout_.heap_bytes;
}

// The heap's classOfUnits: the first class at least `units` long (classes.size() if none).
uint32_t NoticeDrain::class_of_units(uint32_t units) const {
  const auto& c = layout_.classes;
  return static_cast<uint32_t>(std::lower_bound(c.begin(), c.end(), units) - c.begin());
}

// The heap's retire() up to the grace queue (JS's): out as exactly one block of its class, then not granted.
bool NoticeDrain::retire(uint64_t slot) {
  uint32_t cls = class_of_units(slot_units(slot));
  uint64_t block = slot_block(slot);
  if (cls >= layout_.classes.size()) return false;
  uint64_t end = block + layout_.classes[cls];
  if (end > heap_units_ || !bit(granted_, block) || (end != heap_units_ && !bit(chunk_start_, end)) ||
      any_bit(chunk_start_, block + 1, end)) {
    return false;
  }
  granted_[block >> 5] &= ~(1u << (block & 31));
  return true;
}

void NoticeDrain::problem(uint32_t* out, uint32_t ring, uint32_t seq, uint32_t kind) {
  uint32_t* p = out + u32(NoticeOut::PROBLEMS_AT) + 3 * out[u32(NoticeOut::PROBLEMS)]++;
  p[0] = ring;
  p[1] = seq;
  p[2] = kind;
}

void NoticeDrain::seen(Client& client, uint32_t* out) {
  if (client.seen_stamp == stamp_) return;
  client.seen_stamp = stamp_;
  out[u32(NoticeOut::SEEN_AT) + out[u32(NoticeOut::SEEN)]++] = client.ring;
}

const uint8_t* NoticeDrain::record_of(const Client& client, uint32_t seq) {
  return client.ring_base + u32(KvLayout::RING_HEADER_BYTES) + (seq % u32(KvLayout::RING_RECORDS)) * u32(KvLayout::RECORD_BYTES);
}

// A notice's memory is cold: its client wrote the record from another core (or its NIC did),
// and the old block's bitmap words are anywhere in two bitmaps of a bit per unit. on_notice
// alone stalls on each miss in turn (the bitmap words were most of retire's time); this touches
// them for a whole batch first, in two passes (the slots are in the records), so the misses
// overlap. (The new item itself is not read at all since v11: its record's kind says a lock.) Only addresses on_notice would
// read, or would after checking them: every slot is checked to lie in the heap before it is followed.
void NoticeDrain::prefetch(int n) {
  for (int i = 0; i < n; i++) {
    if (owners_[i] != nullptr) __builtin_prefetch(record_of(*owners_[i], batch_[i].imm));
  }
  for (int i = 0; i < n; i++) {
    if (owners_[i] == nullptr) continue;
    const uint8_t* record = record_of(*owners_[i], batch_[i].imm);
    uint64_t old_slot = load64(record + u32(Record::OLD_SLOT));
    if (old_slot != 0 && slot_in_heap(old_slot)) {
      uint64_t block = slot_block(old_slot);
      uint64_t end = block + slot_units(old_slot);  // within its class's end, nearly always the same word
      __builtin_prefetch(&granted_[block >> 5]);
      __builtin_prefetch(&chunk_start_[block >> 5]);
      if (end < heap_units_ && (end >> 5) != (block >> 5)) __builtin_prefetch(&chunk_start_[end >> 5]);
    }
  }
}

void NoticeDrain::on_notice(Client& client, uint32_t seq, uint32_t* out) {
  out[u32(NoticeOut::NOTICES)]++;
  const uint8_t* record = record_of(client, seq);
  // The client wrote this record: nothing in it is trusted.
  uint64_t kind = load64(record + u32(Record::KIND));
  uint64_t new_slot = load64(record + u32(Record::NEW_SLOT));
  uint64_t old_slot = load64(record + u32(Record::OLD_SLOT));
  bool lock = kind == u32(RecordKind::PUT_LOCK);
  bool put = kind == u32(RecordKind::PUT) || lock, del = kind == u32(RecordKind::DELETE);
  if ((!put && !del) || !slot_in_heap(new_slot) || !slot_in_heap(old_slot)) {
    problem(out, client.ring, seq, u32(NoticeProblem::MALFORMED));
  } else {
    int32_t items = 0;
    if (old_slot != 0) {
      if (retire(old_slot)) {
        uint32_t* r = out + u32(NoticeOut::RETIRED_AT) + 2 * out[u32(NoticeOut::RETIRED)]++;
        r[0] = class_of_units(slot_units(old_slot));
        r[1] = slot_block(old_slot);
      } else {
        problem(out, client.ring, seq, u32(NoticeProblem::NOT_IN_USE));
      }
    } else if (put && new_slot != 0) {
      items++;
    }
    if (new_slot != 0) {
      uint32_t block = slot_block(new_slot);
      uint32_t* p = out + u32(NoticeOut::PUBLISHED_AT) + 2 * out[u32(NoticeOut::PUBLISHED)]++;
      p[0] = client.ring;
      p[1] = block;
      // The record's word, not the item's header: JS checks the item's type before acting on the index.
      if (lock) out[u32(NoticeOut::LOCKS_AT) + out[u32(NoticeOut::LOCKS)]++] = block;
    }
    if (del) items--;
    out[u32(NoticeOut::ITEMS_DELTA)] = static_cast<uint32_t>(static_cast<int32_t>(out[u32(NoticeOut::ITEMS_DELTA)]) + items);
  }
  client.consumed = static_cast<uint64_t>(seq) + 1;  // published once its receive is posted again
}

// The client reads this counter (RDMA READ) when its ring looks full, and then
// sends as many notices as it says were consumed: each takes a receive of ours,
// so it must not run ahead of the receives posted again (a WRITE_WITH_IMM that
// finds none is RNR-NAKed, and past the retries the connection breaks). One
// aligned 8-byte store.
void NoticeDrain::publish(Client& client) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(client.ring_base), client.consumed, __ATOMIC_RELEASE);
}

void NoticeDrain::notice(uint32_t qp_num, uint32_t seq, uint32_t* out) {
  std::memset(out, 0, u32(NoticeOut::HEADER_WORDS) * sizeof(uint32_t));
  auto it = clients_.find(qp_num);
  if (it == clients_.end()) return;
  stamp_++;
  seen(it->second, out);
  on_notice(it->second, seq, out);
  publish(it->second);  // no receive of ours was taken
}

uint32_t NoticeDrain::poll(transport::CompletionQueue& cq, uint32_t max, uint32_t* out, Completion* others) {
  std::memset(out, 0, u32(NoticeOut::HEADER_WORDS) * sizeof(uint32_t));
  max = std::min(max, u32(NoticeOut::CAPACITY));
  if (++stamp_ == 0) stamp_ = 1;
  uint32_t taken = 0;
  while (taken < max) {
    int n = cq.poll(batch_.data(), static_cast<int>(std::min(max - taken, u32(Limit::MAX_POLL_BATCH))));
    if (n <= 0) break;
    taken += static_cast<uint32_t>(n);
    for (int i = 0; i < n; i++) {
      const Completion& c = batch_[i];
      auto it = c.status == WcStatus::SUCCESS && c.opcode == Opcode::RECV_RDMA_WITH_IMM ? clients_.find(c.qp_num)
                                                                                          : clients_.end();
      owners_[i] = it == clients_.end() ? nullptr : &it->second;
    }
    prefetch(n);
    for (int i = 0; i < n; i++) {
      const Completion& c = batch_[i];
      if (owners_[i] == nullptr) {
        others[out[u32(NoticeOut::OTHERS)]++] = c;
        continue;
      }
      Client& client = *owners_[i];
      seen(client, out);
      on_notice(client, c.imm, out);
      // Its receive buffer goes back to its connection (a notice carries no payload).
      if (client.reposts.empty()) touched_.push_back(&client);
      if (c.wr_id < recv_.count) {
        client.reposts.push_back(RecvRequest{c.wr_id, reinterpret_cast<uint64_t>(recv_.base + c.wr_id * recv_.bytes),
                                             recv_.bytes, recv_.lkey});
      }
    }
    // One post per client per round, then its consumed counter.
    for (Client* client : touched_) {
      size_t bad = 0;
      if (!client->reposts.empty() &&
          client->connection->post_recv(client->reposts.data(), client->reposts.size(), &bad) != 0) {
        out[u32(NoticeOut::REPOST_FAILED)] += static_cast<uint32_t>(client->reposts.size() - bad);
      }
      client->reposts.clear();
      publish(*client);
    }
    touched_.clear();
    if (static_cast<uint32_t>(n) < std::min(max - (taken - n), u32(Limit::MAX_POLL_BATCH))) break;  // the CQ is empty
  }
  out[u32(NoticeOut::POLLED)] = taken;
  return taken;
}

}  // namespace rkv::server
