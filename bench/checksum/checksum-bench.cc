// The item checksum, timed: protocol v2's (a serial chain of mix64 over 8-byte
// words, kept here only for this comparison) against v3's CRC32C, hardware
// and software, on a 1,096-byte item (48-byte header, 24-byte key, 1 KiB
// value) and a 64 KiB item. Built and run by scripts/bench-checksum.mjs
// (`npm run bench:checksum`); docs/protocol.md, "The item checksum", has the
// numbers and what they mean.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "../../native/kv/crc32c.h"
#include "../../native/kv/layout.h"

namespace {

using namespace rkv;
using namespace rkv::kv;

// ---- protocol v2's item checksum (region format 1) ----
constexpr uint32_t kV2Header = 32, kV2Checksum = 16, kV2AtomicWord = 24;
// v2 hashed items with hash_bytes (layout.h), which keys still use for buckets.
uint64_t v2_item_checksum(const uint8_t* item, uint32_t key_len, uint32_t value_len) {
  uint8_t header[kV2Header];
  std::memcpy(header, item, kV2Header);
  std::memset(header + kV2Checksum, 0, 8);
  std::memset(header + kV2AtomicWord, 0, 8);
  uint64_t h = hash_bytes(header, kV2Header, 0x636865636b73756dull);
  return hash_bytes(item + kV2Header, static_cast<size_t>(key_len) + value_len, h);
}

#if defined(__x86_64__)
// CRC32C by SSE4.2 in one chain (crc32c.cc runs three lanes on long inputs):
// the bench's baseline for what the lanes buy.
__attribute__((target("sse4.2"))) uint32_t crc32c_one_lane(uint32_t crc, const uint8_t* p, size_t n) {
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
#else
uint32_t crc32c_one_lane(uint32_t crc, const uint8_t* p, size_t n) { return crc32c_sw(crc, p, n); }
#endif

// v3's item checksum with the CRC path chosen here rather than at start.
template <uint32_t (*Crc)(uint32_t, const uint8_t*, size_t)>
uint64_t v3_item_checksum(const uint8_t* item, uint32_t key_len, uint32_t value_len) {
  uint8_t header[kHeader];
  std::memcpy(header, item, kHeader);
  std::memset(header + kChecksumAt, 0, 4);
  std::memset(header + kAtomicWordAt, 0, 8);
  std::memset(header + kStateAt, 0, 8);
  return Crc(Crc(0, header, kHeader), item + kHeader, static_cast<size_t>(key_len) + value_len);
}

using ItemSum = uint64_t (*)(const uint8_t*, uint32_t, uint32_t);

// One timed batch: nanoseconds per checksum over `iters` calls, each fed by
// the last (a value byte depends on the previous result, so no two calls
// overlap or get hoisted).
double batch_ns(ItemSum sum, std::vector<uint8_t>& item, uint32_t key_len, uint32_t value_len, int iters, uint64_t& chain) {
  uint8_t* poke = item.data() + item.size() - 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; i++) {
    *poke = static_cast<uint8_t>(chain);
    chain += sum(item.data(), key_len, value_len);
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  struct Size {
    const char* name;
    uint32_t bytes;
    int iters;
  };
  const Size sizes[] = {{"1,096 B item (24 B key, 1 KiB value)", 1096, 20000}, {"64 KiB item", 65536, 400}};
  struct Way {
    const char* name;
    ItemSum sum;
    bool needs_hw;
  };
  const Way ways[] = {
      {"v2: hash64 (mix64 chain)", v2_item_checksum, false},
      {"v3: CRC32C, software (slice-by-8)", v3_item_checksum<crc32c_sw>, false},
      {"v3: CRC32C, SSE4.2, one chain", v3_item_checksum<crc32c_one_lane>, true},
      {"v3: CRC32C, SSE4.2, three lanes", v3_item_checksum<crc32c_hw>, true},
      {"v3: item_checksum as built (runtime choice)", [](const uint8_t* p, uint32_t k, uint32_t v) -> uint64_t { return item_checksum(p, k, v); }, false},
  };
  const bool hw = crc32c_hw_available();
  std::printf("CRC32C instruction: %s\n\n", hw ? "yes (SSE4.2)" : "no: the software path serves");
  std::printf("| item | checksum | ns / item | GB/s | vs v2 |\n|---|---|---:|---:|---:|\n");
  std::mt19937_64 rng(14);
  for (const Size& s : sizes) {
    const uint32_t key_len = 24, value_len = s.bytes - kHeader - key_len;
    std::vector<uint8_t> item(s.bytes);
    for (auto& b : item) b = static_cast<uint8_t>(rng());
    if (hw && (crc32c_hw(0, item.data(), item.size()) != crc32c_sw(0, item.data(), item.size()) ||
               crc32c_one_lane(0, item.data(), item.size()) != crc32c_sw(0, item.data(), item.size()))) {
      std::fprintf(stderr, "hardware and software CRC32C differ\n");
      return 1;
    }
    // Rounds of one batch of every way, interleaved, and each way's median:
    // on a shared machine the load changes from second to second, and this
    // keeps the ratios between ways fair.
    std::vector<const Way*> run;
    for (const Way& w : ways) {
      if (!w.needs_hw || hw) run.push_back(&w);
    }
    std::vector<std::vector<double>> samples(run.size());
    uint64_t chain = 0;
    for (int round = 0; round < 16; round++) {
      for (size_t i = 0; i < run.size(); i++) {
        const double ns = batch_ns(run[i]->sum, item, key_len, value_len, s.iters, chain);
        if (round > 0) samples[i].push_back(ns);  // round 0 warms up
      }
    }
    if (chain == 42) std::puts("");  // keeps the chain live
    const double v2 = median(samples[0]);
    for (size_t i = 0; i < run.size(); i++) {
      const double ns = median(samples[i]);
      std::printf("| %s | %s | %.1f | %.2f | %.1fx |\n", s.name, run[i]->name, ns, s.bytes / ns, v2 / ns);
    }
  }
  return 0;
}
