// The verbs provider: memory registration, CQs, listen/connect, and the
// provider's thread, which reads rdma_cm events and the device's async events
// and delivers connection events through the EventSink.
#include "verbs_provider.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "verbs_internal.h"

namespace rkv::transport {

namespace verbs {

// The shared constants mirror the verbs enums by value; the casts rely on it.
static_assert(u32(WcStatus::REM_ACCESS_ERR) == IBV_WC_REM_ACCESS_ERR && u32(WcStatus::GENERAL_ERR) == IBV_WC_GENERAL_ERR &&
                  u32(WcStatus::WR_FLUSH_ERR) == IBV_WC_WR_FLUSH_ERR && u32(WcStatus::RESP_TIMEOUT_ERR) == IBV_WC_RESP_TIMEOUT_ERR,
              "WcStatus must mirror enum ibv_wc_status");
static_assert(u32(Access::LOCAL_WRITE) == IBV_ACCESS_LOCAL_WRITE && u32(Access::REMOTE_WRITE) == IBV_ACCESS_REMOTE_WRITE &&
                  u32(Access::REMOTE_READ) == IBV_ACCESS_REMOTE_READ && u32(Access::REMOTE_ATOMIC) == IBV_ACCESS_REMOTE_ATOMIC &&
                  u32(Access::MW_BIND) == IBV_ACCESS_MW_BIND,
              "Access must mirror enum ibv_access_flags");

namespace {

constexpr uint32_t kDefaultTimeoutMs = 5000;
constexpr int kListenBacklog = 128;
constexpr int kTickMs = 100;  // how often connect deadlines are checked
constexpr int kConsumerReject = 28;  // IB CM REJ reason "consumer defined": rdma_reject()

// What the thread keeps of an rdma_cm event after acknowledging it at once, so
// that rdma_destroy_id() elsewhere never waits on this thread.
struct CmEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = 0;
  rdma_cm_id* id = nullptr;
  uint64_t token = 0;
  uint64_t listen_token = 0;
  uint8_t initiator_depth = 0, responder_resources = 0;
  std::vector<uint8_t> private_data;
};

uint64_t token_of(void* context) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(context)); }

bool resolve(const std::string& host, const std::string& port, bool passive, addrinfo** out, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, out);
  if (rc != 0) {
    *error = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return false;
  }
  return true;
}

bool ensure_fork_safety(std::string* error) {
  // Before any verbs resource exists: with it, libibverbs marks every
  // registered range MADV_DONTFORK, so a child that Node forks (child_process,
  // test runners) cannot take copy-on-write copies of pinned pages and leave
  // the HCA writing into pages the parent no longer sees. On kernels with
  // copy-on-fork for pinned pages (5.13+) it is a no-op (IBV_FORK_UNNEEDED).
  static std::once_flag once;
  static int result = 0;
  std::call_once(once, [] { result = ibv_fork_init(); });
  if (result != 0) {
    *error = "ibv_fork_init failed (" + std::string(std::strerror(result)) +
             "): RDMA memory was registered in this process before the verbs provider started, so forked children "
             "could corrupt it";
    return false;
  }
  return true;
}

}  // namespace

void VerbsListener::close() {
  rdma_cm_id* id;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    id = id_;
    id_ = nullptr;
  }
  if (id == nullptr) return;
  {
    std::lock_guard<std::mutex> guard(core_->mutex);
    core_->listeners.erase(token_);
  }
  rdma_destroy_id(id);  // requests already delivered have their own ids
}

class VerbsProvider final : public Provider {
 public:
  VerbsProvider(std::shared_ptr<VerbsCore> core, EventSink sink) : core_(std::move(core)), sink_(std::move(sink)) {}
  ~VerbsProvider() override {
    shutdown();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  bool start(std::string* error) {
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) {
      *error = errno_text("eventfd", errno);
      return false;
    }
    thread_ = std::thread([this] { run(); });
    return true;
  }

  const char* scheme() const override { return "rdma"; }

  DeviceInfo device_info() const override {
    DeviceInfo info;
    info.name = core_->name;
    info.max_qp_rd_atom = static_cast<uint32_t>(core_->attr.max_qp_rd_atom);
    info.max_qp_init_rd_atom = static_cast<uint32_t>(core_->attr.max_qp_init_rd_atom);
    info.atomic_cap = core_->atomic_cap_name();
    info.max_inline = core_->max_inline;
    info.memory_windows = core_->memory_windows;
    info.memory_windows_note = core_->memory_windows_note;
    info.max_cqe = static_cast<uint32_t>(core_->attr.max_cqe);
    return info;
  }

