// Access hints for the server's eviction (docs/architecture.md, "Eviction"):
// one-sided GETs never reach the server, so a GET tells it which item it read
// by WRITing 1 into that item's byte of the region's access table (a byte per
// heap unit, after the heap), unsignaled, in the same doorbell as the item's
// READ: no round trip of its own, no completion, no atomic. The server reads
// and clears the bytes (a CPU store is allowed: no RDMA atomic touches the
// table) and turns them into last-read stamps (lru) or read counts (lfu).
// A hint is only a hint: a byte written for a block that was reused since, or
// for another key of the same fingerprint, makes some item look read, never
// a reader wrong.
#include "client_core.h"
#include "op.h"

namespace rkv::kv {

void ClientCore::note_access(Op& op, uint32_t block) {
  if (link(op).region.access_offset == 0) return;  // the server does not evict
  mem(op.area(area::ACCESS))[0] = 1;
  link(op).sends.write(op.tag(), op.area(area::ACCESS), 1, link(op).region.addr + link(op).region.access_offset + block);
}

}  // namespace rkv::kv
