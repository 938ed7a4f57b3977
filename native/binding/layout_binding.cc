// The region format's pure functions (native/kv/layout.h) for TypeScript:
// the server finds a departed client's items with the clients' own hash, and
// tests hold protocol/index-format.ts to the C++ word layouts and item header,
// and the two CRC32C paths to each other.
#include "../kv/layout.h"
#include "addon.h"

namespace rkv::binding {

namespace {

// hashKey(key, seed, bucketCount) -> [b1, b2, fingerprint]: layout.h's hash_key
// for the server, which must find a departed client's items in the index
// exactly where clients put them (one implementation of the hash, here).
Napi::Value hash_key(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsBuffer() || !info[1].IsBigInt() || !info[2].IsNumber()) {
    throw_error(env, "ERR_INVALID_ARG_TYPE", "hashKey(key: Buffer, seed: bigint, bucketCount: number)");
  }
  auto key = info[0].As<Napi::Buffer<uint8_t>>();
  bool lossless = true;
  uint64_t seed = info[1].As<Napi::BigInt>().Uint64Value(&lossless);
  uint32_t count = info[2].As<Napi::Number>().Uint32Value();
  if (count < 2 || (count & (count - 1)) != 0) {
    throw_error(env, "ERR_OUT_OF_RANGE", "bucketCount must be a power of two >= 2");
  }
  kv::KeyHash k = kv::hash_key(key.Data(), key.Length(), seed, count);
  Napi::Array out = Napi::Array::New(env, 3);
  out.Set(uint32_t{0}, Napi::Number::New(env, k.b1));
  out.Set(uint32_t{1}, Napi::Number::New(env, k.b2));
  out.Set(uint32_t{2}, Napi::Number::New(env, k.fp));
  return out;
}

uint64_t u64_arg(const Napi::CallbackInfo& info, size_t i) {
  bool lossless = true;
  if (info[i].IsBigInt()) return info[i].As<Napi::BigInt>().Uint64Value(&lossless);
  return static_cast<uint64_t>(info[i].As<Napi::Number>().Int64Value());
}

// indexWords(fingerprint, units, block, version, owner, counter) -> the words
// layout.h builds from them: [slot, lock word, release addend, counter word],
// and what it reads back from the slot: [fingerprint, units, block].
Napi::Value index_words(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 6) throw_error(env, "ERR_INVALID_ARG_TYPE", "indexWords(fp, units, block, version, owner, counter)");
  uint64_t slot = kv::make_slot(static_cast<uint16_t>(u64_arg(info, 0)), static_cast<uint32_t>(u64_arg(info, 1)),
                                static_cast<uint32_t>(u64_arg(info, 2)));
  uint32_t owner = static_cast<uint32_t>(u64_arg(info, 4));
  Napi::Array out = Napi::Array::New(env, 7);
  out.Set(uint32_t{0}, Napi::BigInt::New(env, slot));
  out.Set(uint32_t{1}, Napi::BigInt::New(env, kv::lock_word(static_cast<uint32_t>(u64_arg(info, 3)), owner)));
  out.Set(uint32_t{2}, Napi::BigInt::New(env, kv::release_addend(owner)));
  out.Set(uint32_t{3}, Napi::BigInt::New(env, kv::counter_word(u64_arg(info, 5))));
  out.Set(uint32_t{4}, Napi::Number::New(env, kv::slot_fp(slot)));
  out.Set(uint32_t{5}, Napi::Number::New(env, kv::slot_units(slot)));
  out.Set(uint32_t{6}, Napi::Number::New(env, kv::slot_offset(slot)));
  return out;
}

