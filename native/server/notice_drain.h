// The server's notice path (docs/protocol.md, "Rings"), in native code: one
// poll drains the fabric's completion queue, and for every notice (a client's
// WRITE_WITH_IMM) reads the record from the client's ring in the region,
// validates it, retires the replaced block in the heap's bitmap of granted
// blocks, advances the ring's consumed counter and reposts the receive buffer
// — no JS object and no crossing per PUT. What JS still owns (the grace queue,
// each client's held blocks, lock items, logs, counters) comes back as flat
// lists in one Uint32Array (NoticeOut); every other completion (control
// messages, SENDs, errors) is handed back untouched, in WcLayout words.
//
// Nothing in a record is trusted: a kind other than PUT or DELETE, or a slot
// whose item would not lie inside the heap, is malformed (skipped, counted as a
// problem); a block is retired only if the bitmap says it is out as exactly one
// block of its class, and its bit is cleared here, so a forged or repeated
// notice can never free a block twice. The bitmaps are the JS heap's own
// (server/store/heap.ts), handed in on every poll.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "../transport/transport.h"

namespace rkv::server {

struct NoticeLayout {
  uint8_t* region = nullptr;  // the whole region, mapped in this process
  uint64_t region_bytes = 0;
  uint64_t heap_offset = 0;
  uint64_t heap_bytes = 0;
  uint64_t ring_offset = 0;
  uint64_t ring_bytes = 0;  // per client ring
  uint32_t max_clients = 0;
  std::vector<uint32_t> classes;  // block sizes in units, ascending (the heap's)
};

// Where a client's receive buffers are (its notices consume them; they are reposted).
struct RecvBuffers {
  uint8_t* base = nullptr;  // buffer 0 of the fabric
  uint32_t lkey = 0;
  uint32_t bytes = 0;  // per buffer
  uint32_t count = 0;  // buffers in the fabric
};

class NoticeDrain {
 public:
  NoticeDrain(NoticeLayout layout, RecvBuffers recv);

  // Notices arriving on queue pair `qp_num` are client ring `ring`'s; reposts go to `connection`.
  void attach(uint32_t qp_num, uint32_t ring, std::shared_ptr<transport::Connection> connection);
  void detach(uint32_t qp_num);

  // The heap's bitmaps (one bit per unit): where a chunk starts, and where a granted block starts.
  void set_bitmaps(uint32_t* chunk_start, uint32_t* granted) {
    chunk_start_ = chunk_start;
    granted_ = granted;
  }
  size_t bitmap_words() const { return (heap_units_ + 31) / 32; }

  // Takes up to `max` (≤ NoticeOut::CAPACITY) completions from `cq`; `out` gets NoticeOut
  // words, `others` (room for `max`) the completions that are not notices of an attached
  // client, out[OTHERS] of them. Returns the count taken.
  uint32_t poll(transport::CompletionQueue& cq, uint32_t max, uint32_t* out, transport::Completion* others);

  // The record checks alone, for one notice (the tests' direct path): as poll does it.
  void notice(uint32_t qp_num, uint32_t seq, uint32_t* out);

 private:
  struct Client {
    uint32_t ring = 0;
    uint8_t* ring_base = nullptr;  // the ring in the region: its consumed counter, then its records
    std::shared_ptr<transport::Connection> connection;
    std::vector<transport::RecvRequest> reposts;  // this poll's, posted at the end of each round
    uint32_t seen_stamp = 0;
    uint64_t consumed = 0;  // the ring's counter as of the notices handled, published after their reposts
  };
  static const uint8_t* record_of(const Client& client, uint32_t seq);
  void prefetch(int n);
  void on_notice(Client& client, uint32_t seq, uint32_t* out);
  void publish(Client& client);
  bool slot_in_heap(uint64_t slot) const;
  uint32_t class_of_units(uint32_t units) const;
  bool retire(uint64_t slot);
  void problem(uint32_t* out, uint32_t ring, uint32_t seq, uint32_t kind);
  void seen(Client& client, uint32_t* out);

  NoticeLayout layout_;
  RecvBuffers recv_;
  uint64_t heap_units_;
  uint32_t* chunk_start_ = nullptr;
  uint32_t* granted_ = nullptr;
  std::unordered_map<uint32_t, Client> clients_;  // by queue pair number
  std::vector<Client*> touched_;  // clients with reposts in this round
  std::vector<transport::Completion> batch_;
  std::vector<Client*> owners_;  // batch_[i]'s client if it is a notice of an attached one
  uint32_t stamp_ = 0;  // one per poll: a client is listed as seen once per poll
};

}  // namespace rkv::server
