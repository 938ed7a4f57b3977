// The shm provider's control channel: one AF_UNIX SOCK_SEQPACKET socket per
// connection. SEQPACKET keeps message boundaries, so a message is one
// sendmsg/recvmsg with its file descriptors attached (SCM_RIGHTS).
//
// Order on a new connection (active side first):
//   active  -> passive : MR_ADD* CONNECT_REQ(private data; fds: wake_recv, wake_send)
//   passive -> active  : MR_ADD* ACCEPT(private data; fds: conn memfd, wake_recv, wake_send)
//                        or REJECT(private data)
// MR_ADDs precede the message that establishes, so every rkey a peer can learn
// of is known when it is first used. Later registrations send MR_ADD at once,
// a memory window on its own connection only, before bind_window returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rkv::transport::shm {

enum class MsgType : uint32_t { CONNECT_REQ = 1, ACCEPT = 2, REJECT = 3, MR_ADD = 4, MR_REMOVE = 5 };

struct MsgHeader {
  uint32_t magic;
  MsgType type;
  uint32_t qp_num;
  uint32_t private_len;
  uint8_t private_data[56];
};

// An MR announcement. The fd carries the whole Memory; the peer maps
// [map_offset, map_offset + map_length) and finds addr at base + (addr - first).
struct MrAnnouncement {
  uint32_t rkey;
  uint32_t access;
  uint64_t addr;        // the registrant's virtual address of the MR's first byte
  uint64_t length;      // the MR's length
  uint64_t fd_offset;   // where the MR starts in the fd
  // 0: a registration, announced to every peer. n: a memory window of this
  // connection alone, valid while ConnShared::windows[its owner][n - 1] holds
  // its rkey.
  uint32_t window_slot;
  uint32_t reserved;
};

struct Message {
  MsgHeader header{};
  MrAnnouncement mr{};
  std::vector<int> fds;  // owned by the receiver of the message
};

constexpr uint32_t kMsgMagic = 0x726b7631;  // "rkv1"
constexpr size_t kMaxFds = 4;

// Sends one message. Returns 0 or an errno.
int send_message(int socket, MsgType type, uint32_t qp_num, const std::vector<uint8_t>& private_data,
                 const MrAnnouncement* mr, const int* fds, size_t fd_count);

// Receives one message without blocking. Returns 1 with *out filled, 0 when
// nothing is waiting, -1 on EOF or error (the peer is gone) or a malformed
// message (*error says which).
int receive_message(int socket, Message* out, std::string* error);

void close_fds(std::vector<int>& fds);

}  // namespace rkv::transport::shm
