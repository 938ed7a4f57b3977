// The transport layer: a verbs-shaped interface with two providers.
//
//   Provider        one per process per scheme ("shm", "rdma"); owns the
//                   connection-management thread and the protection domain.
//   Memory          a shareable mapping (memfd or file) that can be registered.
//   MemoryRegion    a registered range with lkey/rkey and access flags.
//   CompletionQueue polled in batches; arm() + event_fd() for event mode.
//   Connection      an RC queue pair and the connection that carries it.
//
// Semantics follow libibverbs: one-sided READ/WRITE/atomics need the remote
// region's access flags, the first error completion moves the connection to the
// error state and every later work request is flushed with WR_FLUSH_ERR.
//
// Threading: post_send/post_recv/poll may be called from any one thread at a
// time per object (callers serialize); connection events are delivered on the
// provider's own thread through the EventSink given at creation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../common/constants.generated.h"

namespace rkv::transport {

// A work request for post_send. One scatter/gather entry is all this store needs.
struct WorkRequest {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::READ;
  uint32_t send_flags = 0;   // SendFlag bits
  uint64_t local_addr = 0;   // process virtual address inside a region with lkey
  uint32_t length = 0;
  uint32_t lkey = 0;
  uint64_t remote_addr = 0;  // the peer's virtual address (as published by it)
  uint32_t rkey = 0;
  uint64_t compare_add = 0;  // CMP_AND_SWP: compare; FETCH_AND_ADD: add
  uint64_t swap = 0;
  uint32_t imm = 0;          // host byte order; providers convert for the wire
};

struct RecvRequest {
  uint64_t wr_id = 0;
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::SUCCESS;
  Opcode opcode = Opcode::READ;
  uint32_t byte_len = 0;
  uint32_t imm = 0;        // host byte order
  uint32_t wc_flags = 0;   // WcFlag bits
  uint32_t qp_num = 0;
  uint32_t vendor_err = 0;
};

// A shareable, page-aligned mapping. Owned by whoever allocated it; it must
// outlive every MemoryRegion registered on it.
class Memory {
 public:
  // Anonymous memfd (sealed against shrinking) or, with a path, a file that
  // keeps its contents across restarts. Returns nullptr and sets *error.
  // `huge_pages` (anonymous only): hugetlb pages when enough are reserved (the
  // mapping rounded up to a whole number of them), else transparent huge pages
  // on the memfd where the kernel allows them for shmem; page_kind() says which,
  // and page_note() why not when neither.
  static std::unique_ptr<Memory> allocate(size_t length, const std::string& path, std::string* error,
                                          bool huge_pages = false);
  ~Memory();
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  uint8_t* data() const { return data_; }
  size_t length() const { return length_; }
  int fd() const { return fd_; }
  bool file_backed() const { return file_backed_; }
  bool existed() const { return existed_; }  // a file that already held data
  const std::string& page_kind() const { return page_kind_; }  // "4k", "thp" or "hugetlb"
  const std::string& page_note() const { return page_note_; }

 private:
  Memory() = default;
  uint8_t* data_ = nullptr;
  size_t length_ = 0;
  size_t mapped_ = 0;  // hugetlb: length_ rounded up to whole huge pages (what munmap needs)
  int fd_ = -1;
  bool file_backed_ = false;
  bool existed_ = false;
  std::string page_kind_ = "4k";
  std::string page_note_;
};

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  uint8_t* addr() const { return addr_; }
  size_t length() const { return length_; }
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  uint32_t access() const { return access_; }
  bool contains(uint64_t a, uint64_t len) const {
    uint64_t base = reinterpret_cast<uint64_t>(addr_);
    return a >= base && len <= length_ && a - base <= length_ - len;
  }

 protected:
  uint8_t* addr_ = nullptr;
  size_t length_ = 0;
  uint32_t lkey_ = 0, rkey_ = 0, access_ = 0;
};

// A memory window (verbs type 2B): an rkey of its own over a range of one of
// our regions, bound to one connection. Only that connection's peer can use it
// (the same rkey on any other connection fails with REM_ACCESS_ERR, as does an
// access the window's flags do not allow), and it ends with invalidate() or
// with its connection (disconnect(), a failure, the destructor). The region
// must be registered with Access::MW_BIND; a window may allow REMOTE_WRITE or
// REMOTE_ATOMIC only where the region has LOCAL_WRITE (IBA C10-73, C10-74).
class Window {
 public:
  virtual ~Window() = default;
  uint32_t rkey() const { return rkey_; }
  uint64_t addr() const { return addr_; }
  uint64_t length() const { return length_; }
  uint32_t access() const { return access_; }
  // When it returns, the peer's requests with rkey() fail with REM_ACCESS_ERR
  // (on shm: those it begins from then on; a fence waits for one in flight).
  // Idempotent.
  virtual void invalidate() = 0;
  virtual bool valid() const = 0;

 protected:
  uint32_t rkey_ = 0, access_ = 0;
  uint64_t addr_ = 0, length_ = 0;
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Moves up to max completions into out; never blocks. Returns the count.
  virtual int poll(Completion* out, int max) = 0;
  // Requests one wake-up on event_fd() for the next completion (ibv_req_notify_cq).
  // Poll again after arming: completions that raced with arm() produce no event.
  virtual void arm() = 0;
  // Withdraws an arm() that has not fired yet, where the provider can: shm's
  // completions of a post arrive inside it, and a poster that polls them
  // itself needs no wake-up for them. Verbs cannot (no-op: an event may come).
  virtual void disarm() {}
  // Readable after arm() once a completion (or a flush) is available.
  virtual int event_fd() const = 0;
  // Consumes the readiness of event_fd() (ibv_get_cq_event + ibv_ack_cq_events).
  virtual void ack_event() = 0;
  virtual uint32_t depth() const = 0;
};

