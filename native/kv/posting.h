// Posting helpers: the send list one pass of the client core fills and posts
// with one doorbell (flush), whatever the number of ops it advanced.
//
// Requests name the core's scratch by offset (the list adds the base and the
// lkey) and the server's region by address (the list adds its rkey). A
// phase's requests are added together and only the last is signaled: on one
// RC connection its completion implies every earlier one (eRPC's selective
// signaling). The list counts the signaled requests posted and not yet
// completed, so close() knows when the provider and the NIC are done with
// scratch.
//
// Ownership: the list's storage is reserved once for the most requests the
// core can have unposted (every op's largest phase), so adding never
// allocates. The core owns the list; the requests own nothing.
#pragma once

#include <vector>

#include "../transport/transport.h"
#include "layout.h"

namespace rkv::kv {

// wr_id of the core's requests: [connection:8 | signaled:1 | op:8 | phase
// seq:8]: a completion finds its connection's send list, and its op. JS's
// control requests carry kControlTag (client_core.h) instead.
namespace wr_tag {
constexpr uint64_t kSignaled = 1ull << 16;
constexpr uint32_t kConnectionShift = 17;
constexpr uint32_t kNoOp = 0xff;  // the drain marker close() posts: no op's
inline uint64_t make(uint32_t connection, uint32_t op, uint8_t seq) {
  return static_cast<uint64_t>(connection) << kConnectionShift | static_cast<uint64_t>(op) << 8 | seq;
}
inline uint32_t connection(uint64_t wr_id) { return static_cast<uint32_t>(wr_id >> kConnectionShift) & 0xff; }
inline uint32_t op(uint64_t wr_id) { return static_cast<uint32_t>(wr_id >> 8) & 0xff; }
inline uint8_t seq(uint64_t wr_id) { return static_cast<uint8_t>(wr_id); }
}  // namespace wr_tag
static_assert(u32(KvLayout::MAX_CORE_CONNECTIONS) <= 0xff);
static_assert(wr_tag::kConnectionShift + 8 < u32(KvLayout::CONTROL_TAG_SHIFT));

class SendList {
 public:
  // At most `capacity` requests are ever unposted at once.
  void attach(uint8_t* scratch, uint32_t lkey, uint32_t rkey, uint32_t max_inline, size_t capacity);

  void read(uint64_t wr_id, uint64_t local, uint32_t length, uint64_t remote, bool fence = false);
  void write(uint64_t wr_id, uint64_t local, uint32_t length, uint64_t remote);
  // READ into / WRITE from memory outside scratch, registered with `lkey` (a caller's buffer).
  void read_into(uint64_t wr_id, uint8_t* local, uint32_t lkey, uint32_t length, uint64_t remote);
  void write_from(uint64_t wr_id, const uint8_t* local, uint32_t lkey, uint32_t length, uint64_t remote);
  void write_imm(uint64_t wr_id, uint64_t local, uint32_t length, uint64_t remote, uint32_t imm);
  void cas(uint64_t wr_id, uint64_t result, uint64_t remote, uint64_t expect, uint64_t swap);
  void faa(uint64_t wr_id, uint64_t result, uint64_t remote, uint64_t add);
  // The last request added waits for earlier READs and atomics (FENCE).
  void fence_last() { wrs_.back().send_flags |= u32(SendFlag::FENCE); }
  // Ends a phase: its last request is signaled and tagged so.
  void signal_last();

  size_t size() const { return wrs_.size(); }
  bool empty() const { return wrs_.empty(); }

  // Posts the list with one doorbell. 0: all posted; ENOMEM: the send queue
  // is full, the rest stays for the next flush; another errno: the
  // connection refused them, and the list is empty.
  int flush(transport::Connection& connection);
  // Forgets requests never posted (their ops were failed).
  void drop() { wrs_.clear(); }
  // A completion of one of the list's requests (signaled, or an error).
  void completed(uint64_t wr_id) {
    if ((wr_id & wr_tag::kSignaled) != 0) outstanding_--;
  }

  // Signaled requests posted whose completion has not been polled.
  uint64_t outstanding() const { return outstanding_; }
  // The last request posted was not signaled: a flush cut a phase short
  // (ENOMEM) and its end was never posted, so no completion will say when
  // the requests before it are done.
  bool unsignaled_tail() const { return unsignaled_tail_; }
  // post_send calls so far: one per pass (and connection), whatever the batch's size.
  uint64_t doorbells() const { return doorbells_; }

 private:
  transport::WorkRequest& add(uint64_t wr_id, Opcode opcode, uint64_t local, uint32_t length, uint64_t remote);

  std::vector<transport::WorkRequest> wrs_;
  uint8_t* scratch_ = nullptr;
  uint32_t lkey_ = 0, rkey_ = 0, max_inline_ = 0;
  uint64_t outstanding_ = 0;
  bool unsignaled_tail_ = false;
  uint64_t doorbells_ = 0;
};

}  // namespace rkv::kv
