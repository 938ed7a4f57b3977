// The region's layout (protocol v5, region format 3) and the pure functions both ends agree on
// (hashing, slot and lock-word packing, item headers, checksums). The byte
// offsets themselves live in constants.def; docs/protocol.md explains them.
#pragma once

#include <cstdint>
#include <cstring>

#include "../common/constants.generated.h"
#include "crc32c.h"

namespace rkv::kv {

constexpr uint32_t kUnit = u32(KvLayout::UNIT_BYTES);
constexpr uint32_t kBucketBytes = u32(KvLayout::BUCKET_BYTES);
constexpr uint32_t kSlots = u32(KvLayout::SLOTS_PER_BUCKET);
constexpr uint32_t kHeader = u32(KvLayout::ITEM_HEADER_BYTES);
constexpr uint32_t kMaxKey = u32(KvLayout::MAX_KEY_BYTES);

// splitmix64's finalizer: a full-avalanche 64-bit mix.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A 64-bit hash of bytes: 8-byte words folded through mix64, length and seed
// mixed in first. Used for bucket choice and fingerprints (item checksums are
// CRC32C, crc32c.h).
inline uint64_t hash_bytes(const uint8_t* p, size_t n, uint64_t seed) {
  uint64_t h = mix64(seed ^ (n * 0x9e3779b97f4a7c15ull));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  uint64_t tail = 0;
  for (size_t k = 0; i < n; i++, k++) tail |= static_cast<uint64_t>(p[i]) << (8 * k);
  return mix64(h ^ tail ^ 0xa0761d6478bd642full);
}

struct KeyHash {
  uint32_t b1 = 0, b2 = 0;
  uint16_t fp = 0;
};

// Partial-key cuckoo hashing: a key's second bucket is its first XOR a value
// derived from its fingerprint, so the other bucket of any resident entry can
// be computed from its slot alone (displacement needs no item read).
// bucket_count is a power of two >= 2; the XOR distance is in [1, count-1].
inline uint32_t alternate_bucket(uint32_t bucket, uint16_t fp, uint32_t bucket_count) {
  return bucket ^ static_cast<uint32_t>(mix64(fp) % (bucket_count - 1) + 1);
}

inline KeyHash hash_key(const uint8_t* key, size_t len, uint64_t seed, uint32_t bucket_count) {
  uint64_t h = hash_bytes(key, len, seed);
  KeyHash k;
  k.fp = static_cast<uint16_t>(h >> 48);
  if (k.fp == 0) k.fp = 1;  // 0 marks an empty slot
  k.b1 = static_cast<uint32_t>(h) & (bucket_count - 1);
  k.b2 = alternate_bucket(k.b1, k.fp, bucket_count);
  return k;
}

// Slot: [fingerprint:16 | item length:16 | heap offset in units:32]; 0 is empty.
// (The bit positions are constants.def's IndexWord; protocol/index-format.ts is the TS twin.)
// The length field is fine (64-byte units, exact) up to kSlotFineMax units and
// coarse above (top bit set, whole granules of kSlotCoarse units, rounded up):
// slot_units() is the one decoder, slot_length_units() what an item of `units`
// reads as once in a slot. Every user of a slot's length goes through them.
constexpr uint32_t kSlotFpShift = u32(IndexWord::SLOT_FINGERPRINT_SHIFT);
constexpr uint32_t kSlotUnitsShift = u32(IndexWord::SLOT_UNITS_SHIFT);
constexpr uint64_t kSlotUnitsMask = u32(IndexWord::SLOT_UNITS_MASK);
constexpr uint32_t kSlotCoarseFlag = u32(IndexWord::SLOT_COARSE_FLAG);
constexpr uint32_t kSlotFineMax = u32(IndexWord::SLOT_FINE_MAX_UNITS);
constexpr uint32_t kSlotCoarse = u32(IndexWord::SLOT_COARSE_UNITS);
constexpr uint32_t kSlotMaxUnits = u32(IndexWord::SLOT_MAX_UNITS);
static_assert(kSlotFineMax == kSlotCoarseFlag - 1 && kSlotMaxUnits == kSlotFineMax * kSlotCoarse, "the slot's length field");
constexpr uint32_t kLockVersionShift = u32(IndexWord::LOCK_VERSION_SHIFT);
// The 16-bit length field for an item of `units` (at most kSlotMaxUnits; callers check).
inline uint32_t slot_length_field(uint32_t units) {
  return units <= kSlotFineMax ? units : kSlotCoarseFlag | (units + kSlotCoarse - 1) / kSlotCoarse;
}
inline uint32_t slot_field_units(uint32_t field) {
  return (field & kSlotCoarseFlag) == 0 ? field : (field & kSlotFineMax) * kSlotCoarse;
}
// The length a slot gives an item of `units`: exact when fine, rounded up to a granule when coarse.
inline uint32_t slot_length_units(uint32_t units) { return slot_field_units(slot_length_field(units)); }
inline uint64_t make_slot(uint16_t fp, uint32_t units, uint32_t offset_units) {
  return static_cast<uint64_t>(fp) << kSlotFpShift | static_cast<uint64_t>(slot_length_field(units)) << kSlotUnitsShift |
         offset_units;
}
inline uint16_t slot_fp(uint64_t s) { return static_cast<uint16_t>(s >> kSlotFpShift); }
// The item's length in units as the slot gives it (rounded up to a granule when coarse).
inline uint32_t slot_units(uint64_t s) {
  return slot_field_units(static_cast<uint32_t>((s >> kSlotUnitsShift) & kSlotUnitsMask));
}
inline uint32_t slot_offset(uint64_t s) { return static_cast<uint32_t>(s); }

// Lock word: [version:32 | owner:32], owner 0 = free. Acquire: CAS (v, 0) ->
// (v, me). Release: FETCH_AND_ADD 2^32 - me, which clears the owner and bumps
// the version in one atomic.
inline uint64_t lock_word(uint32_t version, uint32_t owner) { return static_cast<uint64_t>(version) << kLockVersionShift | owner; }
inline uint32_t lock_owner(uint64_t w) { return static_cast<uint32_t>(w); }
inline uint64_t release_addend(uint32_t owner) { return (1ull << kLockVersionShift) - owner; }

// Seals on the atomic word of counter and lock items. A DELETE of such an item
// adds its seal with one FETCH_AND_ADD before it unlinks the item, so a client
// that reaches the item through a cached address learns from its own atomic's
// result that the item is dead, in the same round trip, and starts over.
// Counter words hold value << 1 (counters count modulo 2^63): bit 0 is the
// seal, and increments (added << 1) never touch it. Lock words hold
// [token:32 | owner:32]: owner bit 31 is the seal (client ids stay below 2^31).
inline uint64_t counter_word(uint64_t value) { return value << 1; }
inline uint64_t counter_value(uint64_t word) { return (word >> 1) & ((1ull << 63) - 1); }
constexpr uint64_t kCounterSeal = u32(KvLayout::COUNTER_SEAL);
inline bool counter_sealed(uint64_t word) { return (word & kCounterSeal) != 0; }
constexpr uint64_t kLockSeal = u32(KvLayout::LOCK_SEAL);
inline bool lock_sealed(uint64_t word) { return (word & kLockSeal) != 0; }

inline uint64_t item_bytes(uint32_t key_len, uint32_t value_len) {
  return kHeader + static_cast<uint64_t>(key_len) + value_len;
}
inline uint32_t item_units(uint64_t bytes) { return static_cast<uint32_t>((bytes + kUnit - 1) / kUnit); }

template <typename T>
inline T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
inline void store_le(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// The checksum: CRC32C of the header (with CHECKSUM, ATOMIC_WORD and STATE
// taken as zero: the atomic word is changed by RDMA atomics and the state by a
// later writer's WRITE, both after publication), then the key and the value.
constexpr uint32_t kChecksumAt = u32(ItemHeader::CHECKSUM);
constexpr uint32_t kAtomicWordAt = u32(ItemHeader::ATOMIC_WORD);
constexpr uint32_t kStateAt = u32(ItemHeader::STATE);
static_assert(kHeader == 48 && kChecksumAt == 16 && kAtomicWordAt == 24 && kStateAt == 40, "the item header (region formats 2 and 3)");
// Linked as far as its STATE says: STATE still equals the item's own version
// (no writer has marked it SUPERSEDED, and the word is not another item's).
inline bool item_state_live(const uint8_t* item) {
  const uint64_t version = load_le<uint64_t>(item + u32(ItemHeader::VERSION));
  return version != u32(ItemState::SUPERSEDED) && load_le<uint64_t>(item + kStateAt) == version;
}
// The checksum of an item whose value lies apart from its header and key
// (a large value in the caller's registered buffer): the same CRC, chained.
inline uint32_t item_checksum_parts(const uint8_t* header_and_key, uint32_t key_len, const uint8_t* value,
                                    uint32_t value_len) {
  uint8_t header[kHeader];
  std::memcpy(header, header_and_key, kHeader);
  std::memset(header + kChecksumAt, 0, 4);
  std::memset(header + kAtomicWordAt, 0, 8);
  std::memset(header + kStateAt, 0, 8);
  const uint32_t crc = crc32c(crc32c(0, header, kHeader), header_and_key + kHeader, key_len);
  return value_len == 0 ? crc : crc32c(crc, value, value_len);
}
inline uint32_t item_checksum(const uint8_t* item, uint32_t key_len, uint32_t value_len) {
  return item_checksum_parts(item, key_len, item + kHeader + key_len, value_len);
}

// Writes an item's header and key into dst, its checksum covering `value`,
// which the caller writes right after the key (build_item) or from elsewhere.
// `expiry`: absolute Unix ms, 0 = never (bytes items only; expiry.h).
inline void build_item_header(uint8_t* dst, ItemType type, const uint8_t* key, uint32_t key_len, const uint8_t* value,
                              uint32_t value_len, uint64_t version, uint64_t expiry = 0) {
  std::memset(dst, 0, kHeader);
  store_le<uint64_t>(dst + u32(ItemHeader::EXPIRY), expiry);
  store_le<uint16_t>(dst + u32(ItemHeader::TYPE), static_cast<uint16_t>(type));
  store_le<uint16_t>(dst + u32(ItemHeader::KEY_LEN), static_cast<uint16_t>(key_len));
  store_le<uint32_t>(dst + u32(ItemHeader::VALUE_LEN), value_len);
  store_le<uint64_t>(dst + u32(ItemHeader::VERSION), version);
  store_le<uint64_t>(dst + kStateAt, version);
  std::memcpy(dst + kHeader, key, key_len);
  store_le<uint32_t>(dst + kChecksumAt, item_checksum_parts(dst, key_len, value, value_len));
}

// Writes a complete item (header, key, value, checksum) into dst: epoch 0 (no
// replication yet), `expiry` (0: never), STATE live (its own version), atomic word 0
// (the caller sets a counter's or lock's after: the checksum does not cover it).
inline void build_item(uint8_t* dst, ItemType type, const uint8_t* key, uint32_t key_len, const uint8_t* value,
                       uint32_t value_len, uint64_t version, uint64_t expiry = 0) {
  if (value_len > 0) std::memcpy(dst + kHeader + key_len, value, value_len);
  build_item_header(dst, type, key, key_len, dst + kHeader + key_len, value_len, version, expiry);
}

}  // namespace rkv::kv
