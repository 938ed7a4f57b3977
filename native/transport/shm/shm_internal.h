// Internal classes of the shm provider. One mutex per provider (the "NIC
// lock") guards every CQ and queue pair of that provider: posting and polling
// take it once per call, never per work request, and there is no lock order
// to get wrong between send queues, receive queues and CQs.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../transport.h"
#include "shm_ring.h"
#include "shm_wire.h"

namespace rkv::transport::shm {

class ShmProvider;
class ShmConnection;
using Clock = std::chrono::steady_clock;

class ShmMr final : public MemoryRegion {
 public:
  ShmMr(ShmProvider* provider, Memory& memory, size_t offset, size_t length, uint32_t access, uint32_t key);
  ~ShmMr() override;
  int fd() const { return fd_; }
  uint64_t fd_offset() const { return fd_offset_; }
  bool remote() const;

 private:
  ShmProvider* provider_;
  int fd_;
  uint64_t fd_offset_;
};

// A peer's MR as mapped into this process.
struct RemoteMr {
  uint32_t rkey = 0;
  uint32_t access = 0;
  uint64_t addr = 0;     // the peer's address of the first byte
  uint64_t length = 0;
  uint8_t* base = nullptr;  // our mapping of the first byte
  void* map = nullptr;
  size_t map_length = 0;
  bool valid = false;
  uint32_t window_slot = 0;  // a memory window of this connection (see MrAnnouncement)
};

// A memory window (transport.h): a key of its own, announced on one
// connection only, whose state the peer reads in the shared connection area.
class ShmWindow final : public Window {
 public:
  ShmWindow(ShmProvider* provider, std::weak_ptr<ShmConnection> connection, std::shared_ptr<MemoryRegion> region,
            uint32_t slot, uint32_t rkey, uint64_t addr, uint64_t length, uint32_t access);
  ~ShmWindow() override;  // a window nobody holds is not left bound
  void invalidate() override;
  bool valid() const override;
  // Under the provider lock.
  void invalidate_locked();
  uint32_t slot() const { return slot_; }

 private:
  ShmProvider* provider_;
  std::weak_ptr<ShmConnection> connection_;
  std::shared_ptr<MemoryRegion> region_;  // as a NIC's MR, held while bound
  uint32_t slot_;
  bool valid_ = true;  // under the provider lock
};

class ShmCq final : public CompletionQueue {
 public:
  ShmCq(ShmProvider* provider, uint32_t depth, int event_fd);
  ~ShmCq() override;
  int poll(Completion* out, int max) override;
  void arm() override;
  void disarm() override;
  int event_fd() const override { return event_fd_; }
  void ack_event() override;
  uint32_t depth() const override { return depth_; }

  // Under the provider lock.
  bool push(const Completion& c);  // false: overrun
  uint32_t free_slots() const { return depth_ - count_; }
  void signal_if_armed();
  void signal();
  void attach(const std::shared_ptr<ShmConnection>& c) { connections_.push_back(c); }
  bool armed() const { return armed_; }

 private:
  ShmProvider* provider_;
  uint32_t depth_;
  int event_fd_;
  std::vector<Completion> ring_;
  uint32_t head_ = 0, count_ = 0;
  bool armed_ = false;
  std::vector<std::weak_ptr<ShmConnection>> connections_;  // whose queues this CQ serves
};

class ShmConnection final : public Connection, public std::enable_shared_from_this<ShmConnection> {
 public:
  ShmConnection(ShmProvider* provider, int socket, int side, uint32_t qp_num);
  ~ShmConnection() override;

  bool accept(const QueuePairOptions& options, const std::vector<uint8_t>& private_data, std::string* error) override;
  void reject(const std::vector<uint8_t>& private_data) override;
  int post_send(const WorkRequest* wrs, size_t count, size_t* bad) override;
  int post_recv(const RecvRequest* rrs, size_t count, size_t* bad) override;
  void disconnect() override;
  bool fence_complete() override;
  std::shared_ptr<Window> bind_window(const std::shared_ptr<MemoryRegion>& region, uint64_t addr, uint64_t length,
                                      uint32_t access, std::string* error) override;
  ConnState state() const override { return state_.load(std::memory_order_acquire); }
  uint32_t qp_num() const override { return qp_num_; }
  uint32_t max_inline() const override { return u32(Limit::SHM_MAX_INLINE); }
  const std::vector<uint8_t>& peer_private_data() const override { return peer_private_; }
  std::string peer_address() const override { return peer_address_; }
  std::string first_error() const override;
  const std::string& error_locked() const { return first_error_; }

