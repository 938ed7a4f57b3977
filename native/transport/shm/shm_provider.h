// The shm provider: verbs semantics between processes on one host.
#pragma once
#include <memory>
#include <string>

#include "../transport.h"

namespace rkv::transport {
std::unique_ptr<Provider> create_shm_provider(EventSink sink, std::string* error);
}
