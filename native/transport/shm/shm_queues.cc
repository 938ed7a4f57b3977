// The shm provider's data path: completion queues and the work a NIC would do
// for a queue pair. One-sided operations run at post time in the poster's
// process (copies and __atomic operations on the peer's mapping), so the
// target process spends no CPU on them. SEND and WRITE_WITH_IMM leave a record
// in the connection's ring; the receiver's poll turns records into RECV
// completions against the receives it posted.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "../../common/prefetch.h"
#include "shm_internal.h"

namespace rkv::transport::shm {

namespace {

constexpr uint32_t kAnyRemote = u32(Access::REMOTE_READ) | u32(Access::REMOTE_WRITE) | u32(Access::REMOTE_ATOMIC);
// prefetch_source(): how many requests ahead of its copy a READ's source is touched, and how much of it.
constexpr size_t kPrefetchAhead = 4;
constexpr uint32_t kPrefetchBytes = 256;

bool has(uint32_t flags, SendFlag f) { return (flags & u32(f)) != 0; }

std::string verb_error(Opcode op, WcStatus status, const std::string& why) {
  return std::string(to_string(op)) + ": " + to_string(status) + " (" + why + ")";
}

}  // namespace

// ---- ShmCq ------------------------------------------------------------------

ShmCq::ShmCq(ShmProvider* provider, uint32_t depth, int event_fd)
    : provider_(provider), depth_(depth), event_fd_(event_fd), ring_(depth) {}

ShmCq::~ShmCq() { close(event_fd_); }

bool ShmCq::push(const Completion& c) {
  if (count_ == depth_) return false;
  ring_[(head_ + count_) % depth_] = c;
  count_++;
  return true;
}

void ShmCq::signal() {
  uint64_t one = 1;
  ssize_t rc = write(event_fd_, &one, sizeof one);
  (void)rc;  // EAGAIN: the counter is already non-zero, the fd already readable
}

void ShmCq::signal_if_armed() {
  if (armed_) {
    armed_ = false;
    signal();
  }
}

int ShmCq::poll(Completion* out, int max) {
  std::lock_guard<std::mutex> guard(provider_->lock());
  // The "NIC" work this CQ is waiting on happens here: receive what peers sent,
  // retry sends that waited for ring room, flush broken queue pairs.
  for (size_t i = 0; i < connections_.size();) {
    auto connection = connections_[i].lock();
    if (!connection) {
      connections_[i] = connections_.back();
      connections_.pop_back();
      continue;
    }
    if (connection->recv_cq() == this) connection->drain_inbound(this);
    if (connection->send_cq() == this) connection->progress_sends(this);
    if (connection->state() == ConnState::ERROR || connection->state() == ConnState::CLOSED) connection->flush(this);
    i++;
  }
  int n = std::min<int>(max, static_cast<int>(count_));
  for (int i = 0; i < n; i++) {
    out[i] = ring_[head_];
    head_ = (head_ + 1) % depth_;
  }
  count_ -= static_cast<uint32_t>(n);
  return n;
}

void ShmCq::arm() {
  std::lock_guard<std::mutex> guard(provider_->lock());
  armed_ = true;
  bool ready = count_ > 0;
  for (auto& weak : connections_) {
    auto connection = weak.lock();
    if (connection && connection->recv_cq() == this) ready = connection->arm_inbound() || ready;
    if (connection && connection->state() != ConnState::CONNECTED && connection->state() != ConnState::CONNECTING &&
        connection->has_flushable()) {
      ready = true;  // a broken queue pair with requests still to flush (once flushed, nothing: no busy wake-ups)
    }
  }
  if (ready) signal_if_armed();
}

void ShmCq::disarm() {
  std::lock_guard<std::mutex> guard(provider_->lock());
  armed_ = false;  // the rings' consumer_waiting stays: a peer's message still wakes us
}

void ShmCq::ack_event() {
  uint64_t value;
  ssize_t rc = read(event_fd_, &value, sizeof value);
  (void)rc;
}

// ---- ShmConnection: the send queue ---------------------------------------------

bool ShmConnection::local_ok(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need) {
  if (len == 0) return true;
  ShmMr* mr = provider_->find_local(lkey);
  return mr != nullptr && mr->contains(addr, len) && (mr->access() & need) == need;
}

// A READ's source, touched a few requests before it is copied: a batch's READs (a getMany's
// items) are at random places of the peer's memory, and copying them one after the other
// stalls on each one's misses in turn; touched ahead, the misses overlap, as a NIC's DMA
// engine keeps many reads in flight. A hint only: an rkey or range that does not check out
// is skipped, and execute() checks everything again.
void ShmConnection::prefetch_source(const WorkRequest& wr) const {
  if (wr.opcode != Opcode::READ) return;
  for (const auto& mr : remote_mrs_) {
    if (!mr.valid || mr.rkey != wr.rkey) continue;
    if (wr.remote_addr < mr.addr || wr.length > mr.length || wr.remote_addr - mr.addr > mr.length - wr.length) return;
    const uint8_t* from = mr.base + (wr.remote_addr - mr.addr);
    for (uint32_t at = 0; at < std::min(wr.length, kPrefetchBytes); at += 64) prefetch_line(from + at);
    return;
  }
}

const RemoteMr* ShmConnection::find_remote(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
                                           WcStatus* status) {
  *status = WcStatus::REM_ACCESS_ERR;
  auto lookup = [&]() -> const RemoteMr* {
    for (const auto& mr : remote_mrs_) {
      if (mr.valid && mr.rkey == rkey) return &mr;
    }
    return nullptr;
  };
  const RemoteMr* mr = lookup();
  if (mr == nullptr) {
    // The peer announces an MR before it can tell anyone its rkey, so an
    // announcement may still sit unread in the socket: read it, then decide.
    drain_socket(nullptr);
    mr = lookup();
  }
  if (mr == nullptr || (mr->access & need) != need) return nullptr;
  // A window: only while its owner's slot still holds its key (invalidated or
  // its slot reused: refused), as a NIC checks a window's state per request.
  if (mr->window_slot != 0 &&
      (shared_ == nullptr || shared_->windows[1 - side_][mr->window_slot - 1].load(std::memory_order_seq_cst) != rkey)) {
    return nullptr;
  }
  if (addr < mr->addr || len > mr->length || addr - mr->addr > mr->length - len) return nullptr;
  return mr;
}

void ShmConnection::complete_send(const WorkRequest& wr, WcStatus status, uint32_t byte_len) {
  if (status == WcStatus::SUCCESS && !has(wr.send_flags, SendFlag::SIGNALED)) return;
  Completion c;
  c.wr_id = wr.wr_id;
  c.status = status;
  c.opcode = wr.opcode;
  c.byte_len = byte_len;
  c.qp_num = qp_num_;
  if (!send_cq_->push(c)) fail("completion queue overrun: poll more often or create a deeper CQ", true);
  send_cq_->signal_if_armed();
}

void ShmConnection::error_completion(const WorkRequest& wr, WcStatus status, const std::string& why) {
  fail(verb_error(wr.opcode, status, why), true);
  complete_send(wr, status, 0);
}

bool ShmConnection::execute(const WorkRequest& wr, const uint8_t* inline_data) {
  const auto* source = inline_data != nullptr ? inline_data : reinterpret_cast<const uint8_t*>(wr.local_addr);
  const bool needs_source = inline_data == nullptr && wr.length > 0;
  WcStatus status;
  switch (wr.opcode) {
    case Opcode::READ: {
      const RemoteMr* mr = find_remote(wr.rkey, wr.remote_addr, wr.length, u32(Access::REMOTE_READ), &status);
      if (mr == nullptr) return error_completion(wr, status, "remote address, length or rkey not readable"), true;
      if (!local_ok(wr.lkey, wr.local_addr, wr.length, u32(Access::LOCAL_WRITE))) {
        return error_completion(wr, WcStatus::LOC_PROT_ERR, "local buffer not in a LOCAL_WRITE region"), true;
      }
      std::memcpy(reinterpret_cast<void*>(wr.local_addr), mr->base + (wr.remote_addr - mr->addr), wr.length);
      complete_send(wr, WcStatus::SUCCESS, wr.length);
      return true;
    }
    case Opcode::WRITE:
    case Opcode::WRITE_WITH_IMM: {
      const RemoteMr* mr = find_remote(wr.rkey, wr.remote_addr, wr.length, u32(Access::REMOTE_WRITE), &status);
      if (mr == nullptr) return error_completion(wr, status, "remote address, length or rkey not writable"), true;
      if (needs_source && !local_ok(wr.lkey, wr.local_addr, wr.length, 0)) {
        return error_completion(wr, WcStatus::LOC_PROT_ERR, "local buffer not in a registered region"), true;
      }
      if (wr.opcode == Opcode::WRITE_WITH_IMM && !ring_room(record_size(0))) return false;
      std::memcpy(mr->base + (wr.remote_addr - mr->addr), source, wr.length);
      if (wr.opcode == Opcode::WRITE_WITH_IMM) {
        // The release store of the ring head publishes the written bytes too:
        // the receiver sees them in place when it sees the notice.
        ring_push(*out_control_, out_data_, RecordKind::WRITE_IMM, wr.imm, nullptr, 0, wr.length);
        notify_peer_data();
      } else {
        std::atomic_thread_fence(std::memory_order_release);
      }
      complete_send(wr, WcStatus::SUCCESS, wr.length);
      return true;
    }
    case Opcode::SEND: {
      if (wr.length > u32(Limit::SHM_MAX_MESSAGE)) {
        return error_completion(wr, WcStatus::LOC_LEN_ERR, "message larger than the shm maximum"), true;
      }
      if (needs_source && !local_ok(wr.lkey, wr.local_addr, wr.length, 0)) {
        return error_completion(wr, WcStatus::LOC_PROT_ERR, "local buffer not in a registered region"), true;
      }
      if (!ring_push(*out_control_, out_data_, RecordKind::SEND, wr.imm, source, wr.length, wr.length)) return false;
      notify_peer_data();
      complete_send(wr, WcStatus::SUCCESS, wr.length);
      return true;
    }
    case Opcode::CMP_AND_SWP:
    case Opcode::FETCH_AND_ADD: {
      if (wr.length != 8) return error_completion(wr, WcStatus::LOC_LEN_ERR, "atomics take an 8-byte buffer"), true;
      if (wr.remote_addr % 8 != 0) {
        return error_completion(wr, WcStatus::REM_INV_REQ_ERR, "atomic on a misaligned remote address"), true;
      }
      const RemoteMr* mr = find_remote(wr.rkey, wr.remote_addr, 8, u32(Access::REMOTE_ATOMIC), &status);
      if (mr == nullptr) return error_completion(wr, status, "remote address or rkey not open to atomics"), true;
      if (!local_ok(wr.lkey, wr.local_addr, 8, u32(Access::LOCAL_WRITE))) {
        return error_completion(wr, WcStatus::LOC_PROT_ERR, "result buffer not in a LOCAL_WRITE region"), true;
      }
      auto* word = reinterpret_cast<uint64_t*>(mr->base + (wr.remote_addr - mr->addr));
      uint64_t original;
      if (wr.opcode == Opcode::CMP_AND_SWP) {
        original = wr.compare_add;
        __atomic_compare_exchange_n(word, &original, wr.swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      } else {
        original = __atomic_fetch_add(word, wr.compare_add, __ATOMIC_SEQ_CST);
      }
      std::memcpy(reinterpret_cast<void*>(wr.local_addr), &original, 8);
      complete_send(wr, WcStatus::SUCCESS, 8);
      return true;
    }
    default:
      return error_completion(wr, WcStatus::LOC_QP_OP_ERR, "not a send-queue opcode"), true;
  }
}

bool ShmConnection::ring_room(uint32_t size) const {
  const uint64_t head = out_control_->head.load(std::memory_order_relaxed);
  const uint64_t tail = out_control_->tail.load(std::memory_order_acquire);
  const uint64_t to_end = kRingBytes - (head & (kRingBytes - 1));
  const uint64_t need = size <= to_end ? size : to_end + size;
  return kRingBytes - (head - tail) >= need;
}

void ShmConnection::notify_peer_data() {
  // Pairs with arm_inbound(): either the peer sees our record when it re-checks
  // after arming, or we see its flag here and wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (out_control_->consumer_waiting.load(std::memory_order_relaxed) != 0 &&
      out_control_->consumer_waiting.exchange(0) != 0) {
    wake_peer(peer_wake_recv_);
  }
}

void ShmConnection::wake_peer(int fd) {
  if (fd < 0) return;
  uint64_t one = 1;
  ssize_t rc = write(fd, &one, sizeof one);
  (void)rc;
}

// Fencing, exactly. A NIC stops executing a peer's requests the moment our
// queue pair is in error; here the peer's own process executes them, at post
// time, after checking our closed flag. A peer paused between that check and
// the copy (a debugger, SIGSTOP, a page fault) would land its request after we
// fenced it. So each side raises its executing flag before it checks and
// lowers it after it executed (Dekker's handshake: both sides store, then load,
// all seq_cst, so at least one sees the other's store):
//   poster:  executing[me] = 1;  if closed[peer]: stop;  execute;  executing[me] = 0
//   fencer:  closed[me] = 1;     fence complete once executing[peer] == 0
// If the fencer reads executing == 0, any later post of the peer sees closed.
// If it reads 1, the peer is inside one post that checked before the fence:
// the fence completes when that post ends, or when the peer process exits.
// Until then the requests of that one post may still land, which is why the
// store releases a fenced client's locks and blocks only after fence_complete().
// Cost: two uncontended stores to the connection's own shared line per post.
class ShmConnection::Executing {
 public:
  explicit Executing(ConnShared* shared, int side) : flag_(shared != nullptr ? &shared->executing[side] : nullptr) {
    if (flag_ != nullptr) flag_->store(1, std::memory_order_seq_cst);
  }
  ~Executing() {
    if (flag_ != nullptr) flag_->store(0, std::memory_order_release);
  }
  Executing(const Executing&) = delete;
  Executing& operator=(const Executing&) = delete;

