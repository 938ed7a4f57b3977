// A connection: one RC queue pair and the rdma_cm id that carries it.
//
// The data path (post_send / post_recv / translate) is lock-free between the
// poster and the CQ's poller: each queue is a ring of slots indexed by a
// sequence number that we post as the wr_id, so a completion -- signaled or
// not, success or flush -- names its slot, and the caller's wr_id never has to
// fit anywhere else. Completions of one queue arrive in order, so the
// completion of sequence s also retires every earlier slot of that queue.
#include <byteswap.h>
#include <endian.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs_internal.h"

namespace rkv::transport::verbs {

// Transport retries: how often the requester resends a packet that drew no ACK
// within the local ACK timeout, which rdma_cm derives from the path (about half
// a second on RoCE, CMA_IBOE_PACKET_LIFETIME). 7 is the largest value the spec
// allows; it is finite too, but every extra retry adds a timeout before a dead
// peer turns into RETRY_EXC_ERR. 6 keeps a lossy-but-alive link working
// (Soft-RoCE under load drops packets) and reports a dead one in a few seconds.
const uint8_t kRetryCount = 6;
// RNR retries: how often a SEND or WRITE_WITH_IMM is retried when the receiver
// has no RECV posted, each after the responder's RNR timer (rdma_cm leaves
// min_rnr_timer at 0, i.e. 655 ms). 7 would mean "retry forever": a receiver
// that stopped posting RECVs would hang the sender silently. 6 gives a slow
// receiver (a GC pause, a busy event loop) about 4 s to catch up, then the
// sender gets RNR_RETRY_EXC_ERR and the connection breaks visibly.
const uint8_t kRnrRetryCount = 6;

namespace {

uint8_t clamp_u8(int value) { return static_cast<uint8_t>(std::clamp(value, 0, 255)); }

bool is_atomic(Opcode opcode) { return opcode == Opcode::CMP_AND_SWP || opcode == Opcode::FETCH_AND_ADD; }

bool may_inline(Opcode opcode) {
  return opcode == Opcode::SEND || opcode == Opcode::WRITE || opcode == Opcode::WRITE_WITH_IMM;
}

// RKV_RDMA_ACK_TIMEOUT: rdma_cm programs the QP with it on the way to RTS,
// so it must be set on the id before rdma_connect / rdma_accept.
bool set_ack_timeout(rdma_cm_id* id, int exponent, std::string* error) {
  if (exponent < 0) return true;
  uint8_t timeout = static_cast<uint8_t>(exponent);
  if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(timeout)) == 0) return true;
  *error = errno_text("rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT, " + std::to_string(exponent) + ")", errno);
  return false;
}

}  // namespace

VerbsConnection::VerbsConnection(std::shared_ptr<VerbsCore> core, uint64_t token, QueuePairOptions options,
                                 std::vector<uint8_t> wire_private_data, uint32_t timeout_ms, std::string url)
    : core_(std::move(core)),
      token_(token),
      generation_(static_cast<uint32_t>(token & kGenerationMask)),
      active_(true),
      options_(std::move(options)),
      wire_private_(std::move(wire_private_data)),
      timeout_ms_(timeout_ms),
      // Set here, not when resolving starts: the provider thread checks the
      // deadline as soon as connect() registers the connection, and a zero
      // deadline failed it at once ("timed out after N ms") under load.
      deadline_(Clock::now() + std::chrono::milliseconds(timeout_ms)),
      url_(std::move(url)) {}

VerbsConnection::VerbsConnection(std::shared_ptr<VerbsCore> core, uint64_t token, rdma_cm_id* id,
                                 std::vector<uint8_t> peer_private, uint8_t peer_initiator_depth,
                                 uint8_t peer_responder_resources)
    : core_(std::move(core)),
      token_(token),
      generation_(static_cast<uint32_t>(token & kGenerationMask)),
      active_(false),
      id_(id),
      phase_(Phase::CONNECTING),
      peer_initiator_depth_(peer_initiator_depth),
      peer_responder_resources_(peer_responder_resources),
      peer_private_(std::move(peer_private)) {
  peer_address_ = sockaddr_text(rdma_get_peer_addr(id));
}

VerbsConnection::~VerbsConnection() {
  {
    std::lock_guard<std::mutex> guard(core_->mutex);
    auto it = core_->connections.find(token_);
    if (it != core_->connections.end() && it->second.expired()) core_->connections.erase(it);
  }
  const uint32_t qp_num = qp_num_.load(std::memory_order_relaxed);
  if (send_cq_) send_cq_->detach(qp_num, this);
  if (recv_cq_) recv_cq_->detach(qp_num, this);
  if (id_ != nullptr) {
    if (!active_ && !answered_) {
      rdma_reject(id_, nullptr, 0);  // dropped without an answer: the client hears "no"
    } else if (qp_ != nullptr && !disconnect_called_) {
      rdma_disconnect(id_);
    }
    invalidate_windows_locked();  // a bound window holds its QP in the device: gone first
    if (qp_ != nullptr) rdma_destroy_qp(id_);  // the QP before the id that carries it
    rdma_destroy_id(id_);
  }
  // send_cq_/recv_cq_ and then core_ are released after this body: CQs after
  // the QP, the PD and event channel after everything.
}

