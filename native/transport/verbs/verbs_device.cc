// The device side of the verbs provider: fork safety, choosing the device, the
// protection domain and event channel, the probes (inline size, atomic byte
// order) and memory regions.
#include <fcntl.h>
#include <unistd.h>

#include <byteswap.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "verbs_internal.h"

namespace rkv::transport::verbs {

namespace {

// Holds librdmacm's device list (and so its reference on every context) for
// the life of the core.
struct DeviceList {
  ibv_context** list = nullptr;
  ~DeviceList() {
    if (list != nullptr) rdma_free_devices(list);
  }
};

int first_active_port(ibv_context* context, ibv_port_attr* out) {
  ibv_device_attr attr{};
  if (ibv_query_device(context, &attr) != 0) return 0;
  for (uint8_t port = 1; port <= attr.phys_port_cnt; port++) {
    ibv_port_attr p{};
    if (ibv_query_port(context, port, &p) == 0 && p.state == IBV_PORT_ACTIVE) {
      if (out != nullptr) *out = p;
      return port;
    }
  }
  return 0;
}

// A small CQ + RC QP on the core's PD, torn down in reverse order.
struct ProbeQp {
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ~ProbeQp() {
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (cq != nullptr) ibv_destroy_cq(cq);
  }
};

bool create_probe_qp(VerbsCore& core, uint32_t max_inline, ProbeQp* probe, uint32_t* got_inline) {
  if (probe->cq == nullptr) probe->cq = ibv_create_cq(core.context, 8, nullptr, nullptr, 0);
  if (probe->cq == nullptr) return false;
  ibv_qp_init_attr attr{};
  attr.send_cq = probe->cq;
  attr.recv_cq = probe->cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = u32(Limit::DEFAULT_QUEUE_DEPTH);
  attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = max_inline;
  probe->qp = ibv_create_qp(core.pd, &attr);
  if (probe->qp == nullptr) return false;
  if (got_inline != nullptr) *got_inline = attr.cap.max_inline_data;
  return true;
}

// The device does not report its inline limit: ask for sizes until a QP with
// the default send depth is granted one (binary search, a dozen tiny QPs).
uint32_t probe_max_inline(VerbsCore& core) {
  uint32_t low = 0, high = 4096, best = 0;
  while (low <= high) {
    uint32_t mid = low + (high - low) / 2;
    ProbeQp probe;
    uint32_t got = 0;
    if (create_probe_qp(core, mid, &probe, &got)) {
      best = got > mid ? got : mid;
      low = mid + 1;
    } else {
      if (mid == 0) break;
      high = mid - 1;
    }
  }
  return best;
}

bool pick_gid(ibv_context* context, uint8_t port, const ibv_port_attr& port_attr, ibv_gid* gid, uint8_t* index) {
  if (port_attr.link_layer != IBV_LINK_LAYER_ETHERNET) {  // IB: the LID routes, GID 0 is the port GID
    *index = 0;
    return ibv_query_gid(context, port, 0, gid) == 0;
  }
  // RoCE: prefer a RoCE v2 GID that is an IPv4-mapped address, then any v2, then any.
  int best = -1, best_rank = -1;
  for (int i = 0; i < port_attr.gid_tbl_len && i < 256; i++) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(context, port, i, &entry, 0) != 0) continue;
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    bool v4 = std::memcmp(entry.gid.raw, v4_prefix, sizeof v4_prefix) == 0;
    int rank = entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? (v4 ? 3 : 2) : 1;
    if (rank > best_rank) {
      best = i;
      best_rank = rank;
      *gid = entry.gid;
    }
  }
  if (best < 0) return false;
  *index = static_cast<uint8_t>(best);
  return true;
}

bool poll_one(ibv_cq* cq, ibv_wc* wc) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);  // emulated NICs are slow
  while (Clock::now() < deadline) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) return false;
    if (n == 1) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return false;
}

