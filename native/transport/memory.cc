// Shareable memory: an anonymous memfd, or a file for regions that outlive the
// process. MAP_SHARED either way, so the shm provider can pass the fd to peers
// and the verbs provider can register the same pages.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "transport.h"

namespace rkv::transport {

namespace {
std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }
}  // namespace

std::unique_ptr<Memory> Memory::allocate(size_t length, const std::string& path, std::string* error) {
  if (length == 0) {
    *error = "cannot allocate an empty memory region";
    return nullptr;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  length = (length + page - 1) / page * page;

  std::unique_ptr<Memory> memory(new Memory());
  memory->length_ = length;
  if (path.empty()) {
    memory->fd_ = memfd_create("rdma-kv", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memory->fd_ < 0) {
      *error = errno_text("memfd_create");
      return nullptr;
    }
    if (ftruncate(memory->fd_, static_cast<off_t>(length)) != 0) {
      *error = errno_text("ftruncate of a " + std::to_string(length) + "-byte memfd");
      return nullptr;
    }
    // Peers map this fd: sealing it means nobody can shrink it under their
    // mappings (which would turn their reads into SIGBUS).
    if (fcntl(memory->fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      *error = errno_text("sealing the memfd");
      return nullptr;
    }
  } else {
    memory->file_backed_ = true;
    memory->fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (memory->fd_ < 0) {
      *error = errno_text("open " + path);
      return nullptr;
    }
    struct stat st {};
    if (fstat(memory->fd_, &st) != 0) {
      *error = errno_text("fstat " + path);
      return nullptr;
    }
    memory->existed_ = st.st_size > 0;
    if (memory->existed_ && static_cast<size_t>(st.st_size) != length) {
      *error = path + " holds " + std::to_string(st.st_size) + " bytes but " + std::to_string(length) +
               " were asked for: use the size it was created with";
      return nullptr;
    }
    // posix_fallocate reserves the blocks now, so a full disk fails here and
    // not later as SIGBUS on first touch.
    if (!memory->existed_) {
      int rc = posix_fallocate(memory->fd_, 0, static_cast<off_t>(length));
      if (rc != 0) {
        errno = rc;
        *error = errno_text("reserving " + std::to_string(length) + " bytes for " + path);
        return nullptr;
      }
    }
  }
  void* data = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, memory->fd_, 0);
  if (data == MAP_FAILED) {
    *error = errno_text("mmap of " + std::to_string(length) + " bytes");
    return nullptr;
  }
  memory->data_ = static_cast<uint8_t*>(data);
  return memory;
}

Memory::~Memory() {
  if (data_ != nullptr) munmap(data_, length_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace rkv::transport
