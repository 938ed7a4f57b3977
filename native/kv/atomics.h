// The address cache of INCR, LOCK and UNLOCK: where a counter's or lock's
// atomic word is, so the next INCR or LOCK on it takes one atomic instead of
// a lookup first.
//
// An address is trusted for half the grace period only: a block is not
// reused within the grace period of its retirement. A DELETE seals the word
// before it unlinks the item (layout.h), so an atomic through a stale address
// sees the seal in its own result and starts over. Short keys only;
// direct-mapped, made once.
#pragma once

#include <chrono>
#include <vector>

#include "layout.h"

namespace rkv::kv {

using Clock = std::chrono::steady_clock;

class AddressCache {
 public:
  static constexpr uint32_t kMaxKey = 64;

  struct Hit {
    uint64_t addr = 0;
    uint64_t word = 0;  // the lock word last seen (LOCK's first guess)
  };

  // A counter's address serves INCR only, a lock's LOCK and UNLOCK only.
  bool lookup(const uint8_t* key, uint32_t key_len, ItemType type, Clock::time_point now,
              std::chrono::milliseconds ttl, Hit* hit) const;
  void store(const uint8_t* key, uint32_t key_len, ItemType type, uint64_t addr, uint64_t word, Clock::time_point now);
  void forget(const uint8_t* key, uint32_t key_len);

 private:
  struct Entry {
    uint64_t addr = 0;
    uint64_t word = 0;
    Clock::time_point at;
    uint16_t key_len = 0;
    ItemType type = ItemType::BYTES;
    uint8_t key[kMaxKey];
  };
  size_t position(const uint8_t* key, uint32_t key_len) const;

  std::vector<Entry> entries_ = std::vector<Entry>(1024);
};

}  // namespace rkv::kv
