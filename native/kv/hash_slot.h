// The hash slot of a key, as protocol/hash-slots.ts keySlot computes it
// (CRC16-XMODEM of the key, or of its {tag}, modulo 16,384). A write READs its
// hash slot's epoch word (write.cc); the cluster client routes by the same
// number. test/kv/epoch-check.test.ts holds the two to the same answers.
#pragma once

#include <array>
#include <cstdint>

#include "../common/constants.generated.h"

namespace rkv::kv {

namespace detail {
constexpr std::array<uint16_t, 256> crc16_table() {
  std::array<uint16_t, 256> table{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t crc = i << 8;
    for (int bit = 0; bit < 8; bit++) crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
    table[i] = static_cast<uint16_t>(crc);
  }
  return table;
}
inline constexpr std::array<uint16_t, 256> kCrc16 = crc16_table();
}  // namespace detail

// The tag rule of the cluster-key-slot package the TS side routes with (Redis's
// rule, but for an empty "{}": Redis hashes the whole key, the package goes on
// and hashes what follows up to the next "}"). Routing must not change under
// existing data, so this follows the package.
inline uint32_t key_hash_slot(const uint8_t* key, uint32_t n) {
  uint32_t whole = 0, tag = 0;
  int64_t start = -1;  // index just past the first '{'
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t c = key[i];
    if (start < 0) {
      if (c == '{') start = i + 1;
    } else if (c != '}') {
      tag = ((tag << 8) ^ detail::kCrc16[((tag >> 8) ^ c) & 0xff]) & 0xffff;
    } else if (i != start) {
      return tag % u32(EpochWord::HASH_SLOTS);
    }
    whole = ((whole << 8) ^ detail::kCrc16[((whole >> 8) ^ c) & 0xff]) & 0xffff;
  }
  return whole % u32(EpochWord::HASH_SLOTS);
}

}  // namespace rkv::kv
