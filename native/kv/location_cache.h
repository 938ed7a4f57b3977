// The location cache of GET: where a key's item was (its heap block, its
// length and its version), learned from the client's own GETs and PUTs, so a
// GET of a key read or written recently takes one READ of the item instead
// of two round trips (buckets, then item). docs/protocol.md ("GET on a cache
// hit") says why an item that passes the checks is the key's current value.
//
// An entry is only a guess: the hit's READ proves or disproves it (key,
// checksum, version, and the STATE word), and a wrong guess
// costs the two round trips a miss costs anyway. So an entry keeps no key:
// it is found by the key's hash (bucket and fingerprint), and two keys that
// share it share the entry; the loser's READ fails the key check.
//
// Ownership: the core owns the cache; its entries are allocated once, at
// creation (a fixed count; 0 entries disables it), and nothing is allocated
// per operation. The table is mapped on its own, 2 MiB-aligned, and asks for
// transparent huge pages: a lookup is one cache miss on a random set, and with
// 4 KiB pages most lookups also missed the TLB (a page walk, dear in a VM).
//
// Sets of kWays entries (4-way set-associative): a key's entry may sit in any
// way of its set, so a key set smaller than the cache stays in it (a
// direct-mapped table of the same size holds about 1 - 1/e of a key set as big
// as itself). Replacement is not-recently-used: one byte per set keeps a bit
// per way, set when the way is stored or found; a new tag takes an empty way,
// else the first way whose bit is clear (all set: all are cleared first).
// Any way may be evicted at any time: an entry is a guess the hit's READ
// proves, so an evicted key costs a miss, never a stale answer.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstddef>

#include "../common/prefetch.h"
#include "layout.h"

namespace rkv::kv {

class LocationCache {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kWays = 4;

  struct Entry {
    uint64_t tag = 0;      // the key's hash, as location_tag(); 0: empty
    uint64_t version = 0;  // the item's: versions are unique per write for the region's life
    uint32_t offset = 0;   // the item's block, in units from the heap's start
    uint32_t units = 0;    // the item's length, in units
  };

  // What the cache counted since the core was made: GETs answered by one READ
  // (hits), GETs with no usable entry (misses), and entries whose READ failed
  // a check (validation failures: those GETs took the two round trips).
  struct Stats {
    uint64_t hits = 0, misses = 0, failures = 0;
  };

  LocationCache() = default;
  LocationCache(const LocationCache&) = delete;
  LocationCache& operator=(const LocationCache&) = delete;
  ~LocationCache() { release(); }

  // Allocates the entries (once): sets of kWays (fewer below kWays entries),
  // the count rounded down to whole sets. Throws std::bad_alloc.
  void init(size_t entries);
  size_t capacity() const { return sets_ * ways_; }

  // The entry for tag, or nullptr (marks it used).
  const Entry* find(uint64_t tag) {
    if (sets_ == 0) return nullptr;
    const size_t set = set_of(tag);
    Entry* e = &entries_[set * ways_];
    for (uint32_t w = 0; w < ways_; w++) {
      if (e[w].tag == tag) {
        used_[set] |= static_cast<uint8_t>(1u << w);
        return &e[w];
      }
    }
    return nullptr;
  }
  // Touches tag's set (its ways may straddle two lines), for a find() soon after.
  void prefetch(uint64_t tag) const {
    if (sets_ == 0) return;
    const Entry* e = &entries_[set_of(tag) * ways_];
    prefetch_line(e);
    prefetch_line(e + ways_ - 1);
  }
  void store(uint64_t tag, uint32_t offset, uint32_t units, uint64_t version) {
    if (sets_ == 0) return;
    const size_t set = set_of(tag);
    Entry* e = &entries_[set * ways_];
    uint32_t way = ways_;
    for (uint32_t w = 0; w < ways_; w++) {
      if (e[w].tag == tag) {  // a tag has one way: update it in place
        way = w;
        break;
      }
      if (e[w].tag == 0 && way == ways_) way = w;
    }
    if (way == ways_) way = victim(set);
    e[way] = {tag, version, offset, units};
    used_[set] |= static_cast<uint8_t>(1u << way);
  }
  void forget(uint64_t tag) {
    if (sets_ == 0) return;
    const size_t set = set_of(tag);
    Entry* e = &entries_[set * ways_];
    for (uint32_t w = 0; w < ways_; w++) {
      if (e[w].tag == tag) {
        e[w].tag = 0;
        used_[set] &= static_cast<uint8_t>(~(1u << w));
        return;
      }
    }
  }

  Stats stats;

 private:
  size_t set_of(uint64_t tag) const { return mix64(tag) % sets_; }
  // A full set's way to evict: the first not used since the bits were last cleared.
  uint32_t victim(size_t set) {
    const uint8_t all = static_cast<uint8_t>((1u << ways_) - 1);
    if ((used_[set] & all) == all) used_[set] = 0;
    uint32_t w = 0;
    while (used_[set] & (1u << w)) w++;
    return w;
  }

  void release();

  uint32_t ways_ = 0;
  size_t sets_ = 0;
  Entry* entries_ = nullptr;  // sets_ * ways_, then used_
  uint8_t* used_ = nullptr;   // per set: a bit per way, used since the last clearing
  void* mapping_ = nullptr;   // what init() mapped (entries_ is in it, 2 MiB-aligned)
  size_t mapped_ = 0;
};

// The cache's name for a key: its fingerprint and first bucket (never 0: a
// fingerprint is never 0). Keys that share both share an entry.
inline uint64_t location_tag(const KeyHash& kh) { return static_cast<uint64_t>(kh.fp) << 32 | kh.b1; }

// No writer has marked the item SUPERSEDED (write.cc marks what it unlinks,
// before the slot WRITE that unlinks it), and the STATE word read is this
// item's (layout.h: live STATE is the item's own version).
inline bool item_live(const uint8_t* item) { return item_state_live(item); }

}  // namespace rkv::kv
