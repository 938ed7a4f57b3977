// Provider selection by URL scheme.
#include <cstring>

#include "shm/shm_provider.h"
#include "transport.h"
#ifdef RKV_WITH_VERBS
#include "verbs/verbs_provider.h"
#endif

namespace rkv::transport {

// Every provider this code knows, built or not: the one list of URL schemes
// (TypeScript reads it from the addon, protocol/providers.ts).
const std::vector<ProviderInfo>& known_providers() {
  static const std::vector<ProviderInfo> providers = {
      {"shm", "shm:///path/to.sock", true, ""},
#ifdef RKV_WITH_VERBS
      {"rdma", "rdma://host:port", true, ""},
#else
      {"rdma", "rdma://host:port", false,
       "this build of rdma-kv has no verbs provider (rdma://): rdma-core was not found at build time; "
       "install libibverbs-dev and librdmacm-dev and rebuild"},
#endif
  };
  return providers;
}

namespace {
const ProviderInfo* find_provider(const std::string& scheme) {
  for (const ProviderInfo& info : known_providers()) {
    if (info.scheme == scheme) return &info;
  }
  return nullptr;
}
}  // namespace

bool split_url(const std::string& url, std::string* scheme, std::string* rest, std::string* error) {
  auto pos = url.find("://");
  if (pos == std::string::npos || pos == 0) {
    *error = "invalid URL '" + url + "': expected shm:///path/to/socket or rdma://host:port";
    return false;
  }
  *scheme = url.substr(0, pos);
  *rest = url.substr(pos + 3);
  if (find_provider(*scheme) == nullptr) {
    *error = "unknown URL scheme '" + *scheme + "' in '" + url + "': expected shm:// or rdma://";
    return false;
  }
  return true;
}

bool check_window(const MemoryRegion& region, uint64_t addr, uint64_t length, uint32_t access, std::string* error) {
  const uint32_t remote = u32(Access::REMOTE_READ) | u32(Access::REMOTE_WRITE) | u32(Access::REMOTE_ATOMIC);
  if (access == 0 || (access & ~remote) != 0) {
    *error = "a window's access is REMOTE_READ, REMOTE_WRITE and/or REMOTE_ATOMIC";
    return false;
  }
  if ((region.access() & u32(Access::MW_BIND)) == 0) {
    *error = "the region was not registered with MW_BIND";
    return false;
  }
  if ((access & (u32(Access::REMOTE_WRITE) | u32(Access::REMOTE_ATOMIC))) != 0 &&
      (region.access() & u32(Access::LOCAL_WRITE)) == 0) {
    *error = "a writable window needs a region with LOCAL_WRITE";
    return false;
  }
  if (length == 0 || !region.contains(addr, length)) {
    *error = "the window [" + std::to_string(addr) + ", +" + std::to_string(length) + ") is not inside the region";
    return false;
  }
  return true;
}

std::unique_ptr<Provider> create_provider(const std::string& scheme, EventSink sink, std::string* error) {
  if (scheme == "shm") return create_shm_provider(std::move(sink), error);
#ifdef RKV_WITH_VERBS
  if (scheme == "rdma") return create_verbs_provider(std::move(sink), error);
#endif
  const ProviderInfo* info = find_provider(scheme);
  *error = info != nullptr ? info->not_built : "unknown provider '" + scheme + "'";
  return nullptr;
}

}  // namespace rkv::transport
