// GET in one round trip on a location-cache hit (location_cache.h,
// docs/protocol.md "GET on a cache hit"): READ the item where the cache says
// it is, and answer with it only if the READ itself proves it is the key's
// current item; anything else forgets the entry and takes GET's two round
// trips (get.cc). What the client learns from its GETs and writes is stored
// here too.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "client_core.h"
#include "op.h"

namespace rkv::kv {

namespace {
constexpr size_t kHugePage = 2u << 20;
}  // namespace

void LocationCache::init(size_t entries) {
  release();
  ways_ = entries < kWays ? static_cast<uint32_t>(entries) : kWays;
  sets_ = ways_ == 0 ? 0 : entries / ways_;
  if (sets_ == 0) return;
  const size_t bytes = sets_ * ways_ * sizeof(Entry) + sets_;
  mapped_ = bytes + kHugePage;  // room to align the table to a huge page
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    ways_ = 0, sets_ = 0, mapped_ = 0;
    throw std::bad_alloc();
  }
  mapping_ = p;
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  // A hint: without transparent huge pages (or with them off) the table works the same.
  (void)madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  entries_ = reinterpret_cast<Entry*>(aligned);  // zeroed by the kernel: every tag 0, empty
  used_ = reinterpret_cast<uint8_t*>(entries_ + sets_ * ways_);
}

void LocationCache::release() {
  if (mapping_ != nullptr) munmap(mapping_, mapped_);
  mapping_ = nullptr;
  entries_ = nullptr;
  used_ = nullptr;
  ways_ = 0, sets_ = 0, mapped_ = 0;
}

// RKV_TEST_UNCHECKED_LOCATIONS=version,state: a test hook that skips
// those checks of a hit, so a test can show that without them a stale value
// comes back (the checks are what the tests of the cache test).
uint32_t ClientCore::unchecked_locations_from_env() {
  const char* spec = std::getenv("RKV_TEST_UNCHECKED_LOCATIONS");
  if (spec == nullptr) return 0;
  const std::string s(spec);
  uint32_t skip = 0;
  if (s.find("version") != std::string::npos) skip |= kSkipVersion;
  if (s.find("state") != std::string::npos) skip |= kSkipState;
  return skip;
}

// How long a hit's READ may take, from its post to its completion: a block is
// reused only a grace period after its item was unlinked, so a READ shorter
// than that cannot overlap both the item and a reuse that follows its unlink.
// Half of it, as for GET's item READ (get.cc), is the margin.
std::chrono::milliseconds ClientCore::location_trust(const Op& op) const { return std::chrono::milliseconds(link(op).region.grace_ms / 2); }

// The cache's entry for the op's key if it can name an item of at least
// `least_bytes` in the heap; nullptr (a miss, counted) if not.
const LocationCache::Entry* ClientCore::cached_location(Op& op, uint64_t least_bytes) {
  const LocationCache::Entry* e = link(op).locations.find(location_tag(op.kh));
  const uint64_t bytes = e ? static_cast<uint64_t>(e->units) * kUnit : 0;
  if (e != nullptr && slot_in_heap(op, make_slot(op.kh.fp, e->units, e->offset)) && bytes >= least_bytes &&
      bytes <= largest_item(op)) {
    return e;
  }
  link(op).locations.stats.misses++;
  return nullptr;
}

// The checks that make a hit current, not just our key's bytes: the version is
// the one cached (so not a newer item in a reused block), and its STATE still
// equals that version (no writer marked it SUPERSEDED, so its slot still named
// it when the READ read the word; and the word is not a reused block's new
// item's). Each can be switched off by the test hook.
bool ClientCore::cached_item_current(uint64_t cached_version, const uint8_t* head) const {
  return ((unchecked_ & kSkipVersion) != 0 || load_le<uint64_t>(head + u32(ItemHeader::VERSION)) == cached_version) &&
         ((unchecked_ & kSkipState) != 0 || item_live(head));
}

// A hit that failed a check (stale, torn, damaged): the entry is forgotten and
// the full path decides, from the buckets.
void ClientCore::cached_location_failed(Op& op) {
  link(op).locations.stats.failures++;
  link(op).locations.forget(location_tag(op.kh));
  op.start_lookup();
  get_read_buckets(op, Phase::G_BUCKETS);
}

