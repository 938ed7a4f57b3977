// CRC32C (Castagnoli, reflected polynomial 0x82f63b78): the item checksum of
// protocol v3 and v4 (docs/protocol.md, "The item checksum"). One function the data
// path calls, which uses SSE4.2's crc32 instruction when the CPU has it and a
// slice-by-8 table otherwise; both give the same bits, so a region written on
// one machine checks on any other.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rkv::kv {

// Extends `crc` (the CRC32C of the bytes before, 0 for none) over p[0, n):
// crc32c(crc32c(0, a), b) == crc32c(0, a || b). crc32c(0, "123456789") == 0xe3069283.
uint32_t crc32c(uint32_t crc, const uint8_t* p, size_t n);

// The two implementations, for tests and the bench; crc32c() picks one at
// start. crc32c_hw may be called only when crc32c_hw_available().
uint32_t crc32c_sw(uint32_t crc, const uint8_t* p, size_t n);
uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t n);
bool crc32c_hw_available();

}  // namespace rkv::kv