struct QueuePairOptions {
  std::shared_ptr<CompletionQueue> send_cq;
  std::shared_ptr<CompletionQueue> recv_cq;
  uint32_t send_depth = u32(Limit::DEFAULT_QUEUE_DEPTH);
  uint32_t recv_depth = u32(Limit::DEFAULT_QUEUE_DEPTH);
  uint32_t max_inline = 0;  // 0: the provider's best
  // Posted after the queue pair is created and before it reaches RTR, so the
  // peer's first SEND or WRITE_WITH_IMM finds a receive waiting.
  std::vector<RecvRequest> initial_recvs;
};

class Connection {
 public:
  virtual ~Connection() = default;
  // Passive side, after CONNECT_REQUEST: create the queue pair and accept, or reject.
  virtual bool accept(const QueuePairOptions& options, const std::vector<uint8_t>& private_data,
                      std::string* error) = 0;
  virtual void reject(const std::vector<uint8_t>& private_data) = 0;
  // Posts the list with one doorbell. Returns 0, or an errno with *bad set to the
  // first request that was not posted (as ibv_post_send does).
  virtual int post_send(const WorkRequest* wrs, size_t count, size_t* bad) = 0;
  virtual int post_recv(const RecvRequest* rrs, size_t count, size_t* bad) = 0;
  // Moves the queue pair to the error state (flushing) and tells the peer. Idempotent.
  virtual void disconnect() = 0;
  // After disconnect() (or a failure): true once nothing the peer posted can
  // still land in our memory. A NIC guarantees that the moment the queue pair
  // is in error; the shm provider, where the peer's own process does the
  // writes, may have to wait for a peer caught in the middle of a post.
  virtual bool fence_complete() = 0;
  // Binds a window over [addr, addr + length) of `region` (ours, of this
  // provider) with remote `access` (REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC),
  // for this connection's peer alone. The connection must be connected or
  // accepted. It holds `region` until the window ends (a NIC refuses to
  // deregister memory that windows are bound to). nullptr and *error when the
  // device has no windows (DeviceInfo::memory_windows) or the bind is refused.
  virtual std::shared_ptr<Window> bind_window(const std::shared_ptr<MemoryRegion>& region, uint64_t addr,
                                              uint64_t length, uint32_t access, std::string* error) = 0;

  virtual ConnState state() const = 0;
  virtual uint32_t qp_num() const = 0;
  virtual uint32_t max_inline() const = 0;
  // The connect request's private data (passive side) or the accept/reject
  // private data (active side).
  virtual const std::vector<uint8_t>& peer_private_data() const = 0;
  virtual std::string peer_address() const = 0;
  // The first error completion or event that broke the connection ("" while healthy).
  virtual std::string first_error() const = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  virtual std::string url() const = 0;  // the bound address, with the real port
  virtual void close() = 0;
};

struct ConnectionEvent {
  ConnEvent type = ConnEvent::ERROR;
  std::shared_ptr<Connection> connection;
  std::vector<uint8_t> private_data;  // CONNECT_REQUEST, ESTABLISHED, REJECTED
  std::string message;                // REJECTED, DISCONNECTED, ERROR: why
};

// Called on the provider's thread. Must not block for long.
using EventSink = std::function<void(ConnectionEvent&&)>;

struct DeviceInfo {
  std::string name;
  uint32_t max_qp_rd_atom = 0;
  uint32_t max_qp_init_rd_atom = 0;
  std::string atomic_cap;  // "NONE", "HCA", "GLOB"
  uint32_t max_inline = 0;
  // Connection::bind_window works (verbs: type 2B windows, probed at start).
  bool memory_windows = false;
  std::string memory_windows_note;  // how that was found, or why not
  // The deepest completion queue create_cq accepts (verbs: ibv_device_attr.max_cqe).
  uint32_t max_cqe = 0;
};

class Provider {
 public:
  virtual ~Provider() = default;
  // "shm" or "rdma": the URL scheme this provider serves.
  virtual const char* scheme() const = 0;
  virtual DeviceInfo device_info() const = 0;
  virtual std::unique_ptr<MemoryRegion> register_memory(Memory& memory, size_t offset, size_t length,
                                                        uint32_t access, std::string* error) = 0;
  virtual std::shared_ptr<CompletionQueue> create_cq(uint32_t depth, std::string* error) = 0;
  virtual std::shared_ptr<Listener> listen(const std::string& url, std::string* error) = 0;
  // Starts connecting; ESTABLISHED, REJECTED or ERROR follows on the sink.
  virtual std::shared_ptr<Connection> connect(const std::string& url, const QueuePairOptions& options,
                                              const std::vector<uint8_t>& private_data, uint32_t timeout_ms,
                                              std::string* error) = 0;
  // Stops the event thread and disconnects everything. Idempotent.
  virtual void shutdown() = 0;
};

// Creates the provider for a URL scheme, or returns nullptr with *error set
// (unknown scheme, provider not built, no device).
std::unique_ptr<Provider> create_provider(const std::string& scheme, EventSink sink, std::string* error);

// A provider this code knows: its URL scheme, an example URL, whether this
// build contains it, and if not, why (what to install).
struct ProviderInfo {
  std::string scheme;
  std::string example;
  bool built;
  std::string not_built;
};
const std::vector<ProviderInfo>& known_providers();


// What every provider checks before binding a window (transport.h, Window);
// false with *error when the request is malformed.
bool check_window(const MemoryRegion& region, uint64_t addr, uint64_t length, uint32_t access, std::string* error);

// Splits "scheme://rest" and checks the scheme is one we serve.
bool split_url(const std::string& url, std::string* scheme, std::string* rest, std::string* error);

}  // namespace rkv::transport
