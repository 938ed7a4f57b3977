// What a reader's expiry check adds to a GET of an item that expires: one
// wall_ms() (native/kv/expiry.h, CLOCK_REALTIME through the vDSO). 15 rounds of
// 2 M calls; prints the median and the fastest round, per call.
//
//   node scripts/gen-constants.mjs && g++ -O2 -std=c++17 -o build/ttl-clock bench/ttl/clock-bench.cc native/kv/crc32c.cc && build/ttl-clock
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "../../native/kv/expiry.h"

int main() {
  std::vector<double> per_call;
  volatile uint64_t sink = 0;  // keeps the calls
  constexpr int kCalls = 2'000'000;
  for (int round = 0; round < 15; round++) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; i++) sink = sink + rkv::kv::wall_ms();
    const auto end = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::nano>(end - start).count() / kCalls);
  }
  std::sort(per_call.begin(), per_call.end());
  std::printf("wall_ms(): median %.1f ns a call, fastest round %.1f ns (15 rounds of %d calls)\n", per_call[7], per_call[0],
              kCalls);
  return 0;
}