  // Under the provider lock, from the provider and the CQs.
  bool setup_queues(const QueuePairOptions& options, std::string* error);
  bool attach_shared(int conn_fd, std::string* error);
  void set_peer_wake(std::vector<int>& fds, size_t first);
  void handle_message(Message& message, std::vector<ConnectionEvent>* events);
  bool drain_socket(std::vector<ConnectionEvent>* events);  // false: the peer is gone
  void fail(const std::string& why, bool tell_peer);  // to ERROR: flush later, wake CQs
  void drain_inbound(ShmCq* cq);   // turn the peer's records into RECV completions
  void progress_sends(ShmCq* cq);  // retry sends that waited for ring room
  void flush(ShmCq* cq);           // WR_FLUSH_ERR for everything outstanding
  bool has_flushable() const { return recv_count_ > 0 || pending_count_ > 0; }
  bool arm_inbound();  // ask the peer for a wake-up; true when records already wait
  int post_recv_locked(const RecvRequest* rrs, size_t count, size_t* bad);
  void close_socket();
  void release_resources();  // unmap the rings and peer regions, close the wake fds
  int socket() const { return socket_; }
  int side() const { return side_; }
  ShmCq* send_cq() const { return send_cq_.get(); }
  ShmCq* recv_cq() const { return recv_cq_.get(); }
  bool announce_mr(const ShmMr& mr);
  // A window of ours ends: its slot cleared (the peer refuses it from its next
  // request on) and the peer told to forget it. Under the provider lock.
  void drop_window(uint32_t slot, uint32_t rkey);
  void set_state(ConnState s) { state_.store(s, std::memory_order_release); }
  void set_peer_private(const uint8_t* data, uint32_t len) { peer_private_.assign(data, data + len); }
  Clock::time_point deadline{};  // active side: when CONNECTING gives up
  bool listener_owned = false;   // passive side before accept/reject

 private:
  struct PendingSend {
    WorkRequest wr;
    bool is_inline;
    uint8_t inline_data[u32(Limit::SHM_MAX_INLINE)];
  };
  // Executes one work request now. Returns false when it must wait for room in
  // the ring (only SEND and WRITE_WITH_IMM can).
  bool execute(const WorkRequest& wr, const uint8_t* inline_data);
  void complete_send(const WorkRequest& wr, WcStatus status, uint32_t byte_len);
  void error_completion(const WorkRequest& wr, WcStatus status, const std::string& why);
  const RemoteMr* find_remote(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need, WcStatus* status);
  void prefetch_source(const WorkRequest& wr) const;
  bool local_ok(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need);
  bool ring_room(uint32_t size) const;
  void notify_peer_data();
  void wake_peer(int fd);
  bool peer_closed() const;
  bool peer_exited() const;
  // Marks this side as executing against the peer's memory for one scope.
  class Executing;

  ShmProvider* provider_;
  int socket_;
  int side_;
  uint32_t qp_num_;
  std::atomic<ConnState> state_{ConnState::CONNECTING};
  std::vector<uint8_t> peer_private_;
  std::string peer_address_;
  std::string first_error_;
  std::shared_ptr<ShmCq> send_cq_, recv_cq_;

  ConnShared* shared_ = nullptr;
  // The connection area kept mapped after the queues are released, until the
  // fence is known complete (the peer's executing flag must stay readable).
  ConnShared* fence_area_ = nullptr;
  bool fenced_ = false;  // sticky: fence_complete() has said true
  int peer_pid_ = 0;     // from SO_PEERCRED; 0 when not visible (another pid namespace)
  int peer_pidfd_ = -1;  // readable once the peer process has exited
  RingControl* out_control_ = nullptr;
  uint8_t* out_data_ = nullptr;
  RingControl* in_control_ = nullptr;
  uint8_t* in_data_ = nullptr;
  int peer_wake_recv_ = -1, peer_wake_send_ = -1;

