// The shm provider's control side: memory registration, listeners, connection
// setup over Unix sockets, and the event thread that notices peers leaving.
#include "shm_provider.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>

#include <cstring>
#include <random>

#include "shm_internal.h"

namespace rkv::transport::shm {

namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

bool make_address(const std::string& path, sockaddr_un* address, std::string* error) {
  if (path.empty() || path[0] != '/') {
    *error = "shm URL needs an absolute socket path, as in shm:///run/rdma-kv/kv.sock (got '" + path + "')";
    return false;
  }
  if (path.size() >= sizeof address->sun_path) {
    *error = "socket path too long (" + std::to_string(path.size()) + " bytes, the limit is " +
             std::to_string(sizeof address->sun_path - 1) + "): " + path;
    return false;
  }
  std::memset(address, 0, sizeof *address);
  address->sun_family = AF_UNIX;
  std::memcpy(address->sun_path, path.data(), path.size());
  return true;
}

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

}  // namespace

// ---- ShmMr ---------------------------------------------------------------------

ShmMr::ShmMr(ShmProvider* provider, Memory& memory, size_t offset, size_t length, uint32_t access, uint32_t key)
    : provider_(provider), fd_(memory.fd()), fd_offset_(offset) {
  addr_ = memory.data() + offset;
  length_ = length;
  access_ = access;
  lkey_ = rkey_ = key;
}

ShmMr::~ShmMr() {
  std::lock_guard<std::mutex> guard(provider_->lock());
  provider_->forget_mr(this);
}

bool ShmMr::remote() const {
  return (access_ & (u32(Access::REMOTE_READ) | u32(Access::REMOTE_WRITE) | u32(Access::REMOTE_ATOMIC))) != 0;
}

// ---- ShmConnection: setup and control ---------------------------------------------

ShmConnection::ShmConnection(ShmProvider* provider, int socket, int side, uint32_t qp_num)
    : provider_(provider), socket_(socket), side_(side), qp_num_(qp_num) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    peer_address_ = "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
    peer_pid_ = cred.pid;
    // Opened while the peer still holds its end of the socket, so the pid cannot
    // have been reused yet. Fencing uses it to tell a dead peer from a paused one.
    if (cred.pid > 0) peer_pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, cred.pid, 0));
  }
}

ShmConnection::~ShmConnection() {
  // Never takes the provider lock: the last reference may drop under it.
  release_resources();
  if (fence_area_ != nullptr) munmap(fence_area_, sizeof(ConnShared));
  if (peer_pidfd_ >= 0) ::close(peer_pidfd_);
  if (socket_ >= 0) ::close(socket_);
}

void ShmConnection::release_resources() {
  if (shared_ != nullptr) {
    // Until the fence is known complete, the peer's executing flag must stay
    // readable (the usual case, a peer not inside a post, completes it now).
    if (!fenced_ && shared_->closed[side_].load(std::memory_order_seq_cst) != 0 &&
        shared_->executing[1 - side_].load(std::memory_order_seq_cst) != 0 && !peer_exited()) {
      fence_area_ = shared_;
    } else {
      fenced_ = fenced_ || shared_->closed[side_].load(std::memory_order_seq_cst) != 0;
      munmap(shared_, sizeof(ConnShared));
    }
  }
  shared_ = nullptr;
  out_control_ = in_control_ = nullptr;
  out_data_ = in_data_ = nullptr;
  for (auto& mr : remote_mrs_) {
    if (mr.map != nullptr) munmap(mr.map, mr.map_length);
  }
  remote_mrs_.clear();
  if (peer_wake_recv_ >= 0) ::close(peer_wake_recv_);
  if (peer_wake_send_ >= 0) ::close(peer_wake_send_);
  peer_wake_recv_ = peer_wake_send_ = -1;
}

