// Module entry: exports the shared constants, the known providers and the
// transport classes.
#include "addon.h"

#include "../common/constants.generated.h"
#include "../transport/transport.h"

namespace rkv::binding {

void throw_error(Napi::Env env, const char* code, const std::string& message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, code));
  throw error;
}

namespace {

Napi::Object export_constants(Napi::Env env) {
  Napi::Object constants = Napi::Object::New(env);
  for (const ConstantEntry& entry : kConstants) {
    if (!constants.Has(entry.group)) constants.Set(entry.group, Napi::Object::New(env));
    constants.Get(entry.group).As<Napi::Object>().Set(entry.name, Napi::Number::New(env, entry.value));
  }
  return constants;
}

Napi::Object init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData(data);  // deleted by Node when this environment ends
  exports.Set("constants", export_constants(env));
  Napi::Array providers = Napi::Array::New(env);
  uint32_t i = 0;
  for (const transport::ProviderInfo& info : transport::known_providers()) {
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("scheme", info.scheme);
    entry.Set("example", info.example);
    entry.Set("built", info.built);
    if (!info.built) entry.Set("notBuilt", info.not_built);
    providers.Set(i++, entry);
  }
  exports.Set("providers", providers);
  init_transport(env, exports, data);
  init_kv(env, exports, data);
  init_layout(env, exports);
  return exports;
}

}  // namespace
}  // namespace rkv::binding

static Napi::Object InitRdmaKv(Napi::Env env, Napi::Object exports) { return rkv::binding::init(env, exports); }
NODE_API_MODULE(rdma_kv, InitRdmaKv)
