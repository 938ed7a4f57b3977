// Internal classes of the verbs provider.
//
// Ownership (parents outlive children, as in pyverbs): every memory region,
// completion queue, connection and listener holds a shared_ptr to the
// VerbsCore, which owns the protection domain and the rdma_cm event channel.
// So whatever order the user releases things in, a queue pair is destroyed
// before its cm id, both before the CQs it uses (it holds them), and the PD and
// the event channel go last, when the last child has gone.
//
// Locks, from outer to inner; no thread ever takes an outer lock while holding
// an inner one, and none is held while calling the EventSink:
//   VerbsConnection::mutex_   control plane of one connection (cm id calls, state)
//   VerbsCq::mutex_           one CQ's poll and its qp_num -> connection map
//   VerbsCore::mutex          the registry (token -> connection/listener/CQ)
//   VerbsConnection::error_mutex_  first_error_ only (a leaf)
//   VerbsWindow::mutex_       one window's ibv_mw (a leaf, taken under a connection's)
// The data path (post_send, post_recv, the poll of one CQ) takes no connection
// lock: the send and receive rings are single-producer (the poster) and
// single-consumer (the CQ's poller) with atomic counters between them.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../transport.h"

namespace rkv::transport::verbs {

using Clock = std::chrono::steady_clock;

class VerbsConnection;
class VerbsListener;
class VerbsCq;

// ---- verbs_util.cc ------------------------------------------------------------------

std::string errno_text(const std::string& what, int err);
// "rdma://host:port" (host may be [v6]); port "0" is allowed when listening.
bool parse_rdma_url(const std::string& url, std::string* host, std::string* port, std::string* error);
std::string sockaddr_text(const sockaddr* address);  // "10.0.0.1:7000", "[fe80::1]:7000"
// The private data framing (see docs/verbs-provider.md): the bytes, then 0x80,
// then zeros, so the receiver finds the real length inside the zero padding that
// IB/RoCE CM messages add. `request` (the connect REQ, 56 bytes on IB) allows a
// 56-byte payload without the marker when it cannot be mistaken for a framed one.
bool encode_private_data(const std::vector<uint8_t>& data, bool request, std::vector<uint8_t>* out,
                         std::string* error);
std::vector<uint8_t> decode_private_data(const void* data, size_t length);
// "READ: REM_ACCESS_ERR (remote access error), vendor_err 0x88"
std::string completion_error_text(Opcode verb, const ibv_wc& wc);
// Why an IB CM REJ came (its reason code), or an errno (iWARP) as text.
std::string reject_reason_text(int status);
std::string cm_status_text(int status);  // rdma_cm event status: a negative errno

// ---- the core: device, PD, event channel, registry (verbs_device.cc) ----------------

struct VerbsCore {
  ~VerbsCore();  // the PD, then the event channel; the context belongs to librdmacm

  ibv_context* context = nullptr;  // librdmacm's context for the device (cm ids use it too)
  ibv_pd* pd = nullptr;
  rdma_event_channel* channel = nullptr;
  ibv_device_attr attr{};
  std::string name;
  uint32_t max_inline = 0;          // probed: the largest max_inline_data a QP gets
  bool atomics_usable = false;      // atomic_cap != NONE and the probe found them sane
  bool atomic_reply_swapped = false;  // the HCA writes atomic results byte-swapped
  bool memory_windows = false;      // type 2 windows: ibv_alloc_mw worked at start
  std::string memory_windows_note;  // how that was found, or why not
  std::string atomic_probe;         // how the byte order was determined (for docs/logs)
  void* device_list = nullptr;      // librdmacm's device list, held so the context stays open

  // The registry: rdma_cm ids, QPs and CQs carry a 64-bit token as their
  // context; tokens are unique in the process and never reused, so an event
  // that raced with a destroy finds nothing instead of a newer object that got
  // the same address.
  std::mutex mutex;
  std::unordered_map<uint64_t, std::weak_ptr<VerbsConnection>> connections;
  std::unordered_map<uint64_t, std::weak_ptr<VerbsListener>> listeners;
  std::unordered_map<uint64_t, std::weak_ptr<VerbsCq>> cqs;
  struct MrRange {
    uint64_t addr;
    uint64_t length;
    uint32_t access;
  };
  std::unordered_map<uint32_t, MrRange> mrs;  // by lkey
  bool stopped = false;  // the provider shut down: no new connections

