// The buffer pool: the client core's local item buffers, in its scratch
// memory after the op areas. A buffer holds one whole item: the one a GET
// reads, or the one a PUT builds before writing it into its heap block.
//
// Buffer sizes are powers of two from 64 bytes; a size's "order" is its
// log2 over 64 (these are not the heap's size classes). A size's buffers are
// carved from the free space by a bump pointer the first time they are
// needed; a returned buffer goes on its size's free list and is never split
// or merged. The free lists are linked through a side table of one entry per
// 64-byte unit, made once, so taking and returning never allocates.
//
// Ownership: the core owns the pool; an op owns the buffer it took until it
// gives it back, and a GET's value is lent to JS until the next poll.
#pragma once

#include <cstdint>
#include <memory>

#include "layout.h"

namespace rkv::kv {

class BufferPool {
 public:
  struct Buffer {
    uint64_t offset = 0;  // in scratch
    uint8_t order = 0;
    bool held = false;
  };

  static uint32_t order_for(uint64_t bytes) {
    uint32_t order = 0;
    while ((static_cast<uint64_t>(kUnit) << order) < bytes) order++;
    return order;
  }
  static uint64_t order_bytes(uint32_t order) { return static_cast<uint64_t>(kUnit) << order; }

  // Buffers are cut from scratch offsets [begin, end), begin a multiple of 64.
  void init(uint64_t begin, uint64_t end);
  // A buffer of at least `bytes` into *out; false when there is no room now.
  bool take(uint64_t bytes, Buffer* out);
  // Returns a held buffer (a no-op for one not held) and marks it not held.
  void give_back(Buffer* buffer);

 private:
  static constexpr uint32_t kOrders = 40;
  static constexpr uint32_t kNone = 0xffffffffu;

  uint32_t unit_of(uint64_t offset) const { return static_cast<uint32_t>((offset - begin_) / kUnit); }

  uint64_t begin_ = 0, end_ = 0;
  uint64_t bump_ = 0;          // the first offset never carved
  uint32_t heads_[kOrders];    // each order's first free buffer, as a unit index (kNone: empty)
  std::unique_ptr<uint32_t[]> next_;  // by unit index: the next free buffer of its order
};

}  // namespace rkv::kv
