// Provider selection by URL scheme.
#include <cstring>

#include "shm/shm_provider.h"
#include "transport.h"
#ifdef RKV_WITH_VERBS
#include "verbs/verbs_provider.h"
#endif

namespace rkv::transport {

std::vector<std::string> built_providers() {
#ifdef RKV_WITH_VERBS
  return {"shm", "rdma"};
#else
  return {"shm"};
#endif
}

bool split_url(const std::string& url, std::string* scheme, std::string* rest, std::string* error) {
  auto pos = url.find("://");
  if (pos == std::string::npos || pos == 0) {
    *error = "invalid URL '" + url + "': expected shm:///path/to/socket or rdma://host:port";
    return false;
  }
  *scheme = url.substr(0, pos);
  *rest = url.substr(pos + 3);
  if (*scheme != "shm" && *scheme != "rdma") {
    *error = "unknown URL scheme '" + *scheme + "' in '" + url + "': expected shm:// or rdma://";
    return false;
  }
  return true;
}

std::unique_ptr<Provider> create_provider(const std::string& scheme, EventSink sink, std::string* error) {
  if (scheme == "shm") return create_shm_provider(std::move(sink), error);
  if (scheme == "rdma") {
#ifdef RKV_WITH_VERBS
    return create_verbs_provider(std::move(sink), error);
#else
    *error = "this build of rdma-kv has no verbs provider (rdma://): rdma-core was not found at build time; "
             "install libibverbs-dev and librdmacm-dev and rebuild";
    return nullptr;
#endif
  }
  *error = "unknown provider '" + scheme + "'";
  return nullptr;
}

}  // namespace rkv::transport