// crc32c(bytes, path, crc) -> the CRC32C of bytes continuing crc: path 0 the
// one the data path uses, 1 software, 2 hardware (ERR_UNSUPPORTED when the
// CPU has none).
Napi::Value crc32c(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsBuffer() || !info[1].IsNumber() || !info[2].IsNumber()) {
    throw_error(env, "ERR_INVALID_ARG_TYPE", "crc32c(bytes: Buffer, path: 0 | 1 | 2, crc: number)");
  }
  auto bytes = info[0].As<Napi::Buffer<uint8_t>>();
  const uint32_t path = info[1].As<Napi::Number>().Uint32Value();
  const uint32_t crc = info[2].As<Napi::Number>().Uint32Value();
  uint32_t out = 0;
  if (path == 0) {
    out = kv::crc32c(crc, bytes.Data(), bytes.Length());
  } else if (path == 1) {
    out = kv::crc32c_sw(crc, bytes.Data(), bytes.Length());
  } else if (path == 2) {
    if (!kv::crc32c_hw_available()) throw_error(env, "ERR_UNSUPPORTED", "this CPU has no CRC32C instruction");
    out = kv::crc32c_hw(crc, bytes.Data(), bytes.Length());
  } else {
    throw_error(env, "ERR_OUT_OF_RANGE", "path must be 0, 1 or 2");
  }
  return Napi::Number::New(env, out);
}

// buildItem(type, key, value, version) -> the item layout.h's build_item
// writes (a Buffer of item_bytes), checksum included.
Napi::Value build_item(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsBuffer() || !info[2].IsBuffer()) {
    throw_error(env, "ERR_INVALID_ARG_TYPE", "buildItem(type: number, key: Buffer, value: Buffer, version: bigint)");
  }
  auto key = info[1].As<Napi::Buffer<uint8_t>>();
  auto value = info[2].As<Napi::Buffer<uint8_t>>();
  if (key.Length() > kv::kMaxKey || value.Length() > UINT32_MAX - kv::kHeader - kv::kMaxKey) {
    throw_error(env, "ERR_OUT_OF_RANGE", "key or value too long");
  }
  const auto key_len = static_cast<uint32_t>(key.Length());
  const auto value_len = static_cast<uint32_t>(value.Length());
  auto out = Napi::Buffer<uint8_t>::New(env, kv::item_bytes(key_len, value_len));
  kv::build_item(out.Data(), static_cast<ItemType>(info[0].As<Napi::Number>().Uint32Value()), key.Data(), key_len,
                 value.Data(), value_len, u64_arg(info, 3));
  return out;
}

// itemChecksum(item) -> layout.h's item_checksum of an item (lengths from its
// own header; ERR_OUT_OF_RANGE if they run past the buffer).
Napi::Value item_checksum(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) throw_error(env, "ERR_INVALID_ARG_TYPE", "itemChecksum(item: Buffer)");
  auto item = info[0].As<Napi::Buffer<uint8_t>>();
  if (item.Length() < kv::kHeader) throw_error(env, "ERR_OUT_OF_RANGE", "shorter than an item header");
  const uint32_t key_len = kv::load_le<uint16_t>(item.Data() + u32(ItemHeader::KEY_LEN));
  const uint32_t value_len = kv::load_le<uint32_t>(item.Data() + u32(ItemHeader::VALUE_LEN));
  if (kv::item_bytes(key_len, value_len) > item.Length()) throw_error(env, "ERR_OUT_OF_RANGE", "lengths run past the item");
  return Napi::Number::New(env, kv::item_checksum(item.Data(), key_len, value_len));
}

}  // namespace

void init_layout(Napi::Env env, Napi::Object exports) {
  exports.Set("hashKey", Napi::Function::New(env, hash_key, "hashKey"));
  exports.Set("indexWords", Napi::Function::New(env, index_words, "indexWords"));
  exports.Set("crc32c", Napi::Function::New(env, crc32c, "crc32c"));
  exports.Set("crc32cHardware", Napi::Boolean::New(env, kv::crc32c_hw_available()));
  exports.Set("buildItem", Napi::Function::New(env, build_item, "buildItem"));
  exports.Set("itemChecksum", Napi::Function::New(env, item_checksum, "itemChecksum"));
}

}  // namespace rkv::binding