// Connects an RC QP to itself and runs FETCH_AND_ADD then CMP_AND_SWP on a
// word whose bytes all differ, so host order and swapped results cannot be
// confused. Sets *swapped from what the HCA wrote back, and *memory_ok when
// the word in memory changed as a host-order integer would.
bool probe_atomics(VerbsCore& core, bool* swapped, bool* memory_ok, std::string* why) {
  ibv_port_attr port_attr{};
  uint8_t port = static_cast<uint8_t>(first_active_port(core.context, &port_attr));
  if (port == 0) {
    *why = "no active port";
    return false;
  }
  ibv_gid gid{};
  uint8_t gid_index = 0;
  if (!pick_gid(core.context, port, port_attr, &gid, &gid_index)) {
    *why = "no usable GID on port " + std::to_string(port);
    return false;
  }
  void* page = nullptr;
  if (posix_memalign(&page, 4096, 4096) != 0) {
    *why = "out of memory";
    return false;
  }
  std::unique_ptr<void, void (*)(void*)> page_owner(page, std::free);
  auto* words = static_cast<volatile uint64_t*>(page);
  const uint64_t initial = 0x0102030405060708ull, swap_value = 0x1112131415161718ull;
  words[0] = initial;
  words[1] = 0;
  ibv_mr* mr = ibv_reg_mr(core.pd, page, 4096,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_WRITE);
  if (mr == nullptr) {
    *why = errno_text("ibv_reg_mr", errno);
    return false;
  }
  std::unique_ptr<ibv_mr, int (*)(ibv_mr*)> mr_owner(mr, ibv_dereg_mr);
  ProbeQp probe;  // destroyed before the MR (declared after it)
  if (!create_probe_qp(core, 0, &probe, nullptr)) {
    *why = errno_text("ibv_create_qp", errno);
    return false;
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(probe.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    *why = "modify to INIT failed";
    return false;
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = port_attr.active_mtu;
  a.dest_qp_num = probe.qp->qp_num;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = port;
  a.ah_attr.dlid = port_attr.lid;
  if (port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.sgid_index = gid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  if (ibv_modify_qp(probe.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    *why = "modify to RTR failed";
    return false;
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 3;
  a.rnr_retry = 3;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(probe.qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    *why = "modify to RTS failed";
    return false;
  }
  auto run = [&](ibv_wr_opcode opcode, uint64_t compare_add, uint64_t swap, uint64_t* result) -> bool {
    words[1] = 0;
    ibv_sge sge{reinterpret_cast<uint64_t>(page) + 8, 8, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(page);
    wr.wr.atomic.rkey = mr->rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    ibv_wc wc{};
    if (ibv_post_send(probe.qp, &wr, &bad) != 0 || !poll_one(probe.cq, &wc)) {
      *why = "the loopback atomic did not complete";
      return false;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      *why = std::string("the loopback atomic failed: ") + ibv_wc_status_str(wc.status);
      return false;
    }
    *result = words[1];
    return true;
  };
  uint64_t old_faa = 0, old_cas = 0;
  if (!run(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, &old_faa)) return false;
  const uint64_t after_faa = words[0];
  if (!run(IBV_WR_ATOMIC_CMP_AND_SWP, initial + 1, swap_value, &old_cas)) return false;
  const uint64_t after_cas = words[0];
  if (old_faa == initial && old_cas == initial + 1) {
    *swapped = false;
  } else if (old_faa == bswap_64(initial) && old_cas == bswap_64(initial + 1)) {
    *swapped = true;
  } else {
    char text[160];
    std::snprintf(text, sizeof text, "unexpected results: FAA returned 0x%016llx, CAS returned 0x%016llx",
                  static_cast<unsigned long long>(old_faa), static_cast<unsigned long long>(old_cas));
    *why = text;
    return false;
  }
  *memory_ok = after_faa == initial + 1 && after_cas == swap_value;
  return true;
}

// Type 2 memory windows (bound per queue pair with IBV_WR_BIND_MW): found by
// allocating one, since a device may list the capability and still refuse
// (or work without listing it). RKV_NO_MEMORY_WINDOWS=1 turns them off.
void probe_windows(VerbsCore& core) {
  const char* off = std::getenv("RKV_NO_MEMORY_WINDOWS");
  if (off != nullptr && std::strcmp(off, "1") == 0) {
    core.memory_windows_note = "RKV_NO_MEMORY_WINDOWS=1";
    return;
  }
  const bool listed =
      (core.attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  ibv_mw* mw = ibv_alloc_mw(core.pd, IBV_MW_TYPE_2);
  if (mw == nullptr) {
    core.memory_windows_note = errno_text("ibv_alloc_mw(IBV_MW_TYPE_2)", errno) +
                               (listed ? "" : " (device_cap_flags lists no type 2 windows)");
    return;
  }
  ibv_dealloc_mw(mw);
  core.memory_windows = true;
  core.memory_windows_note = std::string("type 2 windows (ibv_alloc_mw works") +
                             (listed ? ", device_cap_flags lists type 2A/2B)" : "; device_cap_flags does not list them)");
}

std::mutex cores_mutex;
std::vector<std::weak_ptr<VerbsCore>> cores;

}  // namespace

uint64_t VerbsCore::token() {
  static std::atomic<uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::vector<std::shared_ptr<VerbsCore>> live_cores() {
  std::vector<std::shared_ptr<VerbsCore>> out;
  std::lock_guard<std::mutex> guard(cores_mutex);
  for (auto& weak : cores) {
    if (auto strong = weak.lock()) out.push_back(std::move(strong));
  }
  return out;
}

bool VerbsCore::writable_locally(uint32_t lkey, uint64_t addr, uint64_t length) {
  auto it = mrs.find(lkey);
  if (it == mrs.end() || (it->second.access & IBV_ACCESS_LOCAL_WRITE) == 0) return false;
  const MrRange& r = it->second;
  return addr >= r.addr && length <= r.length && addr - r.addr <= r.length - length;
}

const char* VerbsCore::atomic_cap_name() const {
  if (!atomics_usable) return "NONE";
  return attr.atomic_cap == IBV_ATOMIC_GLOB ? "GLOB" : "HCA";
}

VerbsCore::~VerbsCore() {
  // Every MR, CQ, QP and cm id of this core is gone (each held a reference).
  if (pd != nullptr) ibv_dealloc_pd(pd);
  if (channel != nullptr) rdma_destroy_event_channel(channel);
  delete static_cast<DeviceList*>(device_list);
}

std::shared_ptr<VerbsCore> open_core(std::string* error) {
  auto core = std::make_shared<VerbsCore>();
  // Read first: a bad value refuses the provider before any device is opened.
  if (const char* ack = std::getenv("RKV_RDMA_ACK_TIMEOUT"); ack != nullptr && *ack != '\0') {
    char* end = nullptr;
    long value = std::strtol(ack, &end, 10);
    if (*end != '\0' || value < 1 || value > 31) {
      *error = std::string("RKV_RDMA_ACK_TIMEOUT=") + ack +
               ": expected an exponent from 1 to 31 (the local ACK timeout is 4.096 us x 2^n; 20 is about 4.3 s)";
      return nullptr;
    }
    core->ack_timeout = static_cast<int>(value);
  }
  auto* devices = new DeviceList();
  core->device_list = devices;
  int count = 0;
  devices->list = rdma_get_devices(&count);
  if (devices->list == nullptr || count == 0) {
    *error = "no RDMA device found: load a NIC driver or Soft-RoCE (rdma link add rxe0 type rxe netdev eth0); "
             "ibv_devices lists what libibverbs sees";
    return nullptr;
  }
  const char* wanted = std::getenv("RKV_RDMA_DEVICE");
  std::string names;
  for (int i = 0; i < count; i++) {
    std::string name = ibv_get_device_name(devices->list[i]->device);
    names += (names.empty() ? "" : ", ") + name;
    if (wanted != nullptr && *wanted != '\0') {
      if (name == wanted) core->context = devices->list[i];
    } else if (core->context == nullptr && first_active_port(devices->list[i], nullptr) != 0) {
      core->context = devices->list[i];
    }
  }
  if (core->context == nullptr) {
    if (wanted != nullptr && *wanted != '\0') {
      *error = std::string("RKV_RDMA_DEVICE=") + wanted + ": no such RDMA device (found: " + names + ")";
      return nullptr;
    }
    core->context = devices->list[0];  // none active yet: the first, its port may come up
  }
  core->name = ibv_get_device_name(core->context->device);
  if (int rc = ibv_query_device(core->context, &core->attr); rc != 0) {
    *error = errno_text("ibv_query_device on " + core->name, rc);
    return nullptr;
  }
  core->rxe = core->attr.vendor_id == 0xffffff && core->attr.vendor_part_id == 0;  // RXE_VENDOR_ID
  const char* rxe_fence = std::getenv("RKV_VERBS_RXE_FENCE");
  core->post_fences = !core->rxe || (rxe_fence != nullptr && std::strcmp(rxe_fence, "1") == 0);
  core->pd = ibv_alloc_pd(core->context);
  if (core->pd == nullptr) {
    *error = errno_text("ibv_alloc_pd on " + core->name, errno);
    return nullptr;
  }
  core->channel = rdma_create_event_channel();
  if (core->channel == nullptr) {
    *error = errno_text("rdma_create_event_channel (is the rdma_ucm module loaded?)", errno);
    return nullptr;
  }
  for (int fd : {core->channel->fd, core->context->async_fd}) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      *error = errno_text("making the rdma_cm/async fd non-blocking", errno);
      return nullptr;
    }
  }

  core->max_inline = probe_max_inline(*core);
  probe_windows(*core);

  const char* order = std::getenv("RKV_VERBS_ATOMIC_ORDER");  // "host" or "swapped": skip the probe
  if (order != nullptr && (std::strcmp(order, "host") == 0 || std::strcmp(order, "swapped") == 0) &&
      core->attr.atomic_cap != IBV_ATOMIC_NONE) {
    core->atomics_usable = true;
    core->atomic_reply_swapped = std::strcmp(order, "swapped") == 0;
    core->atomic_probe = std::string("RKV_VERBS_ATOMIC_ORDER=") + order + " (not probed)";
  } else if (core->attr.atomic_cap == IBV_ATOMIC_NONE) {
    core->atomics_usable = false;
    core->atomic_probe = "the device reports atomic_cap NONE";
  } else {
    bool swapped = false, memory_ok = false;
    std::string why;
    if (probe_atomics(*core, &swapped, &memory_ok, &why)) {
      core->atomic_reply_swapped = swapped;
      core->atomics_usable = memory_ok;
      core->atomic_probe = std::string("loopback probe: results in ") + (swapped ? "swapped" : "host") +
                           " byte order" + (memory_ok ? "" : "; the word in memory did not change as a host-order "
                                                              "integer, so atomics are disabled");
    } else {
      // No loopback (no active port yet, ...): fall back on what is known of
      // the hardware. ConnectX-3 (mlx4) returns atomic results big-endian.
      core->atomics_usable = true;
      core->atomic_reply_swapped = core->name.compare(0, 4, "mlx4") == 0;
      core->atomic_probe = "no probe (" + why + "): assumed " +
                           (core->atomic_reply_swapped ? "big-endian (mlx4)" : "host byte order");
    }
  }
  {
    std::lock_guard<std::mutex> guard(cores_mutex);
    cores.erase(std::remove_if(cores.begin(), cores.end(), [](auto& weak) { return weak.expired(); }), cores.end());
    cores.push_back(core);
  }
  const char* trace = std::getenv("RKV_VERBS_TRACE");
  core->trace = trace != nullptr && *trace == '1';
  if (core->trace) {
    trace_line("device %s, max_qp_rd_atom %d, max_qp_init_rd_atom %d, atomic_cap %s, max_inline %u, %s; windows: %s; "
               "local ACK timeout exponent %d (-1: rdma_cm's); fences %s",
               core->name.c_str(), core->attr.max_qp_rd_atom, core->attr.max_qp_init_rd_atom,
               core->atomic_cap_name(), core->max_inline, core->atomic_probe.c_str(),
               core->memory_windows_note.c_str(), core->ack_timeout,
               core->post_fences ? "posted" : "not posted (rxe orders without them)");
  }
  return core;
}

void trace_line(const char* format, ...) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  // One write per line: lines of several threads and processes do not interleave.
  std::fprintf(stderr, "rdma-kv verbs [%d @ %lld.%06ld]: %s\n", static_cast<int>(getpid()),
               static_cast<long long>(now.tv_sec), now.tv_nsec / 1000, text);
}

// ---- memory regions ---------------------------------------------------------------------

VerbsMr::VerbsMr(std::shared_ptr<VerbsCore> core, ibv_mr* mr, uint8_t* addr, size_t length, uint32_t access)
    : core_(std::move(core)), mr_(mr) {
  addr_ = addr;
  length_ = length;
  lkey_ = mr->lkey;
  rkey_ = mr->rkey;
  access_ = access;
  std::lock_guard<std::mutex> guard(core_->mutex);
  core_->mrs[lkey_] = {reinterpret_cast<uint64_t>(addr), length, access};
}

VerbsMr::~VerbsMr() {
  {
    std::lock_guard<std::mutex> guard(core_->mutex);
    core_->mrs.erase(lkey_);
  }
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
}

}  // namespace rkv::transport::verbs

namespace rkv::transport::verbs {

// ---- memory windows ---------------------------------------------------------------------

VerbsWindow::VerbsWindow(ibv_mw* mw, std::shared_ptr<MemoryRegion> region, uint32_t rkey, uint64_t addr,
                         uint64_t length, uint32_t access)
    : mw_(mw), region_(std::move(region)) {
  rkey_ = rkey;
  addr_ = addr;
  length_ = length;
  access_ = access;
}

void VerbsWindow::invalidate() {
  std::shared_ptr<MemoryRegion> region;  // released after the lock: the MR may go with it
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (mw_ == nullptr) return;
    // Unbinds and frees at once: the device refuses the rkey from here on,
    // whatever state the queue pair is in.
    ibv_dealloc_mw(mw_);
    mw_ = nullptr;
    region = std::move(region_);
  }
}

bool VerbsWindow::valid() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return mw_ != nullptr;
}

}  // namespace rkv::transport::verbs
