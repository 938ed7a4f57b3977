// Item expiry (TTL; docs/protocol.md, "Expiry"): what every read path asks of
// an item it found. EXPIRY is absolute Unix time in ms, 0 = never, covered by
// the checksum; a reader compares it with its own clock (clients' and server's
// clocks are assumed synced, e.g. by NTP: skew moves every expiry by that much).
// Kept apart from get.cc so the read paths each call one small function.
#pragma once

#include <chrono>
#include <cstdint>

#include "layout.h"

namespace rkv::kv {

constexpr uint32_t kExpiryAt = u32(ItemHeader::EXPIRY);
constexpr uint64_t kExpiryLimit = 1ull << u32(KvLayout::EXPIRY_BITS);

// The reader's clock: Unix time in ms (CLOCK_REALTIME, a vDSO call).
inline uint64_t wall_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

inline uint64_t item_expiry(const uint8_t* header) { return load_le<uint64_t>(header + kExpiryAt); }

// What an intact item's EXPIRY says. BAD: a value no writer writes (past
// 2^EXPIRY_BITS, or any expiry on a counter or lock, which never expire):
// damage, read like a failed check. The clock is read only for items that expire.
enum class Expiry : uint8_t { NEVER, LIVE, EXPIRED, BAD };
inline Expiry expiry_of(const uint8_t* header) {
  const uint64_t at = item_expiry(header);
  if (at == 0) return Expiry::NEVER;
  if (at >= kExpiryLimit || load_le<uint16_t>(header + u32(ItemHeader::TYPE)) != u32(ItemType::BYTES)) return Expiry::BAD;
  return at <= wall_ms() ? Expiry::EXPIRED : Expiry::LIVE;
}

// Under the bucket locks (write.cc): the key's item counts as absent. A header
// read there is of a linked item (the locks keep it linked), so it is trusted as
// the version is; a BAD expiry does not make an item absent.
inline bool header_expired(const uint8_t* header) { return expiry_of(header) == Expiry::EXPIRED; }

}  // namespace rkv::kv
