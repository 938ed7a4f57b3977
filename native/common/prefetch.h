// prefetch_line(): a hint to bring the cache line at `at` in, now, for a read soon after.
//
// Written as an asm statement on x86-64 because GCC (12) removed __builtin_prefetch as dead
// code in functions whose only job is to prefetch (the location cache's, for a batch of GETs:
// the function compiled to a bare ret). A prefetch never faults, so `at` may be any address.
#pragma once

namespace rkv {

inline void prefetch_line(const void* at) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(at)));
#else
  __builtin_prefetch(at);
#endif
}

}  // namespace rkv
