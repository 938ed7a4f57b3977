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

namespace {

// The crc32 instruction takes 3 cycles and can start every cycle: one chain
// of it runs at a third of the unit's speed. So while 3 lanes' worth remain,
// three lanes of equal length run side by side (the later two from register
// 0) and are joined by
// linearity: crc(A | B | C) = shift(crc(A), |B| + |C|) ^ shift(crc(B), |C|) ^ crc(C),
// where shift(r, m) is the register after m zero bytes: linear in r, so four
// 256-entry tables per distance m (built at compile time from the slice table).
struct Shift {
  std::array<std::array<uint32_t, 256>, 4> t;
  constexpr uint32_t operator()(uint32_t r) const {
    return t[0][r & 0xff] ^ t[1][(r >> 8) & 0xff] ^ t[2][(r >> 16) & 0xff] ^ t[3][r >> 24];
  }
};
constexpr Shift make_shift(size_t zero_bytes) {
  uint32_t basis[32] = {};
  for (int bit = 0; bit < 32; bit++) {
    uint32_t r = 1u << bit;
    for (size_t i = 0; i < zero_bytes; i++) r = (r >> 8) ^ kTable[0][r & 0xff];
    basis[bit] = r;
  }
  Shift s{};
  for (int k = 0; k < 4; k++) {
    for (uint32_t b = 0; b < 256; b++) {
      uint32_t r = 0;
      for (int i = 0; i < 8; i++) {
        if (b & (1u << i)) r ^= basis[8 * k + i];
      }
      s.t[k][b] = r;
    }
  }
  return s;
}

// Two lane lengths: a long one for big values (fewer joins), a short one so a
// 1 KiB item runs 720 of its bytes in lanes too. Multiples of 8. (Measured:
// bench/checksum, docs/protocol.md.)
constexpr size_t kLongLane = 4096, kShortLane = 240;
struct Lanes {
  size_t lane;
  Shift once, twice;  // shift by lane, by 2 * lane
};
constexpr Lanes kLong{kLongLane, make_shift(kLongLane), make_shift(2 * kLongLane)};
constexpr Lanes kShort{kShortLane, make_shift(kShortLane), make_shift(2 * kShortLane)};

__attribute__((target("sse4.2"))) inline uint64_t crc_words(uint64_t c, const uint8_t* p, size_t words) {
  for (size_t i = 0; i < words; i++) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    c = _mm_crc32_u64(c, w);
  }
  return c;
}

// Register in, register out (no inversions): three lanes while 3 * lane bytes remain.
__attribute__((target("sse4.2"))) inline uint32_t crc_lanes(uint32_t c, const uint8_t*& p, size_t& n, const Lanes& l) {
  while (n >= 3 * l.lane) {
    uint64_t c0 = c, c1 = 0, c2 = 0;
    const uint8_t* b = p + l.lane;
    const uint8_t* d = p + 2 * l.lane;
    for (size_t i = 0; i < l.lane; i += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, b + i, 8);
      std::memcpy(&w2, d + i, 8);
      c0 = _mm_crc32_u64(c0, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c = l.twice(static_cast<uint32_t>(c0)) ^ l.once(static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
    p += 3 * l.lane;
    n -= 3 * l.lane;
  }
  return c;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
  c = crc_lanes(c, p, n, kLong);
  c = crc_lanes(c, p, n, kShort);
  c = static_cast<uint32_t>(crc_words(c, p, n / 8));
  p += n & ~size_t{7};
  for (n &= 7; n > 0; p++, n--) c = _mm_crc32_u8(c, *p);
  return ~c;
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
