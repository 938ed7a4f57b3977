// Per-instance addon state: the wrapper classes' constructors. One per Node
// environment, so worker threads and repeated loads never share state.
#pragma once
#include <napi.h>

namespace rkv::binding {

struct AddonData {
  Napi::FunctionReference provider;
  Napi::FunctionReference memory;
  Napi::FunctionReference memory_region;
  Napi::FunctionReference cq;
  Napi::FunctionReference connection;
  Napi::FunctionReference listener;
};

void init_transport(Napi::Env env, Napi::Object exports, AddonData* data);

// Throws a JS Error with a string code the TS layer maps to its error classes.
[[noreturn]] void throw_error(Napi::Env env, const char* code, const std::string& message);

}  // namespace rkv::binding
