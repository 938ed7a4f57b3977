// Shareable memory: an anonymous memfd, or a file for regions that outlive the
// process. MAP_SHARED either way, so the shm provider can pass the fd to peers
// and the verbs provider can register the same pages.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "transport.h"

namespace rkv::transport {

namespace {
std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// A field of /proc/meminfo ("HugePages_Free", "Hugepagesize"), 0 when missing.
uint64_t meminfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

// The selected value of a sysfs choice ("always [madvise] never" -> "madvise"), "" when unreadable.
std::string sysfs_choice(const char* path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t open = text.find('['), close = text.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : text.substr(open + 1, close - open - 1);
}

// A sealed memfd of `length` bytes (flags: MFD_HUGETLB or 0); -1 and *error on failure.
int sealed_memfd(size_t length, unsigned flags, std::string* error) {
  int fd = memfd_create("rdma-kv", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
  if (fd < 0) {
    *error = errno_text("memfd_create");
    return -1;
  }
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    *error = errno_text("ftruncate of a " + std::to_string(length) + "-byte memfd");
    close(fd);
    return -1;
  }
  // Peers map this fd: sealing it means nobody can shrink it under their
  // mappings (which would turn their reads into SIGBUS).
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    *error = errno_text("sealing the memfd");
    close(fd);
    return -1;
  }
  return fd;
}
}  // namespace

std::unique_ptr<Memory> Memory::allocate(size_t length, const std::string& path, std::string* error, bool huge_pages) {
  if (length == 0) {
    *error = "cannot allocate an empty memory region";
    return nullptr;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  length = (length + page - 1) / page * page;

  std::unique_ptr<Memory> memory(new Memory());
  memory->length_ = length;
  if (path.empty() && huge_pages) {
    // hugetlb pages, when enough are reserved: the whole region on them, or not at all (a
    // reservation that fails shows at mmap, and then the region goes on ordinary pages).
    // The mapping is a whole number of them: the tail past `length` is never used.
    uint64_t huge = meminfo("Hugepagesize") * 1024, free = meminfo("HugePages_Free");
    size_t mapped = huge == 0 ? length : (length + huge - 1) / huge * huge;
    if (huge == 0 || free * huge < mapped) {
      memory->page_note_ = "not enough hugetlb pages reserved (HugePages_Free " + std::to_string(free) + " of " +
                           std::to_string(huge / 1024) + " kB, vm.nr_hugepages)";
    } else {
      std::string why;
      int fd = sealed_memfd(mapped, MFD_HUGETLB, &why);
      void* data = fd < 0 ? MAP_FAILED : mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (data != MAP_FAILED) {
        memory->fd_ = fd;
        memory->data_ = static_cast<uint8_t*>(data);
        memory->mapped_ = mapped;
        memory->page_kind_ = "hugetlb";
        return memory;
      }
      if (fd >= 0) {
        why = errno_text("mmap of hugetlb pages");
        close(fd);
      }
      memory->page_note_ = "hugetlb pages failed (" + why + ")";
    }
  }
  if (path.empty()) {
    memory->fd_ = sealed_memfd(length, 0, error);
    if (memory->fd_ < 0) return nullptr;
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
  if (path.empty() && huge_pages) {
    // Transparent huge pages for shmem: madvise is only a hint, honoured where the kernel
    // allows THP for shmem ("advise", "within_size", "always", "force").
    std::string thp = sysfs_choice("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    bool allowed = thp == "advise" || thp == "within_size" || thp == "always" || thp == "force";
    if (allowed && madvise(data, length, MADV_HUGEPAGE) == 0) {
      memory->page_kind_ = "thp";
    } else {
      memory->page_note_ += allowed ? "; " + errno_text("madvise(MADV_HUGEPAGE)")
                                    : "; transparent huge pages for shmem are '" + (thp.empty() ? "unknown" : thp) +
                                          "' (/sys/kernel/mm/transparent_hugepage/shmem_enabled)";
    }
  }
  return memory;
}

Memory::~Memory() {
  if (data_ != nullptr) munmap(data_, mapped_ != 0 ? mapped_ : length_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace rkv::transport