std::string VerbsConnection::peer_address() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return peer_address_;
}

bool VerbsConnection::connecting_actively() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return active_ && phase_ != Phase::DONE;
}

std::string VerbsConnection::where() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return active_ ? url_ : "rdma://" + peer_address_;
}

std::string VerbsConnection::first_error() const {
  std::lock_guard<std::mutex> guard(error_mutex_);
  return first_error_;
}

void VerbsConnection::note_error(const std::string& text, bool from_completion) {
  std::lock_guard<std::mutex> guard(error_mutex_);
  if (first_error_.empty()) first_error_ = text;
  if (from_completion && !error_noted_) {
    error_noted_ = true;
    error_trigger_.store(true, std::memory_order_release);
  }
}

// ---- queue pair ----------------------------------------------------------------------------

bool VerbsConnection::create_qp(const QueuePairOptions& options, std::string* error) {
  auto* send_cq = dynamic_cast<VerbsCq*>(options.send_cq.get());
  auto* recv_cq = dynamic_cast<VerbsCq*>(options.recv_cq.get());
  if (send_cq == nullptr || recv_cq == nullptr || send_cq->core() != core_.get() || recv_cq->core() != core_.get()) {
    *error = "queue pair options need a send CQ and a receive CQ created by this provider";
    return false;
  }
  const auto max_wr = static_cast<uint32_t>(core_->attr.max_qp_wr);
  if (options.send_depth < 2 || options.recv_depth < 1 || options.send_depth > max_wr || options.recv_depth > max_wr) {
    *error = "send_depth must be 2.." + std::to_string(max_wr) + " and recv_depth 1.." + std::to_string(max_wr) +
             " (got " + std::to_string(options.send_depth) + " and " + std::to_string(options.recv_depth) + ")";
    return false;
  }
  if (options.initial_recvs.size() > options.recv_depth) {
    *error = std::to_string(options.initial_recvs.size()) + " initial receives do not fit a receive queue of " +
             std::to_string(options.recv_depth);
    return false;
  }
  ibv_qp_init_attr attr{};
  uint32_t want_inline = options.max_inline != 0 ? options.max_inline : core_->max_inline;
  for (;;) {
    attr = {};
    attr.qp_context = reinterpret_cast<void*>(token_);
    attr.send_cq = send_cq->cq();
    attr.recv_cq = recv_cq->cq();
    attr.qp_type = IBV_QPT_RC;
    attr.sq_sig_all = 0;  // selective signaling
    attr.cap.max_send_wr = options.send_depth;
    attr.cap.max_recv_wr = options.recv_depth;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    attr.cap.max_inline_data = want_inline;
    if (rdma_create_qp(id_, core_->pd, &attr) == 0) break;
    const int err = errno;
    // "The provider's best" was probed with the default depth; a deeper queue
    // may allow less inline data on some HCAs: halve until it fits.
    if (options.max_inline == 0 && want_inline > 0) {
      want_inline /= 2;
      continue;
    }
    *error = errno_text("rdma_create_qp (send depth " + std::to_string(options.send_depth) + ", recv depth " +
                            std::to_string(options.recv_depth) + ", inline " + std::to_string(want_inline) + ")",
                        err);
    return false;
  }
  qp_ = id_->qp;
  // The queue pair's real capacities, which may exceed what was asked for.
  max_inline_ = attr.cap.max_inline_data;
  send_depth_ = attr.cap.max_send_wr;
  recv_depth_ = attr.cap.max_recv_wr;
  signal_interval_ = std::max<uint32_t>(1, send_depth_ / 2);
  swap_atomics_ = core_->atomic_reply_swapped;
  send_slots_.assign(send_depth_, SendSlot{});
  send_wrs_.assign(send_depth_, ibv_send_wr{});
  send_sges_.assign(send_depth_, ibv_sge{});
  recv_slots_.assign(recv_depth_, RecvSlot{});
  recv_wrs_.assign(recv_depth_, ibv_recv_wr{});
  recv_sges_.assign(recv_depth_, ibv_sge{});
  for (uint32_t i = 0; i < send_depth_; i++) send_wrs_[i].sg_list = &send_sges_[i];
  for (uint32_t i = 0; i < recv_depth_; i++) recv_wrs_[i].sg_list = &recv_sges_[i];

  send_cq_ = std::static_pointer_cast<VerbsCq>(options.send_cq);
  recv_cq_ = std::static_pointer_cast<VerbsCq>(options.recv_cq);
  qp_num_.store(qp_->qp_num, std::memory_order_release);
  send_cq->attach(qp_->qp_num, this);
  recv_cq->attach(qp_->qp_num, this);
  recv_ready_.store(true, std::memory_order_release);

  // rdma_create_qp left the QP in INIT: receives posted now are waiting before
  // rdma_accept / rdma_connect take it to RTR, so the peer's first SEND or
  // WRITE_WITH_IMM cannot meet an empty receive queue.
  if (!options.initial_recvs.empty()) {
    size_t bad = 0;
    int rc = post_recv(options.initial_recvs.data(), options.initial_recvs.size(), &bad);
    if (rc != 0) {
      *error = errno_text("posting initial receive " + std::to_string(bad), rc);
      recv_ready_.store(false, std::memory_order_release);
      send_cq->detach(qp_->qp_num, this);
      recv_cq->detach(qp_->qp_num, this);
      rdma_destroy_qp(id_);
      qp_ = nullptr;
      send_cq_.reset();
      recv_cq_.reset();
      qp_num_.store(0, std::memory_order_release);
      recv_posted_.store(0);
      return false;
    }
  }
  return true;
}

