// Completion queues: busy polling, and event mode through a completion channel.
//
// Several queue pairs may share one CQ, so poll() maps each completion's
// qp_num to its connection, which turns the wr_id we posted back into the
// caller's and swallows the completions of signals it forced (see
// VerbsConnection::translate).
#include <fcntl.h>

#include <algorithm>
#include <cerrno>

#include "verbs_internal.h"

namespace rkv::transport::verbs {

namespace {
// ibv_ack_cq_events takes a lock inside libibverbs: acknowledge in batches.
constexpr uint32_t kAckBatch = 32;
}  // namespace

std::shared_ptr<VerbsCq> VerbsCq::create(std::shared_ptr<VerbsCore> core, uint32_t depth, std::string* error) {
  if (depth == 0 || depth > static_cast<uint32_t>(core->attr.max_cqe)) {
    *error = "CQ depth must be between 1 and " + std::to_string(core->attr.max_cqe) + " on " + core->name +
             " (got " + std::to_string(depth) + ")";
    return nullptr;
  }
  std::shared_ptr<VerbsCq> cq(new VerbsCq(core, depth));
  cq->channel_ = ibv_create_comp_channel(core->context);
  if (cq->channel_ == nullptr) {
    *error = errno_text("ibv_create_comp_channel", errno);
    return nullptr;
  }
  int flags = fcntl(cq->channel_->fd, F_GETFL);
  if (flags < 0 || fcntl(cq->channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    *error = errno_text("making the completion channel non-blocking", errno);
    return nullptr;
  }
  cq->token_ = core->token();
  cq->cq_ = ibv_create_cq(core->context, static_cast<int>(depth), reinterpret_cast<void*>(cq->token_), cq->channel_, 0);
  if (cq->cq_ == nullptr) {
    *error = errno_text("ibv_create_cq of depth " + std::to_string(depth), errno);
    return nullptr;
  }
  cq->wcs_.resize(std::min<uint32_t>(u32(Limit::MAX_POLL_BATCH), depth));
  std::lock_guard<std::mutex> guard(core->mutex);
  core->cqs[cq->token_] = cq;
  return cq;
}

VerbsCq::~VerbsCq() {
  {
    std::lock_guard<std::mutex> guard(core_->mutex);
    core_->cqs.erase(token_);
  }
  if (cq_ != nullptr) {
    // ibv_destroy_cq waits for every event it reported to be acknowledged.
    if (unacked_ > 0) ibv_ack_cq_events(cq_, unacked_);
    ibv_destroy_cq(cq_);
  }
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
}

void VerbsCq::attach(uint32_t qp_num, VerbsConnection* connection) {
  std::lock_guard<std::mutex> guard(mutex_);
  qps_[qp_num] = connection;
}

void VerbsCq::detach(uint32_t qp_num, VerbsConnection* connection) {
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = qps_.find(qp_num);
  if (it != qps_.end() && it->second == connection) qps_.erase(it);
  if (last_ == connection) {
    last_ = nullptr;
    last_qp_num_ = 0;
  }
}

std::vector<std::shared_ptr<VerbsConnection>> VerbsCq::users() {
  std::vector<std::shared_ptr<VerbsConnection>> out;
  std::lock_guard<std::mutex> guard(mutex_);
  for (auto& [qp_num, connection] : qps_) {
    if (auto strong = connection->weak_from_this().lock()) out.push_back(std::move(strong));
  }
  return out;
}

VerbsConnection* VerbsCq::lookup(uint32_t qp_num) {
  if (last_ != nullptr && last_qp_num_ == qp_num) return last_;
  auto it = qps_.find(qp_num);
  if (it == qps_.end()) return nullptr;
  last_qp_num_ = qp_num;
  last_ = it->second;
  return last_;
}

int VerbsCq::poll(Completion* out, int max) {
  if (max <= 0) return 0;
  int produced = 0;
  // Connections whose first error completion we just saw. They are failed
  // (rdma_disconnect) after the CQ lock is released: a connection's control
  // plane never runs under a CQ lock, and the last reference may drop here.
  std::vector<std::shared_ptr<VerbsConnection>> broken;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    while (produced < max) {
      const int want = std::min<int>(max - produced, static_cast<int>(wcs_.size()));
      const int n = ibv_poll_cq(cq_, want, wcs_.data());
      if (n <= 0) break;
      for (int i = 0; i < n; i++) {
        const ibv_wc& wc = wcs_[i];
        VerbsConnection* connection = lookup(wc.qp_num);
        if (connection == nullptr) continue;  // its connection is gone: nobody to tell
        if (connection->translate(wc, &out[produced])) produced++;
        if (wc.status != IBV_WC_SUCCESS && connection->take_error_trigger()) {
          if (auto strong = connection->weak_from_this().lock()) broken.push_back(std::move(strong));
        }
      }
      if (n < want) break;
    }
  }
  for (auto& connection : broken) connection->fail(connection->first_error());
  return produced;
}

void VerbsCq::arm() { ibv_req_notify_cq(cq_, 0); }

void VerbsCq::ack_event() {
  std::lock_guard<std::mutex> guard(event_mutex_);
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  // The channel fd is non-blocking: this consumes every event that is ready.
  while (ibv_get_cq_event(channel_, &cq, &context) == 0) {
    if (++unacked_ >= kAckBatch) {
      ibv_ack_cq_events(cq_, unacked_);
      unacked_ = 0;
    }
  }
}

}  // namespace rkv::transport::verbs
