// Module entry: exports the shared constants, the known providers, the
// transport classes and the client core, and takes the error class that
// native code throws (setErrorClass, called once per environment).
#include "addon.h"

#include "../common/constants.generated.h"
#include "../transport/transport.h"

namespace rkv::binding {

Napi::Error make_error(Napi::Env env, const char* code, const std::string& message) {
  auto* data = env.GetInstanceData<AddonData>();
  if (data != nullptr && !data->error_class.IsEmpty()) {
    return Napi::Error(env, data->error_class.New({Napi::String::New(env, code), Napi::String::New(env, message)}));
  }
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, code));
  return error;
}

void throw_error(Napi::Env env, const char* code, const std::string& message) { throw make_error(env, code, message); }

namespace {

// setErrorClass(cls): native code throws `new cls(code, message)` from now on.
Napi::Value set_error_class(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) throw_error(env, "ERR_INVALID_ARG_TYPE", "setErrorClass(cls: (code, message) => Error)");
  env.GetInstanceData<AddonData>()->error_class = Napi::Persistent(info[0].As<Napi::Function>());
  return env.Undefined();
}

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
  exports.Set("setErrorClass", Napi::Function::New(env, set_error_class, "setErrorClass"));
  init_transport(env, exports, data);
  init_kv(env, exports, data);
  init_layout(env, exports);
  init_notice(env, exports);
  return exports;
}

}  // namespace
}  // namespace rkv::binding

static Napi::Object InitRdmaKv(Napi::Env env, Napi::Object exports) { return rkv::binding::init(env, exports); }
NODE_API_MODULE(rdma_kv, InitRdmaKv)