  std::unique_ptr<MemoryRegion> register_memory(Memory& memory, size_t offset, size_t length, uint32_t access,
                                                std::string* error) override {
    const uint32_t known = u32(Access::LOCAL_WRITE) | u32(Access::REMOTE_READ) | u32(Access::REMOTE_WRITE) |
                           u32(Access::REMOTE_ATOMIC) | u32(Access::MW_BIND);
    if ((access & ~known) != 0) {
      *error = "unknown access flags";
      return nullptr;
    }
    if ((access & u32(Access::MW_BIND)) != 0 && !core_->memory_windows) {
      *error = "MW_BIND: " + core_->name + " has no memory windows (" + core_->memory_windows_note + ")";
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
    uint8_t* addr = memory.data() + offset;
    ibv_mr* mr = ibv_reg_mr(core_->pd, addr, length, static_cast<int>(access));
    if (mr == nullptr) {
      int err = errno;
      *error = errno_text("ibv_reg_mr of " + std::to_string(length) + " bytes on " + core_->name, err);
      if (err == ENOMEM || err == EPERM) *error += " (registered memory is pinned: is `ulimit -l` large enough?)";
      return nullptr;
    }
    return std::make_unique<VerbsMr>(core_, mr, addr, length, access);
  }

  std::shared_ptr<CompletionQueue> create_cq(uint32_t depth, std::string* error) override {
    return VerbsCq::create(core_, depth, error);
  }

  std::shared_ptr<Listener> listen(const std::string& url, std::string* error) override {
    std::string host, port;
    if (!parse_rdma_url(url, &host, &port, error)) return nullptr;
    if (stopped()) {
      *error = "the provider is shut down";
      return nullptr;
    }
    addrinfo* ai = nullptr;
    if (!resolve(host, port, true, &ai, error)) return nullptr;
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> ai_owner(ai, freeaddrinfo);
    const uint64_t token = VerbsCore::token();
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(core_->channel, &id, reinterpret_cast<void*>(token), RDMA_PS_TCP) != 0) {
      *error = errno_text("rdma_create_id", errno);
      return nullptr;
    }
    if (rdma_bind_addr(id, ai->ai_addr) != 0) {
      *error = errno_text("rdma_bind_addr " + host + ":" + port, errno);
      rdma_destroy_id(id);
      return nullptr;
    }
    if (id->verbs != nullptr && id->verbs != core_->context) {
      *error = host + " belongs to RDMA device " + ibv_get_device_name(id->verbs->device) + ", but this provider uses " +
               core_->name + " (choose one with RKV_RDMA_DEVICE)";
      rdma_destroy_id(id);
      return nullptr;
    }
    // Port 0 was replaced by a free one at bind time: report what we got.
    auto listener = std::make_shared<VerbsListener>(core_, token, id, "rdma://" + sockaddr_text(rdma_get_local_addr(id)));
    {
      std::lock_guard<std::mutex> guard(core_->mutex);
      core_->listeners[token] = listener;
    }
    if (rdma_listen(id, kListenBacklog) != 0) {
      *error = errno_text("rdma_listen on " + listener->url(), errno);
      return nullptr;  // the listener's destructor destroys the id
    }
    return listener;
  }