// ---- passive side ------------------------------------------------------------------------------

bool VerbsConnection::accept(const QueuePairOptions& options, const std::vector<uint8_t>& private_data,
                             std::string* error) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (active_ || answered_ || state() != ConnState::CONNECTING) {
    *error = "accept() needs a connection request that is still pending";
    return false;
  }
  std::vector<uint8_t> wire;
  if (!encode_private_data(private_data, false, &wire, error)) return false;
  if (!create_qp(options, error)) return false;
  // Negotiated, never assumed: we answer the peer's reads and atomics with at
  // most what both our device and its initiator depth allow, and issue at most
  // what its responder resources and our device allow.
  rdma_conn_param param{};
  param.private_data = wire.data();
  param.private_data_len = static_cast<uint8_t>(wire.size());
  param.responder_resources =
      std::max<uint8_t>(1, std::min(clamp_u8(core_->attr.max_qp_rd_atom), peer_initiator_depth_));
  param.initiator_depth =
      std::max<uint8_t>(1, std::min(clamp_u8(core_->attr.max_qp_init_rd_atom), peer_responder_resources_));
  param.flow_control = 1;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = kRnrRetryCount;
  answered_ = true;
  std::string option_error;
  if (!set_ack_timeout(id_, core_->ack_timeout, &option_error) || rdma_accept(id_, &param) != 0) {
    *error = option_error.empty() ? errno_text("rdma_accept", errno) : option_error;
    note_error(*error, false);
    state_.store(ConnState::ERROR, std::memory_order_release);
    phase_ = Phase::DONE;
    return false;
  }
  // rdma_accept moved the QP through RTR to RTS: sends may be posted now; the
  // ESTABLISHED event follows when the client's RTU arrives.
  send_ready_.store(true, std::memory_order_release);
  return true;
}

void VerbsConnection::reject(const std::vector<uint8_t>& private_data) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (active_ || answered_ || state() != ConnState::CONNECTING) return;
  answered_ = true;
  std::vector<uint8_t> wire;
  std::string ignored;
  if (!encode_private_data(private_data, false, &wire, &ignored)) {
    // Longer than the limit: the first MAX_PRIVATE_DATA bytes go.
    std::vector<uint8_t> head(private_data.begin(), private_data.begin() + u32(Limit::MAX_PRIVATE_DATA));
    encode_private_data(head, false, &wire, &ignored);
  }
  rdma_reject(id_, wire.data(), static_cast<uint8_t>(wire.size()));
  state_.store(ConnState::CLOSED, std::memory_order_release);
  phase_ = Phase::DONE;
  final_event_sent_ = true;
}

// ---- active side ---------------------------------------------------------------------------------

bool VerbsConnection::start_resolve(const sockaddr* destination, std::string* error) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (core_->trace) trace_line("rdma_resolve_addr for %s token %llu", url_.c_str(), static_cast<unsigned long long>(token_));
  if (rdma_resolve_addr(id_, nullptr, const_cast<sockaddr*>(destination), static_cast<int>(timeout_ms_)) != 0) {
    *error = errno_text("rdma_resolve_addr for " + url_, errno);
    phase_ = Phase::DONE;
    state_.store(ConnState::ERROR, std::memory_order_release);
    return false;
  }
  return true;
}

void VerbsConnection::on_addr_resolved(std::vector<ConnectionEvent>* events) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (state() != ConnState::CONNECTING || phase_ != Phase::RESOLVING_ADDR) return;
  peer_address_ = sockaddr_text(rdma_get_peer_addr(id_));
  if (id_->verbs != core_->context) {
    std::string device = id_->verbs != nullptr ? ibv_get_device_name(id_->verbs->device) : "no RDMA device";
    emit_failure_locked("the route to " + url_ + " leaves through " + device + ", but this provider uses " +
                            core_->name + " (choose one with RKV_RDMA_DEVICE)",
                        events);
    return;
  }
  phase_ = Phase::RESOLVING_ROUTE;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
  if (rdma_resolve_route(id_, static_cast<int>(std::max<long long>(left, 1))) != 0) {
    emit_failure_locked(errno_text("rdma_resolve_route for " + url_, errno), events);
  }
}

