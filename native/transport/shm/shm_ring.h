// The memory two shm peers share for one connection: two single-producer,
// single-consumer byte rings (one per direction) that carry SEND payloads and
// WRITE_WITH_IMM notices, plus each side's "closed" and "executing" flags and
// the state of the memory windows it bound.
//
// Ownership: ring[i] is produced by side i (0 = active, 1 = passive) and
// consumed by the other side. head is written only by the producer, tail only
// by the consumer; a record's bytes are published by the release store of head.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "../../common/constants.generated.h"

namespace rkv::transport::shm {

enum class RecordKind : uint32_t { PAD = 0, SEND = 1, WRITE_IMM = 2 };

struct RecordHeader {
  uint32_t size;      // whole record, header included, a multiple of 16
  RecordKind kind;
  uint32_t byte_len;  // payload (SEND) or bytes written (WRITE_IMM)
  uint32_t imm;
};
static_assert(sizeof(RecordHeader) == 16);

constexpr uint64_t kRingBytes = u32(Limit::SHM_RING_BYTES);
static_assert((kRingBytes & (kRingBytes - 1)) == 0, "ring size must be a power of two");

struct alignas(64) RingControl {
  std::atomic<uint64_t> head;  // producer: bytes published
  char pad0[56];
  std::atomic<uint64_t> tail;  // consumer: bytes released
  char pad1[56];
  // Set by the consumer when it waits for data, by the producer when it waits
  // for room; whoever changes the ring clears it and writes the peer's eventfd.
  std::atomic<uint32_t> consumer_waiting;
  std::atomic<uint32_t> producer_waiting;
  char pad2[56];
};

struct ConnShared {
  uint32_t magic;
  uint32_t ring_bytes;
  std::atomic<uint32_t> closed[2];  // side i broke or closed the connection
  // Side i is executing requests against the peer's memory (one post or one
  // retry of waiting sends). With closed[] it makes fencing exact: see
  // ShmConnection::fence_complete().
  std::atomic<uint32_t> executing[2];
  // The memory windows side i bound for its peer: a slot holds the window's
  // rkey while it is valid, 0 once invalidated. The peer checks it before every
  // request with the window's rkey (ShmConnection::find_remote), as a NIC
  // checks a window's state; only side i writes its row.
  std::atomic<uint32_t> windows[2][u32(Limit::SHM_MAX_WINDOWS)];
  RingControl control[2];
  uint8_t data[2][kRingBytes];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to work across processes");

constexpr uint32_t kConnMagic = 0x726b7664;  // "rkvd": the layout with windows[]

inline uint32_t record_size(uint32_t payload) { return (sizeof(RecordHeader) + payload + 15u) & ~15u; }

// Producer: appends a record if it fits. Returns false when the ring is full.
inline bool ring_push(RingControl& control, uint8_t* data, RecordKind kind, uint32_t imm, const uint8_t* payload,
                      uint32_t payload_len, uint32_t byte_len) {
  const uint32_t size = record_size(payload_len);
  uint64_t head = control.head.load(std::memory_order_relaxed);
  const uint64_t tail = control.tail.load(std::memory_order_acquire);
  uint64_t offset = head & (kRingBytes - 1);
  uint64_t to_end = kRingBytes - offset;
  uint64_t need = size <= to_end ? size : to_end + size;  // a record never wraps: pad to the end
  if (kRingBytes - (head - tail) < need) return false;
  if (size > to_end) {
    RecordHeader pad{static_cast<uint32_t>(to_end), RecordKind::PAD, 0, 0};
    std::memcpy(data + offset, &pad, sizeof pad);
    head += to_end;
    offset = 0;
  }
  RecordHeader header{size, kind, byte_len, imm};
  std::memcpy(data + offset, &header, sizeof header);
  if (payload_len > 0) std::memcpy(data + offset + sizeof header, payload, payload_len);
  control.head.store(head + size, std::memory_order_release);
  return true;
}

// Consumer: the next record, skipping padding, or nullptr when empty. Valid
// until ring_pop(). The peer writes this memory, so nothing in it is trusted:
// a record that would reach past the ring sets *corrupt.
inline const RecordHeader* ring_peek(RingControl& control, const uint8_t* data, bool* corrupt) {
  for (;;) {
    const uint64_t tail = control.tail.load(std::memory_order_relaxed);
    const uint64_t head = control.head.load(std::memory_order_acquire);
    if (head == tail) return nullptr;
    const uint64_t offset = tail & (kRingBytes - 1);
    const auto* header = reinterpret_cast<const RecordHeader*>(data + offset);
    const uint32_t size = header->size;
    if (head - tail > kRingBytes || size < sizeof(RecordHeader) || (size & 15u) != 0 ||
        offset + size > kRingBytes || size > head - tail) {
      *corrupt = true;
      return nullptr;
    }
    if (header->kind != RecordKind::PAD) return header;
    control.tail.store(tail + size, std::memory_order_release);
  }
}

inline void ring_pop(RingControl& control, const RecordHeader* header) {
  control.tail.store(control.tail.load(std::memory_order_relaxed) + header->size, std::memory_order_release);
}

}  // namespace rkv::transport::shm