  std::shared_ptr<Connection> connect(const std::string& url, const QueuePairOptions& options,
                                      const std::vector<uint8_t>& private_data, uint32_t timeout_ms,
                                      std::string* error) override {
    std::string host, port;
    if (!parse_rdma_url(url, &host, &port, error)) return nullptr;
    if (stopped()) {
      *error = "the provider is shut down";
      return nullptr;
    }
    auto* send_cq = dynamic_cast<VerbsCq*>(options.send_cq.get());
    auto* recv_cq = dynamic_cast<VerbsCq*>(options.recv_cq.get());
    if (send_cq == nullptr || recv_cq == nullptr || send_cq->core() != core_.get() || recv_cq->core() != core_.get()) {
      *error = "queue pair options need a send CQ and a receive CQ created by this provider";
      return nullptr;
    }
    std::vector<uint8_t> wire;
    if (!encode_private_data(private_data, true, &wire, error)) return nullptr;
    addrinfo* ai = nullptr;
    if (!resolve(host, port, false, &ai, error)) return nullptr;
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> ai_owner(ai, freeaddrinfo);
    const uint64_t token = VerbsCore::token();
    auto connection = std::make_shared<VerbsConnection>(core_, token, options, std::move(wire),
                                                        timeout_ms != 0 ? timeout_ms : kDefaultTimeoutMs, url);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(core_->channel, &id, reinterpret_cast<void*>(token), RDMA_PS_TCP) != 0) {
      *error = errno_text("rdma_create_id", errno);
      return nullptr;
    }
    connection->set_id(id);
    {
      std::lock_guard<std::mutex> guard(core_->mutex);
      core_->connections[token] = connection;
    }
    if (!connection->start_resolve(ai->ai_addr, error)) return nullptr;
    return connection;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> guard(shutdown_mutex_);
      if (shut_) return;
      shut_ = true;
    }
    {
      std::lock_guard<std::mutex> guard(core_->mutex);
      core_->stopped = true;
    }
    stopping_.store(true, std::memory_order_release);
    if (wake_fd_ >= 0) {
      uint64_t one = 1;
      ssize_t rc = write(wake_fd_, &one, sizeof one);
      (void)rc;
    }
    if (thread_.joinable()) {
      // From the sink (the provider's own thread) it cannot join itself.
      if (thread_.get_id() == std::this_thread::get_id()) {
        thread_.detach();
      } else {
        thread_.join();
      }
    }
    std::vector<std::shared_ptr<VerbsConnection>> connections;
    std::vector<std::shared_ptr<VerbsListener>> listeners;
    {
      std::lock_guard<std::mutex> guard(core_->mutex);
      for (auto& [token, weak] : core_->connections) {
        if (auto strong = weak.lock()) connections.push_back(std::move(strong));
      }
      for (auto& [token, weak] : core_->listeners) {
        if (auto strong = weak.lock()) listeners.push_back(std::move(strong));
      }
    }
    for (auto& listener : listeners) listener->close();
    for (auto& connection : connections) connection->shut_down();
  }

 private:
  bool stopped() {
    std::lock_guard<std::mutex> guard(core_->mutex);
    return core_->stopped;
  }

  template <typename T>
  static std::shared_ptr<T> find(std::unordered_map<uint64_t, std::weak_ptr<T>>& map, std::mutex& mutex,
                                 uint64_t token) {
    std::lock_guard<std::mutex> guard(mutex);
    auto it = map.find(token);
    return it == map.end() ? nullptr : it->second.lock();
  }

  void run() {
    pollfd fds[3] = {{core_->channel->fd, POLLIN, 0}, {core_->context->async_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    while (!stopping_.load(std::memory_order_acquire)) {
      int n = ::poll(fds, 3, kTickMs);
      if (stopping_.load(std::memory_order_acquire)) break;
      std::vector<ConnectionEvent> events;
      if (n > 0) {
        if (fds[2].revents != 0) {
          uint64_t value;
          ssize_t rc = read(wake_fd_, &value, sizeof value);
          (void)rc;
        }
        if (fds[0].revents != 0) drain_cm_events(&events);
        if (fds[1].revents != 0) drain_async_events();
      }
      check_deadlines(&events);
      for (auto& event : events) sink_(std::move(event));
      // `events` may hold the last reference to a connection: it is destroyed
      // here, on this thread, with no lock held.
    }
  }

  void drain_cm_events(std::vector<ConnectionEvent>* events) {
    for (;;) {
      rdma_cm_event* raw = nullptr;
      if (rdma_get_cm_event(core_->channel, &raw) != 0) return;  // EAGAIN: the channel fd is non-blocking
      CmEvent event;
      event.type = raw->event;
      event.status = raw->status;
      event.id = raw->id;
      event.token = token_of(raw->id->context);
      if (raw->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        event.listen_token = token_of(raw->listen_id->context);
        event.initiator_depth = raw->param.conn.initiator_depth;
        event.responder_resources = raw->param.conn.responder_resources;
      }
      if (raw->event == RDMA_CM_EVENT_CONNECT_REQUEST || raw->event == RDMA_CM_EVENT_ESTABLISHED ||
          raw->event == RDMA_CM_EVENT_REJECTED) {
        event.private_data = decode_private_data(raw->param.conn.private_data, raw->param.conn.private_data_len);
      }
      if (core_->trace) {
        trace_line("%s status %d private_data_len %u (payload %zu) token %llu", rdma_event_str(raw->event), raw->status,
                   static_cast<unsigned>(raw->param.conn.private_data_len), event.private_data.size(),
                   static_cast<unsigned long long>(event.token));
      }
      rdma_ack_cm_event(raw);  // at once: the private data is copied, nothing else is needed
      handle(event, events);
    }
  }

  void handle(CmEvent& event, std::vector<ConnectionEvent>* events) {
    if (event.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      on_connect_request(event, events);
      return;
    }
    std::shared_ptr<VerbsConnection> connection = find(core_->connections, core_->mutex, event.token);
    if (!connection) return;  // a listener's event, or a connection that is gone
    const std::string url = connection->where();
    switch (event.type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED: connection->on_addr_resolved(events); break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: connection->on_route_resolved(events); break;
      case RDMA_CM_EVENT_ESTABLISHED: connection->on_established(std::move(event.private_data), events); break;
      case RDMA_CM_EVENT_REJECTED: {
        const bool consumer = event.status == kConsumerReject || event.status == -ECONNREFUSED;
        connection->on_rejected(event.status, consumer, std::move(event.private_data), events);
        break;
      }
      case RDMA_CM_EVENT_DISCONNECTED: connection->on_disconnected(events); break;
      case RDMA_CM_EVENT_ADDR_ERROR:
        connection->on_failure("cannot resolve the RDMA address of " + url + ": " + cm_status_text(event.status), events);
        break;
      case RDMA_CM_EVENT_ROUTE_ERROR:
        connection->on_failure("cannot resolve a route to " + url + ": " + cm_status_text(event.status), events);
        break;
      case RDMA_CM_EVENT_UNREACHABLE:
        connection->on_failure("the peer " + url + " is unreachable: " + cm_status_text(event.status), events);
        break;
      case RDMA_CM_EVENT_CONNECT_ERROR:
        connection->on_failure("connection error with " + url + ": " + cm_status_text(event.status), events);
        break;
      case RDMA_CM_EVENT_DEVICE_REMOVAL: connection->on_failure("the RDMA device was removed", events); break;
      default: break;  // TIMEWAIT_EXIT, ADDR_CHANGE, ...
    }
  }

  void on_connect_request(CmEvent& event, std::vector<ConnectionEvent>* events) {
    std::shared_ptr<VerbsListener> listener = find(core_->listeners, core_->mutex, event.listen_token);
    const bool ours = event.id->verbs == core_->context;
    if (!listener || !listener->open() || stopped() || !ours) {
      rdma_reject(event.id, nullptr, 0);
      rdma_destroy_id(event.id);
      return;
    }
    const uint64_t token = VerbsCore::token();
    event.id->context = reinterpret_cast<void*>(token);
    auto connection = std::make_shared<VerbsConnection>(core_, token, event.id, event.private_data,
                                                        event.initiator_depth, event.responder_resources);
    {
      std::lock_guard<std::mutex> guard(core_->mutex);
      core_->connections[token] = connection;
    }
    events->push_back({ConnEvent::CONNECT_REQUEST, connection, std::move(event.private_data), ""});
  }

  void drain_async_events() {
    for (;;) {
      ibv_async_event raw{};
      if (ibv_get_async_event(core_->context, &raw) != 0) return;  // EAGAIN: the async fd is non-blocking
      const ibv_event_type type = raw.event_type;
      uint64_t token = 0;
      switch (type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_PATH_MIG_ERR: token = token_of(raw.element.qp->qp_context); break;
        case IBV_EVENT_CQ_ERR: token = token_of(raw.element.cq->cq_context); break;
        default: break;
      }
      ibv_ack_async_event(&raw);  // at once: ibv_destroy_qp/cq wait for it
      const std::string why = std::string("async event: ") + ibv_event_type_str(type);
      std::vector<std::shared_ptr<VerbsConnection>> broken;
      // The context is librdmacm's, shared by every provider in the process:
      // the object may belong to another provider's core.
      for (auto& core : live_cores()) {
        if (core->context != core_->context) continue;
        if (type == IBV_EVENT_CQ_ERR) {
          if (auto cq = find(core->cqs, core->mutex, token)) broken = cq->users();
        } else if (type == IBV_EVENT_DEVICE_FATAL) {
          std::lock_guard<std::mutex> guard(core->mutex);
          for (auto& [t, weak] : core->connections) {
            if (auto strong = weak.lock()) broken.push_back(std::move(strong));
          }
        } else if (token != 0) {
          if (auto connection = find(core->connections, core->mutex, token)) broken.push_back(std::move(connection));
        }
      }
      for (auto& connection : broken) connection->fail(why);
    }
  }

  void check_deadlines(std::vector<ConnectionEvent>* events) {
    // Collected under the registry lock, examined (and possibly released: the
    // last reference may be ours) outside it.
    std::vector<std::shared_ptr<VerbsConnection>> all;
    {
      std::lock_guard<std::mutex> guard(core_->mutex);
      for (auto it = core_->connections.begin(); it != core_->connections.end();) {
        if (auto strong = it->second.lock()) {
          all.push_back(std::move(strong));
          ++it;
        } else {
          it = core_->connections.erase(it);
        }
      }
    }
    const auto now = Clock::now();
    for (auto& connection : all) {
      if (connection->connecting_actively()) connection->check_deadline(now, events);
    }
  }

  std::shared_ptr<VerbsCore> core_;
  EventSink sink_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex shutdown_mutex_;
  bool shut_ = false;
};

}  // namespace verbs

std::unique_ptr<Provider> create_verbs_provider(EventSink sink, std::string* error) {
  if (!verbs::ensure_fork_safety(error)) return nullptr;
  std::shared_ptr<verbs::VerbsCore> core = verbs::open_core(error);
  if (!core) return nullptr;
  auto provider = std::make_unique<verbs::VerbsProvider>(std::move(core), std::move(sink));
  if (!provider->start(error)) return nullptr;
  return provider;
}

}  // namespace rkv::transport