void VerbsConnection::on_route_resolved(std::vector<ConnectionEvent>* events) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (state() != ConnState::CONNECTING || phase_ != Phase::RESOLVING_ROUTE) return;
  std::string error;
  if (!create_qp(options_, &error)) {
    emit_failure_locked(error, events);
    return;
  }
  options_ = QueuePairOptions{};  // the CQs are held by the connection now; drop the copies
  // We offer what the device can do; the acceptor answers with the minimum of
  // that and its own device, and rdma_cm programs both QPs with the result.
  rdma_conn_param param{};
  param.private_data = wire_private_.data();
  param.private_data_len = static_cast<uint8_t>(wire_private_.size());
  param.responder_resources = clamp_u8(core_->attr.max_qp_rd_atom);
  param.initiator_depth = clamp_u8(core_->attr.max_qp_init_rd_atom);
  param.flow_control = 1;
  param.retry_count = kRetryCount;
  param.rnr_retry_count = kRnrRetryCount;
  phase_ = Phase::CONNECTING;
  if (!set_ack_timeout(id_, core_->ack_timeout, &error)) {
    emit_failure_locked(error, events);
  } else if (rdma_connect(id_, &param) != 0) {
    emit_failure_locked(errno_text("rdma_connect to " + url_, errno), events);
  }
}

// ---- both sides ----------------------------------------------------------------------------------

void VerbsConnection::on_established(std::vector<uint8_t> private_data, std::vector<ConnectionEvent>* events) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (state() != ConnState::CONNECTING) {
    // Given up (timeout, disconnect(), shutdown) while the peer was accepting.
    if (id_ != nullptr && qp_ != nullptr) rdma_disconnect(id_);
    disconnect_called_ = true;
    return;
  }
  phase_ = Phase::DONE;
  if (active_) peer_private_ = std::move(private_data);
  send_ready_.store(true, std::memory_order_release);
  state_.store(ConnState::CONNECTED, std::memory_order_release);
  if (!shut_down_) {
    events->push_back({ConnEvent::ESTABLISHED, shared_from_this(),
                       active_ ? peer_private_ : std::vector<uint8_t>{}, ""});
  }
}

void VerbsConnection::on_rejected(int status, bool consumer, std::vector<uint8_t> private_data,
                                  std::vector<ConnectionEvent>* events) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (final_event_sent_ || state() != ConnState::CONNECTING) return;
  const std::string why = (active_ ? "connect to " + url_ + ": " : std::string("the client refused: ")) +
                          (consumer ? std::string("rejected by the peer") : reject_reason_text(status));
  if (!active_) {  // the client turned our accept down (or the CM gave up on it)
    emit_failure_locked(why, events);
    return;
  }
  note_error(why, false);
  phase_ = Phase::DONE;
  final_event_sent_ = true;
  disconnect_called_ = true;  // librdmacm moved the QP to ERR already
  state_.store(ConnState::CLOSED, std::memory_order_release);
  peer_private_ = consumer ? std::move(private_data) : std::vector<uint8_t>{};
  if (!shut_down_) events->push_back({ConnEvent::REJECTED, shared_from_this(), peer_private_, why});
}

void VerbsConnection::on_disconnected(std::vector<ConnectionEvent>* events) {
  std::lock_guard<std::mutex> guard(mutex_);
  note_error("the peer disconnected", false);
  ConnState s = state();
  if (s == ConnState::CONNECTED || s == ConnState::CONNECTING) state_.store(ConnState::ERROR, std::memory_order_release);
  phase_ = Phase::DONE;
  // Our half: the QP goes to ERR (outstanding requests flush) and the DREP goes out.
  disconnect_locked();
  if (!final_event_sent_ && !shut_down_) {
    final_event_sent_ = true;
    events->push_back({ConnEvent::DISCONNECTED, shared_from_this(), {}, first_error()});
  }
}

void VerbsConnection::on_failure(const std::string& why, std::vector<ConnectionEvent>* events) {
  std::lock_guard<std::mutex> guard(mutex_);
  emit_failure_locked(why, events);
}

void VerbsConnection::emit_failure_locked(const std::string& why, std::vector<ConnectionEvent>* events) {
  note_error(why, false);
  const ConnState was = state();
  if (was != ConnState::CLOSED) state_.store(ConnState::ERROR, std::memory_order_release);
  phase_ = Phase::DONE;
  disconnect_locked();
  if (!final_event_sent_ && !shut_down_ && was != ConnState::CLOSED) {
    final_event_sent_ = true;
    events->push_back({was == ConnState::CONNECTED ? ConnEvent::DISCONNECTED : ConnEvent::ERROR, shared_from_this(),
                       {}, first_error()});
  }
}

