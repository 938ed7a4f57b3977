// The buffer pool (buffer_pool.h).
#include "buffer_pool.h"

#include <algorithm>

namespace rkv::kv {

void BufferPool::init(uint64_t begin, uint64_t end) {
  begin_ = begin;
  end_ = std::max(begin, end);
  bump_ = begin_;
  std::fill(heads_, heads_ + kOrders, kNone);
  next_ = std::make_unique<uint32_t[]>((end_ - begin_) / kUnit);
}

bool BufferPool::take(uint64_t bytes, Buffer* out) {
  const uint32_t order = order_for(bytes);
  if (order >= kOrders) return false;
  uint64_t offset;
  if (heads_[order] != kNone) {
    const uint32_t unit = heads_[order];
    heads_[order] = next_[unit];
    offset = begin_ + static_cast<uint64_t>(unit) * kUnit;
  } else if (bump_ + order_bytes(order) <= end_) {
    offset = bump_;
    bump_ += order_bytes(order);
  } else {
    return false;
  }
  *out = {offset, static_cast<uint8_t>(order), true};
  return true;
}

void BufferPool::give_back(Buffer* buffer) {
  if (!buffer->held) return;
  const uint32_t unit = unit_of(buffer->offset);
  next_[unit] = heads_[buffer->order];
  heads_[buffer->order] = unit;
  buffer->held = false;
}

}  // namespace rkv::kv
