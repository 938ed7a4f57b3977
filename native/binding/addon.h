// Per-instance addon state: the wrapper classes' constructors and the error
// class JS handed over. One per Node environment, so worker threads and
// repeated loads never share state.
#pragma once
#include <napi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "../transport/transport.h"

namespace rkv::binding {

struct AddonData {
  Napi::FunctionReference provider;
  Napi::FunctionReference memory;
  Napi::FunctionReference memory_region;
  Napi::FunctionReference cq;
  Napi::FunctionReference connection;
  Napi::FunctionReference listener;
  Napi::FunctionReference window;
  Napi::FunctionReference client_core;
  // What native code throws: `new error_class(code, message)`. native/addon.ts
  // hands over native/errors.ts's TransportError once, when it loads the addon.
  Napi::FunctionReference error_class;
};

void init_transport(Napi::Env env, Napi::Object exports, AddonData* data);
void init_kv(Napi::Env env, Napi::Object exports, AddonData* data);
void init_layout(Napi::Env env, Napi::Object exports);
void init_notice(Napi::Env env, Napi::Object exports);

// The native objects behind the transport wrappers (type-checked; throw on
// anything else).
std::shared_ptr<transport::Provider> provider_of(const Napi::Value& value);
std::shared_ptr<transport::Connection> connection_of(const Napi::Value& value);
std::shared_ptr<transport::CompletionQueue> cq_of(const Napi::Value& value);

// One completion as WcLayout words (the CQ's poll buffer, the client core's control completions).
void write_completion(uint32_t* words, const transport::Completion& c);

// An instance of the registered error class with a string code (ERR_*, E*);
// before a class is registered (the bare addon), an Error with that code.
Napi::Error make_error(Napi::Env env, const char* code, const std::string& message);
// Throws make_error(env, code, message).
[[noreturn]] void throw_error(Napi::Env env, const char* code, const std::string& message);

// A Uint32Array over words a wrapper shares with JS (the client core's op, result and
// control words, the notice drain's lists): the view holds its own reference, so the
// vector lives as long as either the wrapper or some view of it.
inline Napi::Uint32Array words_view(Napi::Env env, const std::shared_ptr<std::vector<uint32_t>>& words) {
  auto* held = new std::shared_ptr<std::vector<uint32_t>>(words);
  auto buffer = Napi::ArrayBuffer::New(
      env, words->data(), words->size() * sizeof(uint32_t),
      [](Napi::Env, void*, std::shared_ptr<std::vector<uint32_t>>* h) { delete h; }, held);
  return Napi::Uint32Array::New(env, words->size(), buffer, 0);
}

}  // namespace rkv::binding