bool ShmConnection::setup_queues(const QueuePairOptions& options, std::string* error) {
  send_cq_ = std::dynamic_pointer_cast<ShmCq>(options.send_cq);
  recv_cq_ = std::dynamic_pointer_cast<ShmCq>(options.recv_cq);
  if (!send_cq_ || !recv_cq_) {
    *error = "the queue pair needs a send and a receive CQ created by the same shm provider";
    return false;
  }
  if (options.send_depth == 0 || options.recv_depth == 0) {
    *error = "send and receive queue depths must be at least 1";
    return false;
  }
  recvs_.resize(options.recv_depth);
  pending_.resize(options.send_depth);
  send_cq_->attach(shared_from_this());
  if (recv_cq_ != send_cq_) recv_cq_->attach(shared_from_this());
  size_t bad = 0;
  if (!options.initial_recvs.empty() &&
      post_recv_locked(options.initial_recvs.data(), options.initial_recvs.size(), &bad) != 0) {
    *error = "more initial receives than the receive queue holds";
    return false;
  }
  return true;
}

bool ShmConnection::attach_shared(int conn_fd, std::string* error) {
  struct stat st {};
  if (fstat(conn_fd, &st) != 0 || static_cast<size_t>(st.st_size) != sizeof(ConnShared)) {
    *error = "the peer sent a connection area of the wrong size (a different rdma-kv version?)";
    return false;
  }
  void* map = mmap(nullptr, sizeof(ConnShared), PROT_READ | PROT_WRITE, MAP_SHARED, conn_fd, 0);
  if (map == MAP_FAILED) {
    *error = errno_text("mapping the connection area");
    return false;
  }
  shared_ = static_cast<ConnShared*>(map);
  if (shared_->magic != kConnMagic || shared_->ring_bytes != kRingBytes) {
    *error = "the peer's connection area has another layout (a different rdma-kv version?)";
    return false;
  }
  out_control_ = &shared_->control[side_];
  out_data_ = shared_->data[side_];
  in_control_ = &shared_->control[1 - side_];
  in_data_ = shared_->data[1 - side_];
  if (recv_cq_->armed() && arm_inbound()) recv_cq_->signal_if_armed();
  return true;
}

void ShmConnection::set_peer_wake(std::vector<int>& fds, size_t first) {
  peer_wake_recv_ = fds[first];
  peer_wake_send_ = fds[first + 1];
  fds[first] = fds[first + 1] = -1;
}

bool ShmConnection::announce_mr(const ShmMr& mr) {
  if (socket_ < 0) return false;
  MrAnnouncement a{mr.rkey(), mr.access(), reinterpret_cast<uint64_t>(mr.addr()), mr.length(), mr.fd_offset()};
  int fd = mr.fd();
  return send_message(socket_, MsgType::MR_ADD, qp_num_, {}, &a, &fd, 1) == 0;
}

// ---- memory windows ---------------------------------------------------------------

ShmWindow::ShmWindow(ShmProvider* provider, std::weak_ptr<ShmConnection> connection,
                     std::shared_ptr<MemoryRegion> region, uint32_t slot, uint32_t rkey, uint64_t addr,
                     uint64_t length, uint32_t access)
    : provider_(provider), connection_(std::move(connection)), region_(std::move(region)), slot_(slot) {
  rkey_ = rkey;
  addr_ = addr;
  length_ = length;
  access_ = access;
}

ShmWindow::~ShmWindow() { invalidate(); }

void ShmWindow::invalidate() {
  std::lock_guard<std::mutex> guard(provider_->lock());
  invalidate_locked();
}

void ShmWindow::invalidate_locked() {
  if (!valid_) return;
  valid_ = false;
  if (auto connection = connection_.lock()) connection->drop_window(slot_, rkey_);
}

bool ShmWindow::valid() const {
  std::lock_guard<std::mutex> guard(provider_->lock());
  return valid_;
}