// A GET's first round trip when the cache knows where the key's item was:
// one READ of it. False: no usable entry (a miss), the caller reads the buckets.
bool ClientCore::get_cached(Op& op) {
  const auto now = submitted_at_;  // called from submit() alone: its clock, before any READ of it is posted
  const LocationCache::Entry* e = cached_location(op, kHeader);
  if (e == nullptr) return false;
  const uint64_t bytes = static_cast<uint64_t>(e->units) * kUnit;
  if (!take_item(op, bytes)) {
    link(op).locations.stats.misses++;
    return false;
  }
  LookupState& s = op.lookup();
  s.started = now;  // the READ starts after this (its duration is bounded below)
  s.cached = *e;
  op.begin(Phase::G_CACHED);
  note_access(op, e->offset);
  link(op).sends.read(op.tag(), op.item.offset, static_cast<uint32_t>(bytes), heap_addr(op, e->offset));
  link(op).sends.signal_last();
  return true;
}

// The hit's checks: the bytes are an intact item of our key, current
// (cached_item_current), and the READ was short enough that no reuse can have
// overlapped it.
void ClientCore::get_cached_done(Op& op) {
  const auto completed = polled_at();  // its poll's time, before the checks: the READ's duration, not theirs (get.cc)
  LookupState& s = op.lookup();
  const uint8_t* item = mem(op.item.offset);
  const uint64_t bytes = static_cast<uint64_t>(s.cached.units) * kUnit;
  const uint32_t key_len = load_le<uint16_t>(item + u32(ItemHeader::KEY_LEN));
  const uint32_t value_len = load_le<uint32_t>(item + u32(ItemHeader::VALUE_LEN));
  const bool valid =
      item_bytes(key_len, value_len) <= bytes && load_le<uint16_t>(item + u32(ItemHeader::TYPE)) == u32(ItemType::BYTES) &&
      key_len == op.key_len && std::memcmp(item + kHeader, op.key, key_len) == 0 && cached_item_current(s.cached.version, item) &&
      load_le<uint32_t>(item + kChecksumAt) == item_checksum(item, key_len, value_len) &&
      completed - s.started < location_trust(op);
  const Expiry expiry = valid ? expiry_of(item) : Expiry::BAD;
  if (expiry == Expiry::BAD) {  // a failed check, or an expiry no writer writes
    free_item(op);
    return cached_location_failed(op);
  }
  link(op).locations.stats.hits++;
  // The key's current item, expired: the key is absent (finish forgets the entry).
  if (expiry == Expiry::EXPIRED) return finish(op, KvStatus::NOT_FOUND);
  op.version = load_le<uint64_t>(item + u32(ItemHeader::VERSION));
  op.expiry = item_expiry(item);
  lend_value(op, key_len, value_len);
}

// A GET's two round trips found the key's item in `slot`. A SUPERSEDED item (its
// writer's slot WRITE is about to land, or its writer died before it) is not
// worth remembering.
void ClientCore::location_found(const Op& op, uint64_t slot, const uint8_t* item) {
  if (!item_live(item)) return;
  link(op).locations.store(location_tag(op.kh), slot_offset(slot), slot_units(slot),
                   load_le<uint64_t>(item + u32(ItemHeader::VERSION)));
}

// What an op that ends tells the cache: a PUT or CAS that committed its item
// (its slot WRITE has landed: the commit completed);
// a DELETE, a key found missing or of another type: forget it.
void ClientCore::location_after(Op& op, KvStatus status) {
  if (op.is_atomic() || op.key_len > kMaxKey) return;
  const uint64_t tag = location_tag(op.kh);
  switch (op.type) {
    case KvOp::PUT:
    case KvOp::CAS:
      if (status == KvStatus::OK && op.block.published) {
        const WriteState& w = op.write();
        link(op).locations.store(tag, op.block.offset, w.item_units, op.version);
      }
      return;
    case KvOp::DELETE: return link(op).locations.forget(tag);
    case KvOp::GET:
      if (status == KvStatus::NOT_FOUND || status == KvStatus::TYPE_MISMATCH) link(op).locations.forget(tag);
      return;
    default: return;
  }
}

}  // namespace rkv::kv
