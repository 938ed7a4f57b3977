#include "shm_wire.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace rkv::transport::shm {

namespace {
struct WireBody {
  MsgHeader header;
  MrAnnouncement mr;
};
}  // namespace

int send_message(int socket, MsgType type, uint32_t qp_num, const std::vector<uint8_t>& private_data,
                 const MrAnnouncement* mr, const int* fds, size_t fd_count) {
  WireBody body{};
  body.header.magic = kMsgMagic;
  body.header.type = type;
  body.header.qp_num = qp_num;
  body.header.private_len = static_cast<uint32_t>(std::min(private_data.size(), sizeof body.header.private_data));
  std::memcpy(body.header.private_data, private_data.data(), body.header.private_len);
  if (mr != nullptr) body.mr = *mr;

  iovec iov{&body, sizeof body};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (fd_count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
    std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * fd_count);
  }
  for (;;) {
    ssize_t n = sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof body)) return 0;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? errno : EMSGSIZE;
  }
}

int receive_message(int socket, Message* out, std::string* error) {
  WireBody body{};
  iovec iov{&body, sizeof body};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(socket, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (n <= 0) {
    *error = n == 0 ? "peer closed the connection" : std::string("control socket: ") + std::strerror(errno);
    return -1;
  }
  out->fds.clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      out->fds.push_back(fd);
    }
  }
  if (n != static_cast<ssize_t>(sizeof body) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
      body.header.magic != kMsgMagic || body.header.private_len > sizeof body.header.private_data) {
    close_fds(out->fds);
    *error = "malformed control message";
    return -1;
  }
  out->header = body.header;
  out->mr = body.mr;
  return 1;
}

void close_fds(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

}  // namespace rkv::transport::shm