  // Soft-RoCE (vendor 0xffffff) reports a receive buffer too short for the
  // message as LOC_QP_OP_ERR, the spec says LOC_LEN_ERR (see translate()).
  bool rxe = false;
  // IBV_SEND_FENCE is posted as asked, except on rxe: its requester fences on a
  // count of outstanding READs/atomics that a retransmit leaves wrong, so the
  // first fenced request after a retry waits forever (docs/softroce-vm.md). Its
  // responder executes a QP's requests in PSN order, and replays a retried
  // atomic from its cache, so the order a fence promises holds there without
  // it. RKV_VERBS_RXE_FENCE=1 posts fences on rxe too (to show the stall).
  bool post_fences = true;
  bool trace = false;  // RKV_VERBS_TRACE=1: the probes' results and every rdma_cm event on stderr
  // RKV_RDMA_ACK_TIMEOUT=n: every connection's local ACK timeout is 4.096 us x 2^n
  // (rdma_set_option before connect/accept); -1 keeps rdma_cm's, derived from the path.
  int ack_timeout = -1;
  // Under `mutex`: does [addr, addr+length) lie in a region of ours with LOCAL_WRITE?
  bool writable_locally(uint32_t lkey, uint64_t addr, uint64_t length);

  static uint64_t token();
  const char* atomic_cap_name() const;
};

// One RKV_VERBS_TRACE line on stderr, stamped with the pid and CLOCK_MONOTONIC
// seconds (the clock of /proc/uptime), so that the lines of a server and its
// clients can be merged in order.
void trace_line(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Opens the device and probes it. Returns nullptr and sets *error.
std::shared_ptr<VerbsCore> open_core(std::string* error);
// Every live core of the process. Several providers (two in one process for
// tests, one per worker thread) share librdmacm's device context and so its
// async events: whichever provider thread reads one looks in all of them.
std::vector<std::shared_ptr<VerbsCore>> live_cores();

class VerbsMr final : public MemoryRegion {
 public:
  VerbsMr(std::shared_ptr<VerbsCore> core, ibv_mr* mr, uint8_t* addr, size_t length, uint32_t access);
  ~VerbsMr() override;
  ibv_mr* mr() const { return mr_; }
  const VerbsCore* core() const { return core_.get(); }

 private:
  std::shared_ptr<VerbsCore> core_;
  ibv_mr* mr_;
};

// A type 2 memory window, bound by its connection (VerbsConnection::bind_window)
// with an IBV_WR_BIND_MW on that queue pair, so the device honours its rkey on
// that queue pair alone. Invalidated by ibv_dealloc_mw, which unbinds it at
// once and needs no working queue pair (a LOCAL_INV posted to a queue pair in
// error would only be flushed). It holds its region: the device refuses to
// deregister memory that windows are bound to (rxe: EINVAL).
class VerbsWindow final : public Window {
 public:
  VerbsWindow(ibv_mw* mw, std::shared_ptr<MemoryRegion> region, uint32_t rkey, uint64_t addr, uint64_t length,
              uint32_t access);
  ~VerbsWindow() override { invalidate(); }
  void invalidate() override;
  bool valid() const override;

 private:
  mutable std::mutex mutex_;  // a leaf: invalidated from JS and from the provider's thread
  ibv_mw* mw_;
  std::shared_ptr<MemoryRegion> region_;
};

// ---- completion queue (verbs_cq.cc) --------------------------------------------------

class VerbsCq final : public CompletionQueue, public std::enable_shared_from_this<VerbsCq> {
 public:
  static std::shared_ptr<VerbsCq> create(std::shared_ptr<VerbsCore> core, uint32_t depth, std::string* error);
  ~VerbsCq() override;  // acks what is unacked, destroys the CQ, then its channel

  int poll(Completion* out, int max) override;
  void arm() override;
  int event_fd() const override { return channel_->fd; }
  void ack_event() override;
  uint32_t depth() const override { return depth_; }

  ibv_cq* cq() const { return cq_; }
  const VerbsCore* core() const { return core_.get(); }
  void attach(uint32_t qp_num, VerbsConnection* connection);
  void detach(uint32_t qp_num, VerbsConnection* connection);
  // An IBV_EVENT_CQ_ERR (overrun): every queue pair using this CQ is broken.
  std::vector<std::shared_ptr<VerbsConnection>> users();

 private:
  VerbsCq(std::shared_ptr<VerbsCore> core, uint32_t depth) : core_(std::move(core)), depth_(depth) {}
  VerbsConnection* lookup(uint32_t qp_num);

  std::shared_ptr<VerbsCore> core_;
  uint32_t depth_;
  uint64_t token_ = 0;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;

  std::mutex mutex_;  // poll() and the map: connections attach from other threads
  std::unordered_map<uint32_t, VerbsConnection*> qps_;
  uint32_t last_qp_num_ = 0;
  VerbsConnection* last_ = nullptr;
  std::vector<ibv_wc> wcs_;

  std::mutex event_mutex_;  // ack_event() may run on a watcher thread while JS polls
  uint32_t unacked_ = 0;
};

// ---- connection (verbs_connection.cc) ---------------------------------------------------

// The retry counts this provider asks for, on both ends (see the comment at
// their definition in verbs_connection.cc).
extern const uint8_t kRetryCount;
extern const uint8_t kRnrRetryCount;

class VerbsConnection final : public Connection, public std::enable_shared_from_this<VerbsConnection> {
 public:
  enum class Phase { RESOLVING_ADDR, RESOLVING_ROUTE, CONNECTING, DONE };

  // Active side: created by connect(), before rdma_resolve_addr.
  VerbsConnection(std::shared_ptr<VerbsCore> core, uint64_t token, QueuePairOptions options,
                  std::vector<uint8_t> wire_private_data, uint32_t timeout_ms, std::string url);
  // Passive side: created on CONNECT_REQUEST with the request's id.
  VerbsConnection(std::shared_ptr<VerbsCore> core, uint64_t token, rdma_cm_id* id, std::vector<uint8_t> peer_private,
                  uint8_t peer_initiator_depth, uint8_t peer_responder_resources);
  ~VerbsConnection() override;

  bool accept(const QueuePairOptions& options, const std::vector<uint8_t>& private_data, std::string* error) override;
  void reject(const std::vector<uint8_t>& private_data) override;
  int post_send(const WorkRequest* wrs, size_t count, size_t* bad) override;
  int post_recv(const RecvRequest* rrs, size_t count, size_t* bad) override;
  void disconnect() override;
  bool fence_complete() override;
  std::shared_ptr<Window> bind_window(const std::shared_ptr<MemoryRegion>& region, uint64_t addr, uint64_t length,
                                      uint32_t access, std::string* error) override;
  ConnState state() const override { return state_.load(std::memory_order_acquire); }
  uint32_t qp_num() const override { return qp_num_.load(std::memory_order_acquire); }
  uint32_t max_inline() const override { return max_inline_; }
  const std::vector<uint8_t>& peer_private_data() const override { return peer_private_; }
  std::string peer_address() const override;
  std::string first_error() const override;

  // Control plane, on the provider's thread. Each returns the events to emit.
  void set_id(rdma_cm_id* id) { id_ = id; }
  rdma_cm_id* id() const { return id_; }
  uint64_t token() const { return token_; }
  bool start_resolve(const sockaddr* destination, std::string* error);  // from connect()
  void on_addr_resolved(std::vector<ConnectionEvent>* events);
  void on_route_resolved(std::vector<ConnectionEvent>* events);
  void on_established(std::vector<uint8_t> private_data, std::vector<ConnectionEvent>* events);
  void on_rejected(int status, bool consumer, std::vector<uint8_t> private_data, std::vector<ConnectionEvent>* events);
  void on_disconnected(std::vector<ConnectionEvent>* events);
  void on_failure(const std::string& why, std::vector<ConnectionEvent>* events);  // ERROR or DISCONNECTED
  void check_deadline(Clock::time_point now, std::vector<ConnectionEvent>* events);
  bool connecting_actively() const;
  std::string where() const;  // the URL (active side) or the peer's address (passive side)
  // The QP broke (an error completion or an async event): ERROR, flush, and
  // rdma_disconnect so the peer sees DISCONNECTED.
  void fail(const std::string& why);
  // Provider shutdown: as disconnect(), but nothing more will be delivered.
  void shut_down();

  // Data path, from VerbsCq::poll under that CQ's lock. Returns true when *out
  // holds a completion for the user (false: a forced signal, swallowed, or a
  // stale completion of an older QP).
  bool translate(const ibv_wc& wc, Completion* out);
  // True once, for the first error completion: the poller then calls fail().
  bool take_error_trigger() { return error_trigger_.exchange(false, std::memory_order_acq_rel); }

 private:
  struct RecvSlot {
    uint64_t wr_id = 0;
    uint64_t addr = 0;
    uint32_t length = 0;
    uint32_t lkey = 0;
  };
  struct SendSlot {
    uint64_t wr_id = 0;
    uint64_t local_addr = 0;  // atomics: where the HCA writes the old value
    Opcode opcode = Opcode::READ;
    bool user_signaled = false;  // false: unsignaled, or signaled by us only
    bool atomic = false;
    bool misaligned = false;  // an atomic sent as a request that must fail (see post_send)
  };

  bool create_qp(const QueuePairOptions& options, std::string* error);  // under mutex_
  int post_recv_locked(const RecvRequest* rrs, size_t count, size_t* bad);
  void note_error(const std::string& text, bool from_completion);
  void fix_atomics(uint64_t upto, bool last_succeeded);
  void disconnect_locked();  // rdma_disconnect once (QP -> ERR, DREQ to the peer); our windows end
  void invalidate_windows_locked();
  int post_bind(ibv_mw* mw, ibv_mr* mr, uint64_t addr, uint64_t length, uint32_t access, uint32_t rkey);
  void emit_failure_locked(const std::string& why, std::vector<ConnectionEvent>* events);

  std::shared_ptr<VerbsCore> core_;  // first: released last
  std::shared_ptr<VerbsCq> send_cq_, recv_cq_;
  const uint64_t token_;
  const uint32_t generation_;  // 15 bits of the token, in every wr_id we post
  const bool active_;
  rdma_cm_id* id_ = nullptr;
  ibv_qp* qp_ = nullptr;

  // Control plane (mutex_).
  mutable std::mutex mutex_;
  std::atomic<ConnState> state_{ConnState::CONNECTING};
  Phase phase_ = Phase::RESOLVING_ADDR;
  QueuePairOptions options_;            // active side: used at ROUTE_RESOLVED
  std::vector<uint8_t> wire_private_;   // active side: the framed connect private data
  uint32_t timeout_ms_ = 0;
  Clock::time_point deadline_{};
  std::string url_;
  bool answered_ = false;          // passive: accept() or reject() was called
  bool disconnect_called_ = false;
  bool final_event_sent_ = false;  // REJECTED, ERROR or DISCONNECTED went out
  bool shut_down_ = false;
  uint8_t peer_initiator_depth_ = 0, peer_responder_resources_ = 0;
  std::vector<uint8_t> peer_private_;
  std::string peer_address_;
  std::vector<std::weak_ptr<VerbsWindow>> windows_;  // bound on this QP: invalidated when it breaks

  mutable std::mutex error_mutex_;
  std::string first_error_;
  std::atomic<bool> error_trigger_{false};
  bool error_noted_ = false;  // under error_mutex_

  // Data path. The poster owns *_posted_ and the WR arrays; the poller owns
  // *_completed_; each reads the other's counter (acquire/release).
  std::atomic<bool> send_ready_{false};  // the QP is in RTS (or past it)
  std::atomic<bool> recv_ready_{false};  // the QP exists (INIT or later)
  std::atomic<uint32_t> qp_num_{0};
  uint32_t max_inline_ = 0;
  uint32_t send_depth_ = 0, recv_depth_ = 0;
  uint32_t signal_interval_ = 1;  // send_depth_ / 2: the longest unsignaled run
  uint32_t unsignaled_run_ = 0;   // WRs posted since the last signaled one
  bool swap_atomics_ = false;
  std::atomic<uint64_t> send_posted_{0}, send_completed_{0};
  std::atomic<uint64_t> recv_posted_{0}, recv_completed_{0};
  uint64_t atomics_fixed_ = 0;  // poller: every send seq below this was fixed up
  std::vector<SendSlot> send_slots_;
  std::vector<RecvSlot> recv_slots_;
  std::vector<ibv_send_wr> send_wrs_;
  std::vector<ibv_sge> send_sges_;
  std::vector<ibv_recv_wr> recv_wrs_;
  std::vector<ibv_sge> recv_sges_;
};

// ---- listener and provider (verbs_provider.cc) -----------------------------------------

class VerbsListener final : public Listener {
 public:
  VerbsListener(std::shared_ptr<VerbsCore> core, uint64_t token, rdma_cm_id* id, std::string url)
      : core_(std::move(core)), token_(token), id_(id), url_(std::move(url)) {}
  ~VerbsListener() override { close(); }
  std::string url() const override { return url_; }
  void close() override;
  bool open() const {
    std::lock_guard<std::mutex> guard(mutex_);
    return id_ != nullptr;
  }

 private:
  std::shared_ptr<VerbsCore> core_;
  const uint64_t token_;
  mutable std::mutex mutex_;
  rdma_cm_id* id_;
  std::string url_;
};

// The wr_id we post carries: bit 63 = a receive, bits 48..62 = the connection's
// generation, bits 0..47 = the request's sequence number on its queue.
constexpr uint64_t kRecvTag = uint64_t{1} << 63;
constexpr int kGenerationShift = 48;
constexpr uint64_t kGenerationMask = 0x7fff;
constexpr uint64_t kSeqMask = (uint64_t{1} << kGenerationShift) - 1;

}  // namespace rkv::transport::verbs
