// The verbs provider: RC queue pairs over libibverbs, connections through
// librdmacm (rdma://host:port). See docs/verbs-provider.md for its choices.
#pragma once
#include <memory>
#include <string>

#include "../transport.h"

namespace rkv::transport {

// Opens the RDMA device (RKV_RDMA_DEVICE picks one by name, else the first with
// an active port), allocates its protection domain, probes what it can do and
// starts the rdma_cm event thread that calls `sink`. Returns nullptr and sets
// *error when there is no usable device.
std::unique_ptr<Provider> create_verbs_provider(EventSink sink, std::string* error);

}  // namespace rkv::transport