 private:
  std::atomic<uint32_t>* flag_;
};

bool ShmConnection::peer_closed() const {
  return shared_ != nullptr && shared_->closed[1 - side_].load(std::memory_order_seq_cst) != 0;
}

bool ShmConnection::peer_exited() const {
  if (peer_pidfd_ >= 0) {
    pollfd p{peer_pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  return peer_pid_ > 0 && kill(peer_pid_, 0) != 0 && errno == ESRCH;
}

bool ShmConnection::fence_complete() {
  std::lock_guard<std::mutex> guard(provider_->lock());
  if (fenced_) return true;
  const ConnState s = state();
  if (s == ConnState::CONNECTED || s == ConnState::CONNECTING) return false;  // not fenced at all yet
  ConnShared* area = shared_ != nullptr ? shared_ : fence_area_;
  if (area != nullptr && area->closed[side_].load(std::memory_order_seq_cst) != 0 &&
      area->executing[1 - side_].load(std::memory_order_seq_cst) != 0 && !peer_exited()) {
    return false;  // the peer is inside a post that began before the fence
  }
  fenced_ = true;
  if (fence_area_ != nullptr) {
    munmap(fence_area_, sizeof(ConnShared));
    fence_area_ = nullptr;
  }
  return true;
}

int ShmConnection::post_send(const WorkRequest* wrs, size_t count, size_t* bad) {
  std::lock_guard<std::mutex> guard(provider_->lock());
  ConnState s = state();
  if (s == ConnState::CONNECTING) {
    *bad = 0;
    return EINVAL;  // as ibv_post_send on a queue pair that is not yet RTS
  }
  Executing executing(shared_, side_);
  for (size_t i = 0; i < std::min(count, kPrefetchAhead); i++) prefetch_source(wrs[i]);
  for (size_t i = 0; i < count; i++) {
    if (i + kPrefetchAhead < count) prefetch_source(wrs[i + kPrefetchAhead]);
    const WorkRequest& wr = wrs[i];
    // Checked before every request: a peer that fenced us (a server releasing
    // a dead client's locks) must not see later requests of a batch land.
    if (s == ConnState::CONNECTED && peer_closed()) {
      fail("the peer closed the connection", false);
      s = state();
    }
    const bool inline_send = has(wr.send_flags, SendFlag::INLINE);
    if (inline_send && wr.length > u32(Limit::SHM_MAX_INLINE)) {
      *bad = i;
      return EINVAL;
    }
    if (state() != ConnState::CONNECTED) {  // flushed, like every request posted to a QP in error
      Completion c;
      c.wr_id = wr.wr_id;
      c.status = WcStatus::WR_FLUSH_ERR;
      c.opcode = wr.opcode;
      c.qp_num = qp_num_;
      if (!send_cq_->push(c)) {
        *bad = i;
        return ENOMEM;
      }
      send_cq_->signal_if_armed();
      continue;
    }
    const uint8_t* inline_data = inline_send ? reinterpret_cast<const uint8_t*>(wr.local_addr) : nullptr;
    if (pending_count_ == 0 && provider_->test_stop_before(wr)) raise(SIGSTOP);
    if (!test_held_ && provider_->test_holds(peer_pid_)) test_held_ = true;
    if (pending_count_ == 0 && !test_held_ && execute(wr, inline_data)) continue;
    // Waits behind earlier requests for ring room; a connection keeps its order.
    if (pending_count_ == pending_.size()) {
      *bad = i;
      return ENOMEM;
    }
    if (pending_count_ == 0) pending_since_ = Clock::now();
    PendingSend& p = pending_[(pending_head_ + pending_count_) % pending_.size()];
    p.wr = wr;
    if (inline_send) std::memcpy(p.inline_data, inline_data, wr.length);
    p.is_inline = inline_send;
    pending_count_++;
    out_control_->producer_waiting.store(1, std::memory_order_seq_cst);
  }
  return 0;
}

void ShmConnection::progress_sends(ShmCq* cq) {
  if (pending_count_ == 0 || test_held_) return;
  Executing executing(shared_, side_);
  while (pending_count_ > 0 && state() == ConnState::CONNECTED) {
    if (peer_closed()) {
      fail("the peer closed the connection", false);
      return;  // the rest is flushed
    }
    PendingSend& p = pending_[pending_head_];
    if (!execute(p.wr, p.is_inline ? p.inline_data : nullptr)) {
      out_control_->producer_waiting.store(1, std::memory_order_seq_cst);
      if (Clock::now() - pending_since_ > std::chrono::milliseconds(u32(Limit::SHM_RNR_TIMEOUT_MS))) {
        WorkRequest wr = p.wr;
        pending_head_ = (pending_head_ + 1) % pending_.size();
        pending_count_--;
        error_completion(wr, WcStatus::RNR_RETRY_EXC_ERR, "the receiver posted no receives in time");
      }
      return;
    }
    pending_head_ = (pending_head_ + 1) % pending_.size();
    pending_count_--;
    pending_since_ = Clock::now();
  }
}

// ---- ShmConnection: the receive queue ---------------------------------------------

int ShmConnection::post_recv(const RecvRequest* rrs, size_t count, size_t* bad) {
  std::lock_guard<std::mutex> guard(provider_->lock());
  return post_recv_locked(rrs, count, bad);
}

int ShmConnection::post_recv_locked(const RecvRequest* rrs, size_t count, size_t* bad) {
  for (size_t i = 0; i < count; i++) {
    if (recv_count_ == recvs_.size()) {
      *bad = i;
      return ENOMEM;
    }
    recvs_[(recv_head_ + recv_count_) % recvs_.size()] = rrs[i];
    recv_count_++;
  }
  // Records may be waiting for exactly these receives: let a sleeping poller look.
  if (in_control_ != nullptr &&
      in_control_->head.load(std::memory_order_acquire) != in_control_->tail.load(std::memory_order_relaxed)) {
    recv_cq_->signal_if_armed();
  }
  if (state() != ConnState::CONNECTED && state() != ConnState::CONNECTING) recv_cq_->signal_if_armed();
  return 0;
}

bool ShmConnection::arm_inbound() {
  if (in_control_ == nullptr) return false;
  in_control_->consumer_waiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return recv_count_ > 0 &&
         in_control_->head.load(std::memory_order_acquire) != in_control_->tail.load(std::memory_order_relaxed);
}

void ShmConnection::drain_inbound(ShmCq* cq) {
  if (in_control_ == nullptr || state() != ConnState::CONNECTED) return;
  bool consumed = false;
  while (recv_count_ > 0 && cq->free_slots() > 0) {
    bool corrupt = false;
    const RecordHeader* record = ring_peek(*in_control_, in_data_, &corrupt);
    if (corrupt) {
      fail("the peer corrupted the shared ring", true);
      break;
    }
    if (record == nullptr) break;
    const RecvRequest r = recvs_[recv_head_];
    recv_head_ = (recv_head_ + 1) % recvs_.size();
    recv_count_--;
    Completion c;
    c.wr_id = r.wr_id;
    c.qp_num = qp_num_;
    c.byte_len = record->byte_len;
    if (record->kind == RecordKind::SEND) {
      c.opcode = Opcode::RECV;
      if (record->byte_len > record->size - sizeof(RecordHeader)) {
        fail("the peer corrupted the shared ring", true);
        break;
      }
      if (record->byte_len > r.length) {
        c.status = WcStatus::LOC_LEN_ERR;
        fail(verb_error(Opcode::RECV, c.status, "message of " + std::to_string(record->byte_len) +
                                                    " bytes for a " + std::to_string(r.length) + "-byte buffer"),
             true);
      } else if (!local_ok(r.lkey, r.addr, record->byte_len, u32(Access::LOCAL_WRITE))) {
        c.status = WcStatus::LOC_PROT_ERR;
        fail(verb_error(Opcode::RECV, c.status, "receive buffer not in a LOCAL_WRITE region"), true);
      } else {
        std::memcpy(reinterpret_cast<void*>(r.addr), record + 1, record->byte_len);
      }
    } else if (record->kind == RecordKind::WRITE_IMM) {
      c.opcode = Opcode::RECV_RDMA_WITH_IMM;
      c.imm = record->imm;
      c.wc_flags = u32(WcFlag::WITH_IMM);
    } else {
      fail("the peer corrupted the shared ring", true);
      break;
    }
    ring_pop(*in_control_, record);
    consumed = true;
    cq->push(c);
    if (c.status != WcStatus::SUCCESS) break;
  }
  if (consumed) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (in_control_->producer_waiting.load(std::memory_order_relaxed) != 0 &&
        in_control_->producer_waiting.exchange(0) != 0) {
      wake_peer(peer_wake_send_);
    }
  }
}

void ShmConnection::flush(ShmCq* cq) {
  Completion c;
  c.status = WcStatus::WR_FLUSH_ERR;
  c.qp_num = qp_num_;
  if (cq == send_cq_.get()) {
    while (pending_count_ > 0 && cq->free_slots() > 0) {
      c.wr_id = pending_[pending_head_].wr.wr_id;
      c.opcode = pending_[pending_head_].wr.opcode;
      cq->push(c);
      pending_head_ = (pending_head_ + 1) % pending_.size();
      pending_count_--;
    }
  }
  if (cq == recv_cq_.get()) {
    c.opcode = Opcode::RECV;
    while (recv_count_ > 0 && cq->free_slots() > 0) {
      c.wr_id = recvs_[recv_head_].wr_id;
      cq->push(c);
      recv_head_ = (recv_head_ + 1) % recvs_.size();
      recv_count_--;
    }
  }
}

void ShmConnection::fail(const std::string& why, bool tell_peer) {
  ConnState s = state();
  if (first_error_.empty()) first_error_ = why;
  if (s == ConnState::ERROR || s == ConnState::CLOSED) return;
  set_state(ConnState::ERROR);
  if (shared_ != nullptr) shared_->closed[side_].store(1, std::memory_order_seq_cst);  // see Executing
  // Our windows end with the queue pair they are bound to.
  for (auto& weak : windows_) {
    if (auto window = weak.lock()) window->invalidate_locked();
  }
  // A broken RC queue pair is useless to both ends: closing our half of the
  // socket tells the peer at once.
  if (tell_peer && socket_ >= 0) ::shutdown(socket_, SHUT_RDWR);
  if (send_cq_) send_cq_->signal();
  if (recv_cq_) recv_cq_->signal();
}

std::string ShmConnection::first_error() const {
  std::lock_guard<std::mutex> guard(provider_->lock());
  return first_error_;
}

}  // namespace rkv::transport::shm