  std::vector<RecvRequest> recvs_;  // fixed ring of posted receives
  uint32_t recv_head_ = 0, recv_count_ = 0;
  std::vector<PendingSend> pending_;  // fixed ring of sends waiting for room
  uint32_t pending_head_ = 0, pending_count_ = 0;
  bool test_held_ = false;  // the provider's hold hook took this connection: its sends stay pending until it closes
  Clock::time_point pending_since_{};
  std::vector<RemoteMr> remote_mrs_;
  std::vector<std::weak_ptr<ShmWindow>> windows_;  // ours, by slot; invalidated when the connection breaks
};

class ShmListener final : public Listener {
 public:
  ShmListener(ShmProvider* provider, int fd, std::string path) : provider_(provider), fd_(fd), path_(std::move(path)) {}
  ~ShmListener() override { close(); }
  std::string url() const override { return "shm://" + path_; }
  void close() override;
  void close_locked();
  int fd() const { return fd_; }

 private:
  ShmProvider* provider_;
  int fd_;
  std::string path_;
};

class ShmProvider final : public Provider {
 public:
  explicit ShmProvider(EventSink sink);
  ~ShmProvider() override;
  bool start(std::string* error);

  const char* scheme() const override { return "shm"; }
  DeviceInfo device_info() const override;
  std::unique_ptr<MemoryRegion> register_memory(Memory& memory, size_t offset, size_t length, uint32_t access,
                                                std::string* error) override;
  std::shared_ptr<CompletionQueue> create_cq(uint32_t depth, std::string* error) override;
  std::shared_ptr<Listener> listen(const std::string& url, std::string* error) override;
  std::shared_ptr<Connection> connect(const std::string& url, const QueuePairOptions& options,
                                      const std::vector<uint8_t>& private_data, uint32_t timeout_ms,
                                      std::string* error) override;
  void shutdown() override;

  std::mutex& lock() { return mutex_; }
  // Under the lock.
  ShmMr* find_local(uint32_t lkey) const;
  bool announce_all(ShmConnection* connection);  // every MR open to remote access
  void forget_mr(ShmMr* mr);
  void forget_listener(ShmListener* listener);
  void forget_connection(ShmConnection* connection);
  void watch(int fd);
  void unwatch(int fd);
  uint32_t next_qp_num() { return ++qp_counter_; }
  uint32_t next_key();  // a key no registration of ours has
  bool windows_off() const { return windows_off_; }
  // Test hook (RKV_SHM_TEST_STOP_BEFORE=OPCODE:LENGTH, e.g. WRITE:8): the first
  // matching request stops this process with SIGSTOP after the fence check and
  // before it executes, so a test can fence a writer caught exactly there.
  bool test_stop_before(const WorkRequest& wr);
  // Test hook (RKV_SHM_TEST_HOLD_FILE=PATH): while PATH holds a process id, the
  // requests posted to a connection with that peer are never executed nor
  // completed (until the connection closes: then they flush), as a NIC's to a
  // host that stopped answering; so a test can keep an op's round trip in flight.
  bool test_holds(int peer_pid) const;
  void emit(std::vector<ConnectionEvent>& events);  // outside the lock

 private:
  void run();
  void on_listener_ready(ShmListener* listener, std::vector<ConnectionEvent>* events);
  void check_deadlines(std::vector<ConnectionEvent>* events);

  EventSink sink_;
  std::mutex mutex_;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
  bool stopped_ = false;
  uint32_t key_counter_;
  uint32_t qp_counter_ = 0;
  int test_stop_opcode_ = -1;  // -1: the test hook is off
  bool windows_off_ = false;   // RKV_NO_MEMORY_WINDOWS=1: behave as a device without windows
  uint32_t max_cqe_ = 1u << 20;  // create_cq's limit (RKV_SHM_TEST_MAX_CQE lowers it)
  uint32_t test_stop_length_ = 0;
  std::string test_hold_file_;  // empty: the hold hook is off
  std::unordered_map<uint32_t, ShmMr*> mrs_;
  // find_local's last answers, by the key's low bits: a post names the same few registrations
  // (scratch, item buffers) request after request, and the map's find was ~1.5 % of a sequential
  // PUT on shm. Guarded by mutex_ as mrs_ is; forget_mr drops the MR it removes.
  static constexpr uint32_t kRecentMrs = 4;
  mutable std::array<ShmMr*, kRecentMrs> recent_mrs_{};
  std::unordered_map<int, ShmListener*> listeners_;
  std::unordered_map<int, std::shared_ptr<ShmConnection>> connections_;  // by socket
  // Connections dropped under the lock, released outside it.
  std::vector<std::shared_ptr<ShmConnection>> graveyard_;
};

}  // namespace rkv::transport::shm
