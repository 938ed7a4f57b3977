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
// creation (a fixed count, direct-mapped; 0 entries disables it), and nothing
// is allocated per operation.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "layout.h"

namespace rkv::kv {

class LocationCache {
 public:
  using Clock = std::chrono::steady_clock;

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

  // Allocates the entries (once).
  void init(size_t entries) { entries_.assign(entries, Entry{}); }
  size_t capacity() const { return entries_.size(); }

  // The entry for tag, or nullptr.
  const Entry* find(uint64_t tag) const {
    if (entries_.empty()) return nullptr;
    const Entry& e = entries_[position(tag)];
    return e.tag == tag ? &e : nullptr;
  }
  void store(uint64_t tag, uint32_t offset, uint32_t units, uint64_t version) {
    if (entries_.empty()) return;
    entries_[position(tag)] = {tag, version, offset, units};
  }
  void forget(uint64_t tag) {
    if (entries_.empty()) return;
    Entry& e = entries_[position(tag)];
    if (e.tag == tag) e.tag = 0;
  }

  Stats stats;

 private:
  size_t position(uint64_t tag) const { return mix64(tag) % entries_.size(); }

  std::vector<Entry> entries_;
};

// The cache's name for a key: its fingerprint and first bucket (never 0: a
// fingerprint is never 0). Keys that share both share an entry.
inline uint64_t location_tag(const KeyHash& kh) { return static_cast<uint64_t>(kh.fp) << 32 | kh.b1; }

// No writer has marked the item SUPERSEDED (write.cc marks what it unlinks,
// before the slot WRITE that unlinks it), and the STATE word read is this
// item's (layout.h: live STATE is the item's own version).
inline bool item_live(const uint8_t* item) { return item_state_live(item); }

}  // namespace rkv::kv
