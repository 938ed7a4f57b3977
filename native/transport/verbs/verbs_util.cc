// Small pure helpers of the verbs provider: URLs, addresses, the private data
// framing, and error texts.
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "verbs_internal.h"

namespace rkv::transport::verbs {

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

bool parse_rdma_url(const std::string& url, std::string* host, std::string* port, std::string* error) {
  const std::string prefix = "rdma://";
  if (url.compare(0, prefix.size(), prefix) != 0) {
    *error = "invalid URL '" + url + "': expected rdma://host:port";
    return false;
  }
  std::string rest = url.substr(prefix.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t colon;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      *error = "invalid URL '" + url + "': expected rdma://[v6 address]:port";
      return false;
    }
    *host = rest.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string::npos) {
      *error = "invalid URL '" + url + "': the port is missing (rdma://host:port; port 0 picks a free one)";
      return false;
    }
    *host = rest.substr(0, colon);
  }
  *port = rest.substr(colon + 1);
  if (host->empty() || port->empty() || port->size() > 5 ||
      port->find_first_not_of("0123456789") != std::string::npos || std::stoul(*port) > 65535) {
    *error = "invalid URL '" + url + "': expected rdma://host:port with a port from 0 to 65535";
    return false;
  }
  if (*host == "*") *host = "0.0.0.0";
  return true;
}

std::string sockaddr_text(const sockaddr* address) {
  if (address == nullptr || (address->sa_family != AF_INET && address->sa_family != AF_INET6)) return "";
  char host[NI_MAXHOST], service[NI_MAXSERV];
  socklen_t length = address->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (getnameinfo(address, length, host, sizeof host, service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  if (address->sa_family == AF_INET6) return std::string("[") + host + "]:" + service;
  return std::string(host) + ":" + service;
}

// IB and RoCE carry private data in fixed-size CM fields (REQ: 56 bytes after
// rdma_cm's own 36-byte header, REP: 196, REJ: 148) and deliver the whole field,
// zero-padded; iWARP delivers the exact length. One framing covers both: the
// payload, a 0x80 end marker, zeros. A connect request of exactly 56 bytes has no
// room for the marker and goes raw, which the receiver recognises by the absence
// of the marker -- so it must not itself end in 0x80 followed by zeros.
bool encode_private_data(const std::vector<uint8_t>& data, bool request, std::vector<uint8_t>* out,
                         std::string* error) {
  const size_t limit = u32(Limit::MAX_PRIVATE_DATA);
  if (data.size() > limit) {
    *error = "private data is limited to " + std::to_string(limit) + " bytes (got " + std::to_string(data.size()) + ")";
    return false;
  }
  *out = data;
  if (request && data.size() == limit) {
    size_t n = data.size();
    while (n > 0 && data[n - 1] == 0) n--;
    if (n > 0 && data[n - 1] == 0x80) {
      *error = "connect private data of exactly " + std::to_string(limit) +
               " bytes must not end in 0x80 followed by zero bytes (the verbs provider's framing marker); "
               "send at most " + std::to_string(limit - 1) + " bytes";
      return false;
    }
    return true;
  }
  out->push_back(0x80);
  return true;
}

std::vector<uint8_t> decode_private_data(const void* data, size_t length) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (bytes == nullptr || length == 0) return {};
  size_t n = length;
  while (n > 0 && bytes[n - 1] == 0) n--;
  if (n > 0 && bytes[n - 1] == 0x80) return std::vector<uint8_t>(bytes, bytes + n - 1);
  const size_t limit = u32(Limit::MAX_PRIVATE_DATA);
  return std::vector<uint8_t>(bytes, bytes + (length < limit ? length : limit));
}

std::string completion_error_text(Opcode verb, const ibv_wc& wc) {
  char vendor[32];
  std::snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
  return std::string(to_string(verb)) + ": " + to_string(static_cast<WcStatus>(wc.status)) + " (" +
         ibv_wc_status_str(wc.status) + "), vendor_err " + vendor;
}

std::string reject_reason_text(int status) {
  if (status < 0) return std::strerror(-status);  // iWARP reports an errno
  // The IB CM REJ reason codes (IBTA 12.6.7.2) that a connect can meet.
  switch (status) {
    case 1: return "no QP available at the peer (IB CM reason 1)";
    case 3: return "the peer is out of resources (IB CM reason 3)";
    case 4: return "the peer timed out (IB CM reason 4)";
    case 5: return "unsupported request (IB CM reason 5)";
    case 8: return "no listener on that port (IB CM reason 8: invalid service ID)";
    case 9: return "invalid transport type (IB CM reason 9)";
    case 10: return "stale connection (IB CM reason 10)";
    case 12: return "invalid GID (IB CM reason 12)";
    case 26: return "invalid MTU (IB CM reason 26)";
    case 27: return "insufficient responder resources (IB CM reason 27)";
    case 28: return "rejected by the peer (IB CM reason 28: consumer defined)";
    case 29: return "invalid RNR retry (IB CM reason 29)";
    default: return "IB CM reject reason " + std::to_string(status);
  }
}

std::string cm_status_text(int status) {
  if (status == 0) return "no status";
  return std::strerror(status < 0 ? -status : status);
}

}  // namespace rkv::transport::verbs
