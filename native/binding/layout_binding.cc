// The region format's pure functions (native/kv/layout.h) for TypeScript:
// the server finds a departed client's items with the clients' own hash, and
// a test holds protocol/index-format.ts to the C++ word layouts.
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

}  // namespace

void init_layout(Napi::Env env, Napi::Object exports) {
  exports.Set("hashKey", Napi::Function::New(env, hash_key, "hashKey"));
  exports.Set("indexWords", Napi::Function::New(env, index_words, "indexWords"));
}

}  // namespace rkv::binding