void VerbsConnection::check_deadline(Clock::time_point now, std::vector<ConnectionEvent>* events) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!active_ || phase_ == Phase::DONE || state() != ConnState::CONNECTING || now < deadline_) return;
  const char* doing = phase_ == Phase::RESOLVING_ADDR    ? "resolving the address"
                      : phase_ == Phase::RESOLVING_ROUTE ? "resolving the route"
                                                         : "waiting for the server to accept";
  emit_failure_locked("connect to " + url_ + " timed out after " + std::to_string(timeout_ms_) + " ms " + doing,
                      events);
}

void VerbsConnection::invalidate_windows_locked() {
  for (auto& weak : windows_) {
    if (auto window = weak.lock()) window->invalidate();
  }
  windows_.clear();
}

void VerbsConnection::disconnect_locked() {
  // Fencing ends the windows too: a leaked or remembered window rkey is refused
  // by the device itself, not only because its queue pair is in error.
  invalidate_windows_locked();
  if (disconnect_called_ || id_ == nullptr) return;
  disconnect_called_ = true;
  // Nothing to tear down before a QP exists. With one, rdma_disconnect moves it
  // to ERR (every outstanding request completes with WR_FLUSH_ERR) and sends
  // the DREQ that makes the peer see DISCONNECTED.
  if (qp_ != nullptr) rdma_disconnect(id_);
}

void VerbsConnection::fail(const std::string& why) {
  std::lock_guard<std::mutex> guard(mutex_);
  note_error(why, false);
  ConnState s = state();
  if (s == ConnState::ERROR || s == ConnState::CLOSED) return;
  state_.store(ConnState::ERROR, std::memory_order_release);
  if (s == ConnState::CONNECTING && active_) phase_ = Phase::DONE;
  disconnect_locked();  // our DISCONNECTED event follows from rdma_cm
}

void VerbsConnection::disconnect() {
  std::lock_guard<std::mutex> guard(mutex_);
  if (state() == ConnState::CLOSED) return;
  if (!active_ && !answered_) {  // a request nobody answered: say no
    answered_ = true;
    rdma_reject(id_, nullptr, 0);
    final_event_sent_ = true;
    state_.store(ConnState::CLOSED, std::memory_order_release);
    return;
  }
  note_error("disconnected locally", false);
  if (active_ && phase_ != Phase::DONE) final_event_sent_ = true;  // a connect given up: no event
  phase_ = Phase::DONE;
  state_.store(ConnState::CLOSED, std::memory_order_release);
  disconnect_locked();  // DISCONNECTED follows from rdma_cm once the peer answers
}

bool VerbsConnection::fence_complete() {
  std::lock_guard<std::mutex> guard(mutex_);
  // rdma_disconnect moved the queue pair to ERR: the device executes nothing
  // more that the peer sends. Without a queue pair nothing could land at all.
  const ConnState s = state();
  return s != ConnState::CONNECTED && s != ConnState::CONNECTING && (disconnect_called_ || qp_ == nullptr);
}

void VerbsConnection::shut_down() {
  std::lock_guard<std::mutex> guard(mutex_);
  shut_down_ = true;
  if (state() == ConnState::CLOSED) return;
  if (!active_ && !answered_) {
    answered_ = true;
    rdma_reject(id_, nullptr, 0);
  } else {
    note_error("the provider shut down", false);
    disconnect_locked();
  }
  phase_ = Phase::DONE;
  state_.store(ConnState::CLOSED, std::memory_order_release);
}

// ---- memory windows --------------------------------------------------------------------------------