std::shared_ptr<Window> ShmConnection::bind_window(const std::shared_ptr<MemoryRegion>& region, uint64_t addr,
                                                   uint64_t length, uint32_t access, std::string* error) {
  if (!region || !check_window(*region, addr, length, access, error)) {
    if (!region) *error = "no region";
    return nullptr;
  }
  if (provider_->windows_off()) {
    *error = "memory windows are turned off (RKV_NO_MEMORY_WINDOWS=1)";
    return nullptr;
  }
  std::lock_guard<std::mutex> guard(provider_->lock());
  auto* mr = dynamic_cast<ShmMr*>(region.get());
  if (mr == nullptr || provider_->find_local(mr->lkey()) != mr) {
    *error = "the region is not registered with this provider";
    return nullptr;
  }
  if (state() != ConnState::CONNECTED || shared_ == nullptr || socket_ < 0) {
    *error = "windows are bound on a connected queue pair";
    return nullptr;
  }
  windows_.resize(u32(Limit::SHM_MAX_WINDOWS));
  uint32_t slot = 0;
  while (slot < windows_.size() && !windows_[slot].expired()) slot++;
  if (slot == windows_.size()) {
    *error = "this connection has " + std::to_string(windows_.size()) + " windows bound already";
    return nullptr;
  }
  const uint32_t rkey = provider_->next_key();
  // Valid before the peer can know the key: the announcement below is the first it hears of it.
  shared_->windows[side_][slot].store(rkey, std::memory_order_seq_cst);
  MrAnnouncement a{rkey, access, addr, length, mr->fd_offset() + (addr - reinterpret_cast<uint64_t>(mr->addr())),
                   slot + 1, 0};
  int fd = mr->fd();
  if (int rc = send_message(socket_, MsgType::MR_ADD, qp_num_, {}, &a, &fd, 1); rc != 0) {
    shared_->windows[side_][slot].store(0, std::memory_order_seq_cst);
    errno = rc;
    *error = errno_text("announcing the window to the peer");
    return nullptr;
  }
  auto window = std::make_shared<ShmWindow>(provider_, weak_from_this(), region, slot, rkey, addr, length, access);
  windows_[slot] = window;
  return window;
}

void ShmConnection::drop_window(uint32_t slot, uint32_t rkey) {
  if (shared_ != nullptr) {
    uint32_t expected = rkey;
    shared_->windows[side_][slot].compare_exchange_strong(expected, 0, std::memory_order_seq_cst);
  }
  if (socket_ >= 0) {
    MrAnnouncement a{};
    a.rkey = rkey;
    send_message(socket_, MsgType::MR_REMOVE, qp_num_, {}, &a, nullptr, 0);
  }
}

