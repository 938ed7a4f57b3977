// Posting helpers (posting.h): building the core's work requests and posting
// them with one doorbell.
#include "posting.h"

#include <cerrno>

namespace rkv::kv {

using transport::WorkRequest;

void SendList::attach(uint8_t* scratch, uint32_t lkey, uint32_t rkey, uint32_t max_inline, size_t capacity) {
  scratch_ = scratch;
  lkey_ = lkey;
  rkey_ = rkey;
  max_inline_ = max_inline;
  wrs_.reserve(capacity);
}

WorkRequest& SendList::add(uint64_t wr_id, Opcode opcode, uint64_t local, uint32_t length, uint64_t remote) {
  WorkRequest& wr = wrs_.emplace_back();
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.local_addr = reinterpret_cast<uint64_t>(scratch_ + local);
  wr.length = length;
  wr.lkey = lkey_;
  wr.remote_addr = remote;
  wr.rkey = rkey_;
  return wr;
}

void SendList::read(uint64_t wr_id, uint64_t local, uint32_t length, uint64_t remote, bool fence) {
  add(wr_id, Opcode::READ, local, length, remote).send_flags = fence ? u32(SendFlag::FENCE) : 0;
}

void SendList::write(uint64_t wr_id, uint64_t local, uint32_t length, uint64_t remote) {
  add(wr_id, Opcode::WRITE, local, length, remote).send_flags = length <= max_inline_ ? u32(SendFlag::INLINE) : 0;
}

void SendList::read_into(uint64_t wr_id, uint8_t* local, uint32_t lkey, uint32_t length, uint64_t remote) {
  WorkRequest& wr = add(wr_id, Opcode::READ, 0, length, remote);
  wr.local_addr = reinterpret_cast<uint64_t>(local);
  wr.lkey = lkey;
  wr.send_flags = 0;
}

void SendList::write_from(uint64_t wr_id, const uint8_t* local, uint32_t lkey, uint32_t length, uint64_t remote) {
  WorkRequest& wr = add(wr_id, Opcode::WRITE, 0, length, remote);
  wr.local_addr = reinterpret_cast<uint64_t>(local);
  wr.lkey = lkey;
  wr.send_flags = length <= max_inline_ ? u32(SendFlag::INLINE) : 0;
}

void SendList::write_imm(uint64_t wr_id, uint64_t local, uint32_t length, uint64_t remote, uint32_t imm) {
  write(wr_id, local, length, remote);
  wrs_.back().opcode = Opcode::WRITE_WITH_IMM;
  wrs_.back().imm = imm;
}

void SendList::cas(uint64_t wr_id, uint64_t result, uint64_t remote, uint64_t expect, uint64_t swap) {
  WorkRequest& wr = add(wr_id, Opcode::CMP_AND_SWP, result, 8, remote);
  wr.compare_add = expect;
  wr.swap = swap;
}

void SendList::faa(uint64_t wr_id, uint64_t result, uint64_t remote, uint64_t add_value) {
  add(wr_id, Opcode::FETCH_AND_ADD, result, 8, remote).compare_add = add_value;
}

void SendList::signal_last() {
  WorkRequest& wr = wrs_.back();
  wr.send_flags |= u32(SendFlag::SIGNALED);
  wr.wr_id |= wr_tag::kSignaled;
}

int SendList::flush(transport::Connection& connection) {
  if (wrs_.empty()) return 0;
  size_t bad = 0;
  const int rc = connection.post_send(wrs_.data(), wrs_.size(), &bad);
  doorbells_++;
  const size_t posted = rc == 0 ? wrs_.size() : bad;
  for (size_t i = 0; i < posted; i++) outstanding_ += (wrs_[i].wr_id & wr_tag::kSignaled) != 0;
  if (posted > 0) unsignaled_tail_ = (wrs_[posted - 1].wr_id & wr_tag::kSignaled) == 0;
  if (rc == ENOMEM) {
    wrs_.erase(wrs_.begin(), wrs_.begin() + static_cast<long>(bad));  // the rest go next pass
  } else {
    wrs_.clear();
  }
  return rc;
}

}  // namespace rkv::kv