std::shared_ptr<Window> VerbsConnection::bind_window(const std::shared_ptr<MemoryRegion>& region, uint64_t addr,
                                                     uint64_t length, uint32_t access, std::string* error) {
  if (!region) {
    *error = "no region";
    return nullptr;
  }
  if (!check_window(*region, addr, length, access, error)) return nullptr;
  if (!core_->memory_windows) {
    *error = core_->name + " has no memory windows (" + core_->memory_windows_note + ")";
    return nullptr;
  }
  auto* mr = dynamic_cast<VerbsMr*>(region.get());
  if (mr == nullptr || mr->core() != core_.get()) {
    *error = "the region is not registered with this provider";
    return nullptr;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  if (!send_ready_.load(std::memory_order_acquire) || state() == ConnState::ERROR || state() == ConnState::CLOSED) {
    *error = "windows are bound on a connected queue pair";
    return nullptr;
  }
  ibv_mw* mw = ibv_alloc_mw(core_->pd, IBV_MW_TYPE_2);
  if (mw == nullptr) {
    *error = errno_text("ibv_alloc_mw", errno);
    return nullptr;
  }
  // A type 2 window's key byte is the consumer's: a new one per bind, so a key
  // of this window's earlier life (same index) never matches again.
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  if (int rc = post_bind(mw, mr->mr(), addr, length, access, rkey); rc != 0) {
    ibv_dealloc_mw(mw);
    *error = errno_text("posting the window's bind", rc);
    return nullptr;
  }
  mw->rkey = rkey;
  auto window = std::make_shared<VerbsWindow>(mw, region, rkey, addr, length, access);
  windows_.erase(std::remove_if(windows_.begin(), windows_.end(), [](auto& w) { return w.expired(); }), windows_.end());
  windows_.push_back(window);
  return window;
}

// IBV_WR_BIND_MW through the send ring like any request, so its completion
// names its slot: signaled by us and swallowed on success (as a forced signal
// is), reported with opcode BIND_MW if it fails. The send queue executes in
// order, so anything posted after it (the hello that carries the rkey) goes
// out after the window is bound.
int VerbsConnection::post_bind(ibv_mw* mw, ibv_mr* mr, uint64_t addr, uint64_t length, uint32_t access,
                               uint32_t rkey) {
  const uint64_t posted = send_posted_.load(std::memory_order_relaxed);
  const uint64_t completed = send_completed_.load(std::memory_order_acquire);
  if (posted - completed >= send_depth_) return ENOMEM;
  SendSlot& slot = send_slots_[posted % send_depth_];
  slot = SendSlot{};
  slot.opcode = Opcode::BIND_MW;
  ibv_send_wr w{};
  w.wr_id = (static_cast<uint64_t>(generation_) << kGenerationShift) | (posted & kSeqMask);
  w.opcode = IBV_WR_BIND_MW;
  w.send_flags = IBV_SEND_SIGNALED;
  w.bind_mw.mw = mw;
  w.bind_mw.rkey = rkey;
  w.bind_mw.bind_info.mr = mr;
  w.bind_mw.bind_info.addr = addr;
  w.bind_mw.bind_info.length = length;
  w.bind_mw.bind_info.mw_access_flags = static_cast<unsigned int>(access);  // Access mirrors ibv_access_flags
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_, &w, &bad); rc != 0) return rc;
  unsignaled_run_ = 0;
  send_posted_.store(posted + 1, std::memory_order_release);
  return 0;
}

// ---- data path ----------------------------------------------------------------------------------