bool ShmConnection::accept(const QueuePairOptions& options, const std::vector<uint8_t>& private_data,
                           std::string* error) {
  std::vector<ConnectionEvent> events;
  {
    std::lock_guard<std::mutex> guard(provider_->lock());
    if (!listener_owned || state() != ConnState::CONNECTING || socket_ < 0) {
      *error = "accept() needs a connection request that is still pending";
      return false;
    }
    if (private_data.size() > u32(Limit::MAX_PRIVATE_DATA)) {
      *error = "private data is limited to " + std::to_string(u32(Limit::MAX_PRIVATE_DATA)) + " bytes";
      return false;
    }
    if (!setup_queues(options, error)) return false;
    int conn_fd = memfd_create("rdma-kv-conn", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (conn_fd < 0 || ftruncate(conn_fd, sizeof(ConnShared)) != 0 ||
        fcntl(conn_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      *error = errno_text("creating the connection area");
      if (conn_fd >= 0) ::close(conn_fd);
      return false;
    }
    void* map = mmap(nullptr, sizeof(ConnShared), PROT_READ | PROT_WRITE, MAP_SHARED, conn_fd, 0);
    if (map == MAP_FAILED) {
      *error = errno_text("mapping the connection area");
      ::close(conn_fd);
      return false;
    }
    auto* shared = static_cast<ConnShared*>(map);
    shared->magic = kConnMagic;
    shared->ring_bytes = kRingBytes;
    munmap(map, sizeof(ConnShared));
    if (!attach_shared(conn_fd, error)) {
      ::close(conn_fd);
      return false;
    }
    if (!provider_->announce_all(this)) {
      *error = errno_text("announcing memory to the peer");
      ::close(conn_fd);
      return false;
    }
    int fds[3] = {conn_fd, recv_cq_->event_fd(), send_cq_->event_fd()};
    int rc = send_message(socket_, MsgType::ACCEPT, qp_num_, private_data, nullptr, fds, 3);
    ::close(conn_fd);
    if (rc != 0) {
      errno = rc;
      *error = errno_text("sending the accept");
      return false;
    }
    listener_owned = false;
    set_state(ConnState::CONNECTED);
    events.push_back({ConnEvent::ESTABLISHED, shared_from_this(), {}, ""});
  }
  provider_->emit(events);
  return true;
}

void ShmConnection::reject(const std::vector<uint8_t>& private_data) {
  std::shared_ptr<ShmConnection> self = shared_from_this();
  std::lock_guard<std::mutex> guard(provider_->lock());
  if (!listener_owned || state() != ConnState::CONNECTING) return;
  if (socket_ >= 0) send_message(socket_, MsgType::REJECT, qp_num_, private_data, nullptr, nullptr, 0);
  listener_owned = false;
  set_state(ConnState::CLOSED);
  provider_->forget_connection(this);
}

void ShmConnection::disconnect() {
  std::vector<ConnectionEvent> events;
  std::shared_ptr<ShmConnection> self = shared_from_this();
  {
    std::lock_guard<std::mutex> guard(provider_->lock());
    ConnState s = state();
    if (s == ConnState::CLOSED) return;
    if (s == ConnState::CONNECTED || s == ConnState::CONNECTING) fail("disconnected locally", true);
    set_state(ConnState::CLOSED);
    if (socket_ >= 0) {
      events.push_back({ConnEvent::DISCONNECTED, self, {}, first_error_});
      provider_->forget_connection(this);
    }
  }
  provider_->emit(events);
}

void ShmConnection::close_socket() {
  if (socket_ >= 0) {
    provider_->unwatch(socket_);
    ::close(socket_);
    socket_ = -1;
  }
}

bool ShmConnection::drain_socket(std::vector<ConnectionEvent>* events) {
  if (socket_ < 0) return events == nullptr;
  for (;;) {
    Message message;
    std::string error;
    int rc = receive_message(socket_, &message, &error);
    if (rc == 0) return true;
    if (rc < 0) {
      if (events == nullptr) return false;  // the event thread reports it
      if (first_error_.empty()) first_error_ = error;
      return false;
    }
    handle_message(message, events);
    close_fds(message.fds);
  }
}

void ShmConnection::handle_message(Message& m, std::vector<ConnectionEvent>* events) {
  auto protocol_error = [&](const std::string& why) {
    fail("control protocol: " + why, true);
  };
  switch (m.header.type) {
    case MsgType::MR_ADD: {
      if (m.fds.size() != 1) return protocol_error("MR_ADD without its fd");
      if (remote_mrs_.size() >= u32(Limit::SHM_MAX_REMOTE_MRS)) return;  // unknown rkey: REM_ACCESS_ERR on use
      const MrAnnouncement& a = m.mr;
      struct stat st {};
      if (a.length == 0 || fstat(m.fds[0], &st) != 0 || a.fd_offset > static_cast<uint64_t>(st.st_size) ||
          a.length > static_cast<uint64_t>(st.st_size) - a.fd_offset) {
        return protocol_error("MR_ADD outside its file");
      }
      if (a.window_slot > u32(Limit::SHM_MAX_WINDOWS)) return protocol_error("MR_ADD of an unknown window");
      RemoteMr mr;
      // A hugetlb file maps only at its huge page size (its st_blksize): offset and length in whole pages.
      const uint64_t page = st.st_blksize > static_cast<blksize_t>(kPage) && (st.st_blksize & (st.st_blksize - 1)) == 0
                                ? static_cast<uint64_t>(st.st_blksize)
                                : kPage;
      const uint64_t map_offset = a.fd_offset & ~(page - 1);
      mr.map_length = std::min<uint64_t>((a.fd_offset - map_offset + a.length + page - 1) / page * page,
                                         static_cast<uint64_t>(st.st_size) - map_offset);
      const bool writable = (a.access & (u32(Access::REMOTE_WRITE) | u32(Access::REMOTE_ATOMIC))) != 0;
      void* map = mmap(nullptr, mr.map_length, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, m.fds[0],
                       static_cast<off_t>(map_offset));
      if (map == MAP_FAILED) return;  // unusable: REM_ACCESS_ERR on use
      mr.map = map;
      mr.base = static_cast<uint8_t*>(map) + (a.fd_offset - map_offset);
      mr.rkey = a.rkey;
      mr.access = a.access;
      mr.addr = a.addr;
      mr.length = a.length;
      mr.window_slot = a.window_slot;
      mr.valid = true;
      remote_mrs_.push_back(mr);
      return;
    }
    case MsgType::MR_REMOVE:
      // Stays mapped until the connection ends: an operation may be copying
      // from it on another thread of this process right now.
      for (auto& mr : remote_mrs_) {
        if (mr.rkey == m.mr.rkey) mr.valid = false;
      }
      return;
    case MsgType::CONNECT_REQ:
      if (side_ != 1 || state() != ConnState::CONNECTING || !peer_private_.empty() || m.fds.size() != 2) {
        return protocol_error("unexpected CONNECT_REQ");
      }
      set_peer_private(m.header.private_data, m.header.private_len);
      set_peer_wake(m.fds, 0);
      listener_owned = true;
      if (events != nullptr) {
        events->push_back({ConnEvent::CONNECT_REQUEST, shared_from_this(), peer_private_, ""});
      }
      return;
    case MsgType::ACCEPT: {
      if (side_ != 0 || state() != ConnState::CONNECTING || m.fds.size() != 3) return protocol_error("unexpected ACCEPT");
      std::string error;
      set_peer_private(m.header.private_data, m.header.private_len);
      set_peer_wake(m.fds, 1);
      if (!attach_shared(m.fds[0], &error)) {
        fail(error, true);
        if (events != nullptr) events->push_back({ConnEvent::ERROR, shared_from_this(), {}, error});
        return;
      }
      set_state(ConnState::CONNECTED);
      if (events != nullptr) events->push_back({ConnEvent::ESTABLISHED, shared_from_this(), peer_private_, ""});
      return;
    }
    case MsgType::REJECT:
      if (side_ != 0 || state() != ConnState::CONNECTING) return protocol_error("unexpected REJECT");
      set_peer_private(m.header.private_data, m.header.private_len);
      first_error_ = "rejected by the server";
      set_state(ConnState::CLOSED);
      if (events != nullptr) {
        events->push_back({ConnEvent::REJECTED, shared_from_this(), peer_private_, "rejected by the server"});
      }
      return;
  }
  protocol_error("unknown message type " + std::to_string(static_cast<uint32_t>(m.header.type)));
}

// ---- ShmListener ------------------------------------------------------------------

void ShmListener::close() {
  std::lock_guard<std::mutex> guard(provider_->lock());
  close_locked();
}

void ShmListener::close_locked() {
  if (fd_ < 0) return;
  provider_->forget_listener(this);
  ::close(fd_);
  fd_ = -1;
  unlink(path_.c_str());
}

// ---- ShmProvider -----------------------------------------------------------------

ShmProvider::ShmProvider(EventSink sink) : sink_(std::move(sink)) {
  // Keys start at a random point so an rkey cannot be guessed from a restart.
  std::random_device random;
  key_counter_ = random();
  // A test hook: behave as a device with shallower completion queues (a NIC's max_cqe).
  if (const char* max_cqe = std::getenv("RKV_SHM_TEST_MAX_CQE")) {
    const unsigned long value = std::strtoul(max_cqe, nullptr, 10);
    if (value > 0 && value < max_cqe_) max_cqe_ = static_cast<uint32_t>(value);
  }
  const char* no_windows = std::getenv("RKV_NO_MEMORY_WINDOWS");
  windows_off_ = no_windows != nullptr && std::strcmp(no_windows, "1") == 0;
  if (const char* hold = std::getenv("RKV_SHM_TEST_HOLD_FILE")) test_hold_file_ = hold;
  if (const char* stop = std::getenv("RKV_SHM_TEST_STOP_BEFORE")) {
    const std::string spec(stop);
    const size_t colon = spec.find(':');
    for (Opcode op : {Opcode::READ, Opcode::WRITE, Opcode::WRITE_WITH_IMM, Opcode::CMP_AND_SWP, Opcode::FETCH_AND_ADD}) {
      if (spec.substr(0, colon) == to_string(op)) test_stop_opcode_ = static_cast<int>(op);
    }
    if (colon != std::string::npos) test_stop_length_ = static_cast<uint32_t>(std::strtoul(spec.c_str() + colon + 1, nullptr, 10));
  }
}

bool ShmProvider::test_holds(int peer_pid) const {
  if (test_hold_file_.empty() || peer_pid <= 0) return false;
  char text[32] = {};
  const int fd = ::open(test_hold_file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return n > 0 && std::strtol(text, nullptr, 10) == peer_pid;
}

bool ShmProvider::test_stop_before(const WorkRequest& wr) {
  if (test_stop_opcode_ < 0 || static_cast<int>(wr.opcode) != test_stop_opcode_) return false;
  if (test_stop_length_ != 0 && wr.length != test_stop_length_) return false;
  test_stop_opcode_ = -1;  // once
  return true;
}

ShmProvider::~ShmProvider() {
  shutdown();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

bool ShmProvider::start(std::string* error) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || stop_fd_ < 0) {
    *error = errno_text("creating the shm provider's event thread");
    return false;
  }
  watch(stop_fd_);
  thread_ = std::thread([this] { run(); });
  return true;
}

DeviceInfo ShmProvider::device_info() const {
  DeviceInfo info;
  info.name = "shm";
  info.atomic_cap = "GLOB";  // CPU atomics on a shared mapping are atomic for every process
  info.max_inline = u32(Limit::SHM_MAX_INLINE);
  info.max_qp_rd_atom = info.max_qp_init_rd_atom = 0xffff;
  info.max_cqe = max_cqe_;
  info.memory_windows = !windows_off_;
  info.memory_windows_note = windows_off_ ? "RKV_NO_MEMORY_WINDOWS=1"
                                          : "checked by the poster's provider in the connection's shared area, as a NIC would";
  return info;
}

std::unique_ptr<MemoryRegion> ShmProvider::register_memory(Memory& memory, size_t offset, size_t length,
                                                           uint32_t access, std::string* error) {
  const uint32_t known = u32(Access::LOCAL_WRITE) | u32(Access::REMOTE_READ) | u32(Access::REMOTE_WRITE) |
                         u32(Access::REMOTE_ATOMIC) | u32(Access::MW_BIND);
  if ((access & ~known) != 0) {
    *error = "unknown access flags";
    return nullptr;
  }
  if ((access & (u32(Access::REMOTE_WRITE) | u32(Access::REMOTE_ATOMIC))) != 0 &&
      (access & u32(Access::LOCAL_WRITE)) == 0) {
    *error = "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE too (as ibv_reg_mr requires)";
    return nullptr;
  }
  if (length == 0 || offset > memory.length() || length > memory.length() - offset) {
    *error = "region [" + std::to_string(offset) + ", +" + std::to_string(length) + ") is outside the " +
             std::to_string(memory.length()) + "-byte memory";
    return nullptr;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  const uint32_t key = next_key();
  auto mr = std::make_unique<ShmMr>(this, memory, offset, length, access, key);
  mrs_[key] = mr.get();
  if (mr->remote()) {
    for (auto& [fd, connection] : connections_) connection->announce_mr(*mr);
  }
  return mr;
}

uint32_t ShmProvider::next_key() {
  // Registrations and windows share the sequence, so a window's key is never a registration's.
  uint32_t key;
  do {
    key_counter_ += 0x9e3779b9u;  // odd: visits every 32-bit value before repeating
    key = key_counter_;
  } while (key == 0 || mrs_.count(key) != 0);
  return key;
}

bool ShmProvider::announce_all(ShmConnection* connection) {
  for (auto& [key, mr] : mrs_) {
    if (mr->remote() && !connection->announce_mr(*mr)) return false;
  }
  return true;
}

ShmMr* ShmProvider::find_local(uint32_t lkey) const {
  ShmMr*& recent = recent_mrs_[lkey & (kRecentMrs - 1)];
  if (recent != nullptr && recent->lkey() == lkey) return recent;
  auto it = mrs_.find(lkey);
  if (it == mrs_.end()) return nullptr;
  recent = it->second;
  return recent;
}

void ShmProvider::forget_mr(ShmMr* mr) {
  mrs_.erase(mr->lkey());
  for (ShmMr*& recent : recent_mrs_) {
    if (recent == mr) recent = nullptr;
  }
  if (!mr->remote()) return;
  MrAnnouncement a{};
  a.rkey = mr->rkey();
  for (auto& [fd, connection] : connections_) {
    send_message(fd, MsgType::MR_REMOVE, connection->qp_num(), {}, &a, nullptr, 0);
  }
}

std::shared_ptr<CompletionQueue> ShmProvider::create_cq(uint32_t depth, std::string* error) {
  if (depth == 0 || depth > max_cqe_) {
    *error = "CQ depth must be between 1 and " + std::to_string(max_cqe_);
    return nullptr;
  }
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    *error = errno_text("eventfd");
    return nullptr;
  }
  return std::make_shared<ShmCq>(this, depth, fd);
}

std::shared_ptr<Listener> ShmProvider::listen(const std::string& url, std::string* error) {
  std::string scheme, path;
  if (!split_url(url, &scheme, &path, error)) return nullptr;
  sockaddr_un address;
  if (!make_address(path, &address, error)) return nullptr;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *error = errno_text("socket");
    return nullptr;
  }
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  if (rc != 0 && errno == EADDRINUSE) {
    // A socket file left by a server that died is reused; a live one is not.
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 || errno != ECONNREFUSED;
    ::close(probe);
    if (live) {
      *error = "address in use: another process listens on " + url;
      ::close(fd);
      return nullptr;
    }
    unlink(path.c_str());
    rc = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  }
  if (rc != 0 || ::listen(fd, 128) != 0) {
    *error = errno_text("cannot listen on " + url);
    ::close(fd);
    return nullptr;
  }
  auto listener = std::make_shared<ShmListener>(this, fd, path);
  std::lock_guard<std::mutex> guard(mutex_);
  listeners_[fd] = listener.get();
  watch(fd);
  return listener;
}

std::shared_ptr<Connection> ShmProvider::connect(const std::string& url, const QueuePairOptions& options,
                                                 const std::vector<uint8_t>& private_data, uint32_t timeout_ms,
                                                 std::string* error) {
  std::string scheme, path;
  if (!split_url(url, &scheme, &path, error)) return nullptr;
  sockaddr_un address;
  if (!make_address(path, &address, error)) return nullptr;
  if (private_data.size() > u32(Limit::MAX_PRIVATE_DATA)) {
    *error = "private data is limited to " + std::to_string(u32(Limit::MAX_PRIVATE_DATA)) + " bytes";
    return nullptr;
  }
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno_text("socket");
    return nullptr;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    *error = errno == ENOENT || errno == ECONNREFUSED ? "no server listens on " + url
                                                      : errno_text("cannot connect to " + url);
    ::close(fd);
    return nullptr;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::lock_guard<std::mutex> guard(mutex_);
  auto connection = std::make_shared<ShmConnection>(this, fd, 0, next_qp_num());
  if (!connection->setup_queues(options, error)) return nullptr;  // the destructor closes fd
  if (!announce_all(connection.get())) {
    *error = errno_text("announcing memory to " + url);
    return nullptr;
  }
  int fds[2] = {connection->recv_cq()->event_fd(), connection->send_cq()->event_fd()};
  int rc = send_message(fd, MsgType::CONNECT_REQ, connection->qp_num(), private_data, nullptr, fds, 2);
  if (rc != 0) {
    errno = rc;
    *error = errno_text("sending the connect request to " + url);
    return nullptr;
  }
  connection->deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  connections_[fd] = connection;
  watch(fd);
  return connection;
}

void ShmProvider::watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void ShmProvider::unwatch(int fd) {
  if (epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void ShmProvider::forget_listener(ShmListener* listener) {
  unwatch(listener->fd());
  listeners_.erase(listener->fd());
}

void ShmProvider::forget_connection(ShmConnection* connection) {
  int fd = connection->socket();
  if (fd < 0) return;
  auto it = connections_.find(fd);
  std::shared_ptr<ShmConnection> keep;  // released after the socket is closed
  if (it != connections_.end()) {
    keep = std::move(it->second);
    connections_.erase(it);
  }
  connection->close_socket();
  // Nothing on the data path uses these once the queue pair is broken (the
  // lock is held), so they go now rather than when the last reference does.
  if (connection->state() != ConnState::CONNECTED) connection->release_resources();
  graveyard_.push_back(std::move(keep));
}

void ShmProvider::emit(std::vector<ConnectionEvent>& events) {
  for (auto& event : events) {
    if (sink_) sink_(std::move(event));
  }
  events.clear();
}

void ShmProvider::on_listener_ready(ShmListener* listener, std::vector<ConnectionEvent>* events) {
  for (;;) {
    int fd = accept4(listener->fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a client that gave up already
    auto connection = std::make_shared<ShmConnection>(this, fd, 1, next_qp_num());
    connections_[fd] = connection;
    watch(fd);
    // The request is usually here already; if not, EPOLLIN brings it.
    if (!connection->drain_socket(events)) forget_connection(connection.get());
  }
}

void ShmProvider::check_deadlines(std::vector<ConnectionEvent>* events) {
  const auto now = Clock::now();
  std::vector<ShmConnection*> expired;
  for (auto& [fd, connection] : connections_) {
    if (connection->side() == 0 && connection->state() == ConnState::CONNECTING && now > connection->deadline) {
      expired.push_back(connection.get());
    }
  }
  for (ShmConnection* connection : expired) {
    connection->fail("timed out waiting for the server to accept", false);
    events->push_back({ConnEvent::ERROR, connection->shared_from_this(), {}, "timed out waiting for the server to accept"});
    forget_connection(connection);
  }
}

void ShmProvider::run() {
  epoll_event ready[32];
  for (;;) {
    int n = epoll_wait(epoll_fd_, ready, 32, 100);
    std::vector<ConnectionEvent> events;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (stopped_) break;
      for (int i = 0; i < n; i++) {
        int fd = ready[i].data.fd;
        if (auto l = listeners_.find(fd); l != listeners_.end()) {
          on_listener_ready(l->second, &events);
          continue;
        }
        auto c = connections_.find(fd);
        if (c == connections_.end()) continue;
        std::shared_ptr<ShmConnection> connection = c->second;
        if (connection->drain_socket(&events)) {
          if (connection->state() == ConnState::CLOSED) forget_connection(connection.get());  // rejected
          continue;
        }
        // The peer is gone (or broke the protocol). What it sent before it left
        // is delivered first, as a NIC completes what arrived before an error.
        if (connection->state() == ConnState::CONNECTED && connection->recv_cq() != nullptr) {
          connection->drain_inbound(connection->recv_cq());
        }
        const bool was_connecting = connection->state() == ConnState::CONNECTING;
        std::string why = connection->side() == 0 && was_connecting ? "the server closed the connection before accepting"
                                                                     : "the peer disconnected";
        connection->fail(why, false);
        why = connection->error_locked();
        if (!(connection->side() == 1 && was_connecting && !connection->listener_owned)) {
          events.push_back({was_connecting ? ConnEvent::ERROR : ConnEvent::DISCONNECTED, connection, {}, why});
        }
        forget_connection(connection.get());
      }
      check_deadlines(&events);
    }
    emit(events);
    std::vector<std::shared_ptr<ShmConnection>> dead;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      dead.swap(graveyard_);
    }
  }
}

void ShmProvider::shutdown() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopped_) return;
    stopped_ = true;
    uint64_t one = 1;
    ssize_t rc = write(stop_fd_, &one, sizeof one);
    (void)rc;
  }
  if (thread_.joinable()) thread_.join();
  std::vector<std::shared_ptr<ShmConnection>> dead;  // released after the lock
  std::lock_guard<std::mutex> guard(mutex_);
  std::vector<std::shared_ptr<ShmConnection>> all;
  for (auto& [fd, connection] : connections_) all.push_back(connection);
  for (auto& connection : all) {
    connection->fail("the provider shut down", true);
    connection->set_state(ConnState::CLOSED);
    forget_connection(connection.get());
  }
  std::vector<ShmListener*> listeners;
  for (auto& [fd, listener] : listeners_) listeners.push_back(listener);
  for (ShmListener* listener : listeners) listener->close_locked();
  ::close(epoll_fd_);
  ::close(stop_fd_);
  epoll_fd_ = stop_fd_ = -1;
  dead.swap(graveyard_);
}

}  // namespace rkv::transport::shm

namespace rkv::transport {

std::unique_ptr<Provider> create_shm_provider(EventSink sink, std::string* error) {
  auto provider = std::make_unique<shm::ShmProvider>(std::move(sink));
  if (!provider->start(error)) return nullptr;
  return provider;
}

}  // namespace rkv::transport
