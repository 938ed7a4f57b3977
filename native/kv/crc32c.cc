// CRC32C: the SSE4.2 path and the portable slice-by-8 path (crc32c.h). Both
// work on the register as the standard defines it (initial ~0, final ~), so
// crc32c(crc, ...) can continue a finished CRC.
#include "crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace rkv::kv {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the slice-by-8 loop reads words little-endian");

constexpr uint32_t kPoly = 0x82f63b78;  // Castagnoli, reflected

// kTable[k][b]: the CRC register after byte b followed by k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int i = 0; i < 8; i++) c = (c >> 1) ^ (kPoly & (0u - (c & 1)));
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; k++) {
    for (uint32_t b = 0; b < 256; b++) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}
constexpr Tables kTable = make_tables();

inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

uint32_t crc32c_sw(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = load32(p) ^ c;
    const uint32_t hi = load32(p + 4);
    c = kTable[7][lo & 0xff] ^ kTable[6][(lo >> 8) & 0xff] ^ kTable[5][(lo >> 16) & 0xff] ^ kTable[4][lo >> 24] ^
        kTable[3][hi & 0xff] ^ kTable[2][(hi >> 8) & 0xff] ^ kTable[1][(hi >> 16) & 0xff] ^ kTable[0][hi >> 24];
  }
  for (; n > 0; p++, n--) c = (c >> 8) ^ kTable[0][(c ^ *p) & 0xff];
  return ~c;
}

#if defined(__x86_64__)

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = static_cast<uint32_t>(~crc);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; p++, n--) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}

bool crc32c_hw_available() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

#else

// No hardware path on this architecture yet (aarch64's crc32c instructions
// would go here): the software path serves.
uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) { return crc32c_sw(crc, p, n); }
bool crc32c_hw_available() { return false; }

#endif

uint32_t crc32c(uint32_t crc, const uint8_t* p, size_t n) {
  static const bool hw = crc32c_hw_available();
  return hw ? crc32c_hw(crc, p, n) : crc32c_sw(crc, p, n);
}

}  // namespace rkv::kv