int VerbsConnection::post_send(const WorkRequest* wrs, size_t count, size_t* bad) {
  *bad = 0;
  if (count == 0) return 0;
  if (!send_ready_.load(std::memory_order_acquire)) return EINVAL;  // as ibv_post_send before RTS
  const uint64_t posted = send_posted_.load(std::memory_order_relaxed);
  const uint64_t completed = send_completed_.load(std::memory_order_acquire);
  // Slots come back only when a signaled completion is polled: the caller gets
  // ENOMEM (with *bad) when the queue is full and polls its CQ to make room.
  const size_t room = send_depth_ - static_cast<size_t>(posted - completed);
  const size_t limit = std::min(count, room);
  int rc = limit < count ? ENOMEM : 0;
  uint32_t run = unsignaled_run_;
  size_t n = 0;
  for (; n < limit; n++) {
    const WorkRequest& wr = wrs[n];
    ibv_send_wr& w = send_wrs_[n];
    bool valid = true;
    switch (wr.opcode) {
      case Opcode::READ: w.opcode = IBV_WR_RDMA_READ; break;
      case Opcode::WRITE: w.opcode = IBV_WR_RDMA_WRITE; break;
      case Opcode::WRITE_WITH_IMM: w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; break;
      case Opcode::SEND: w.opcode = IBV_WR_SEND; break;
      case Opcode::CMP_AND_SWP: w.opcode = IBV_WR_ATOMIC_CMP_AND_SWP; break;
      case Opcode::FETCH_AND_ADD: w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; break;
      default: valid = false; break;  // RECV and the completion-only opcodes
    }
    if (!valid) {
      rc = EINVAL;
      break;
    }
    const bool atomic = is_atomic(wr.opcode);
    if (atomic && !core_->atomics_usable) {
      rc = EOPNOTSUPP;  // refused here, clearly, rather than as a LOC_QP_OP_ERR that breaks the QP
      break;
    }
    if (atomic && wr.length != 8) {
      rc = EINVAL;  // an atomic reads and returns exactly one 64-bit word
      break;
    }
    // A misaligned atomic is an invalid request on the wire (the responder
    // NAKs it: REM_INV_REQ_ERR, the QP breaks), but some providers (rxe)
    // refuse it at post time instead. For one behaviour everywhere it goes out
    // as a WRITE whose local buffer is address 0, which the HCA fails locally
    // (nothing reaches the peer) in its place in the queue, and translate()
    // reports that failure as REM_INV_REQ_ERR; what follows is flushed.
    const bool misaligned = atomic && (wr.remote_addr & 7) != 0;
    unsigned int flags = 0;
    if ((wr.send_flags & u32(SendFlag::INLINE)) != 0 && may_inline(wr.opcode) && !misaligned) {
      if (wr.length > max_inline_) {
        rc = EINVAL;  // as the HCA would: more than max_inline() cannot go inline
        break;
      }
      flags |= IBV_SEND_INLINE;
    }
    if ((wr.send_flags & u32(SendFlag::FENCE)) != 0 && core_->post_fences) flags |= IBV_SEND_FENCE;
    const bool user_signaled = (wr.send_flags & u32(SendFlag::SIGNALED)) != 0;
    // Never more than signal_interval_ unsignaled requests in a row: we signal
    // one ourselves, and its completion (swallowed in translate) returns the
    // slots before it. Without it a caller who never signals would fill the
    // send queue for good.
    if (user_signaled || run >= signal_interval_) {
      flags |= IBV_SEND_SIGNALED;
      run = 0;
    } else {
      run++;
    }
    const uint64_t seq = posted + n;
    SendSlot& slot = send_slots_[seq % send_depth_];
    slot.wr_id = wr.wr_id;
    slot.local_addr = wr.local_addr;
    slot.opcode = wr.opcode;
    slot.user_signaled = user_signaled;
    slot.atomic = atomic && !misaligned;
    slot.misaligned = misaligned;
    w.wr_id = (static_cast<uint64_t>(generation_) << kGenerationShift) | (seq & kSeqMask);
    w.send_flags = flags;
    // A zero-length SGE means 2 GiB on some HCAs: zero bytes travel with no SGE.
    w.num_sge = wr.length != 0 ? 1 : 0;
    send_sges_[n].addr = wr.local_addr;
    send_sges_[n].length = wr.length;
    send_sges_[n].lkey = wr.lkey;
    if (misaligned) {
      w.opcode = IBV_WR_RDMA_WRITE;
      w.num_sge = 1;
      send_sges_[n].addr = 0;  // outside every registered range: LOC_PROT_ERR before anything is sent
      w.wr.rdma.remote_addr = wr.remote_addr & ~uint64_t{7};
      w.wr.rdma.rkey = wr.rkey;
    } else if (atomic) {
      w.wr.atomic.remote_addr = wr.remote_addr;
      w.wr.atomic.compare_add = wr.compare_add;  // host order: the provider library converts
      w.wr.atomic.swap = wr.swap;
      w.wr.atomic.rkey = wr.rkey;
    } else {
      w.wr.rdma.remote_addr = wr.remote_addr;
      w.wr.rdma.rkey = wr.rkey;
    }
    w.imm_data = wr.opcode == Opcode::WRITE_WITH_IMM ? htobe32(wr.imm) : 0;  // network order on the wire
    w.next = send_wrs_.data() + n + 1;
  }
  if (n == 0) return rc;  // rc != 0: count > 0, so either the queue is full or wrs[0] is invalid
  send_wrs_[n - 1].next = nullptr;  // cut the chain at the batch end: one doorbell
  ibv_send_wr* bad_wr = nullptr;
  size_t done = n;
  if (int post_rc = ibv_post_send(qp_, send_wrs_.data(), &bad_wr); post_rc != 0) {
    done = bad_wr != nullptr ? static_cast<size_t>(bad_wr - send_wrs_.data()) : 0;
    rc = post_rc;
    run = unsignaled_run_;  // recount the run over what was really posted
    for (size_t i = 0; i < done; i++) run = (send_wrs_[i].send_flags & IBV_SEND_SIGNALED) != 0 ? 0 : run + 1;
  }
  unsignaled_run_ = run;
  send_posted_.store(posted + done, std::memory_order_release);
  if (rc != 0) *bad = done;
  return rc;
}

int VerbsConnection::post_recv(const RecvRequest* rrs, size_t count, size_t* bad) {
  *bad = 0;
  if (count == 0) return 0;
  if (!recv_ready_.load(std::memory_order_acquire)) return EINVAL;  // no QP yet
  const uint64_t posted = recv_posted_.load(std::memory_order_relaxed);
  const uint64_t completed = recv_completed_.load(std::memory_order_acquire);
  const size_t room = recv_depth_ - static_cast<size_t>(posted - completed);
  const size_t n = std::min(count, room);
  if (n == 0) return ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const uint64_t seq = posted + i;
    RecvSlot& slot = recv_slots_[seq % recv_depth_];
    slot.wr_id = rrs[i].wr_id;
    slot.addr = rrs[i].addr;
    slot.length = rrs[i].length;
    slot.lkey = rrs[i].lkey;
    ibv_recv_wr& w = recv_wrs_[i];
    w.wr_id = kRecvTag | (static_cast<uint64_t>(generation_) << kGenerationShift) | (seq & kSeqMask);
    w.num_sge = rrs[i].length != 0 ? 1 : 0;
    recv_sges_[i].addr = rrs[i].addr;
    recv_sges_[i].length = rrs[i].length;
    recv_sges_[i].lkey = rrs[i].lkey;
    w.next = i + 1 < n ? &recv_wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad_wr = nullptr;
  size_t done = n;
  int rc = ibv_post_recv(qp_, recv_wrs_.data(), &bad_wr);
  if (rc != 0) done = bad_wr != nullptr ? static_cast<size_t>(bad_wr - recv_wrs_.data()) : 0;
  recv_posted_.store(posted + done, std::memory_order_release);
  if (rc == 0 && n < count) rc = ENOMEM;
  if (rc != 0) *bad = done;
  return rc;
}

// Atomic results land in the caller's buffer in the HCA's byte order. When the
// probe found it swapped, each atomic's 8 bytes are swapped back here, the one
// place every send completion passes, before the caller can see a completion
// that covers it: the completion of sequence `seq` covers every earlier
// request, signaled or not.
void VerbsConnection::fix_atomics(uint64_t seq, bool succeeded) {
  for (uint64_t s = atomics_fixed_; s <= seq; s++) {
    const SendSlot& slot = send_slots_[s % send_depth_];
    if (!slot.atomic || slot.local_addr == 0 || (s == seq && !succeeded)) continue;
    auto* p = reinterpret_cast<uint8_t*>(slot.local_addr);
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    v = bswap_64(v);
    std::memcpy(p, &v, sizeof v);
  }
  atomics_fixed_ = seq + 1;
}

bool VerbsConnection::translate(const ibv_wc& wc, Completion* out) {
  const uint64_t id = wc.wr_id;
  if (((id >> kGenerationShift) & kGenerationMask) != generation_) return false;  // an older QP's leftovers
  const bool ok = wc.status == IBV_WC_SUCCESS;
  out->status = static_cast<WcStatus>(wc.status);
  out->qp_num = wc.qp_num;
  out->vendor_err = ok ? 0 : wc.vendor_err;
  out->imm = 0;
  out->wc_flags = 0;
  out->byte_len = ok ? wc.byte_len : 0;
  if ((id & kRecvTag) != 0) {
    (void)recv_posted_.load(std::memory_order_acquire);  // pairs with the poster's release: the slot is written
    const uint64_t completed = recv_completed_.load(std::memory_order_relaxed);
    const uint64_t seq = completed + (((id & kSeqMask) - completed) & kSeqMask);
    const RecvSlot slot = recv_slots_[seq % recv_depth_];
    out->wr_id = slot.wr_id;
    recv_completed_.store(seq + 1, std::memory_order_release);
    out->opcode = ok && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? Opcode::RECV_RDMA_WITH_IMM : Opcode::RECV;
    if (ok && (wc.wc_flags & IBV_WC_WITH_IMM) != 0) {
      out->imm = be32toh(wc.imm_data);  // network order on the wire, host order for the caller
      out->wc_flags = u32(WcFlag::WITH_IMM);
    }
    if (!ok && wc.status == IBV_WC_LOC_QP_OP_ERR && core_->rxe) {
      // rxe's responder turns every failed copy into the receive buffer into
      // "malformed WQE" (LOC_QP_OP_ERR): a message longer than the buffer and
      // a buffer outside any region alike. Our receives are one SGE, so a
      // buffer that lies in a writable region of ours means the length.
      bool buffer_ok;
      {
        std::lock_guard<std::mutex> guard(core_->mutex);
        buffer_ok = core_->writable_locally(slot.lkey, slot.addr, slot.length);
      }
      out->status = buffer_ok ? WcStatus::LOC_LEN_ERR : WcStatus::LOC_PROT_ERR;
      note_error(buffer_ok ? "RECV: LOC_LEN_ERR (the message is longer than the receive buffer; rxe reported "
                             "LOC_QP_OP_ERR)"
                           : "RECV: LOC_PROT_ERR (the receive buffer is not in a writable region; rxe reported "
                             "LOC_QP_OP_ERR)",
                 true);
    } else if (!ok) {
      note_error(completion_error_text(Opcode::RECV, wc), true);
    }
    return true;
  }
  (void)send_posted_.load(std::memory_order_acquire);
  const uint64_t completed = send_completed_.load(std::memory_order_relaxed);
  const uint64_t seq = completed + (((id & kSeqMask) - completed) & kSeqMask);
  const SendSlot& slot = send_slots_[seq % send_depth_];
  if (swap_atomics_) fix_atomics(seq, ok);
  out->wr_id = slot.wr_id;
  out->opcode = slot.opcode;
  const bool deliver = !ok || slot.user_signaled;  // errors always surface, forced signals never
  if (slot.misaligned && wc.status != IBV_WC_WR_FLUSH_ERR) {
    out->status = WcStatus::REM_INV_REQ_ERR;
    out->vendor_err = 0;
    note_error(std::string(to_string(slot.opcode)) +
                   ": REM_INV_REQ_ERR (invalid request: an atomic's remote address must be 8-byte aligned)",
               true);
  } else if (!ok) {
    note_error(completion_error_text(slot.opcode, wc), true);
  }
  send_completed_.store(seq + 1, std::memory_order_release);  // the slots up to seq are free again
  return deliver;
}

}  // namespace rkv::transport::verbs
