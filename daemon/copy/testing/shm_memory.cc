#include "daemon/copy/testing/shm_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {
namespace {

void FillRandom(uint8_t* data, uint64_t bytes, std::mt19937_64& rng) {
  for (uint64_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(rng() | 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmWorkerMemory>> ShmWorkerMemory::Create(uint32_t num_tensors,
                                                                          uint64_t num_blocks,
                                                                          uint64_t page_bytes,
                                                                          uint64_t seed) {
  const uint64_t bytes = uint64_t{num_tensors} * num_blocks * page_bytes;
  if (bytes == 0) return absl::InvalidArgumentError("empty worker memory");
  // A sealed memfd, as the host backend requires (it cannot be shrunk under the daemon).
  const int fd = memfd_create("kvoffload_test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("sizing or sealing the memfd: ", strerror(err)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("mmap: ", strerror(err)));
  }
  std::mt19937_64 rng(seed);
  FillRandom(static_cast<uint8_t*>(data), bytes, rng);
  return std::unique_ptr<ShmWorkerMemory>(new ShmWorkerMemory(
      fd, static_cast<uint8_t*>(data), num_tensors, num_blocks, page_bytes));
}

ShmWorkerMemory::ShmWorkerMemory(int fd, uint8_t* data, uint32_t num_tensors,
                                 uint64_t num_blocks, uint64_t page_bytes)
    : fd_(fd),
      name_(absl::StrCat("memfd:", fd)),
      data_(data),
      num_tensors_(num_tensors),
      num_blocks_(num_blocks),
      page_bytes_(page_bytes) {}

ShmWorkerMemory::~ShmWorkerMemory() {
  munmap(data_, num_tensors_ * num_blocks_ * page_bytes_);
  close(fd_);
}

WorkerRegistration ShmWorkerMemory::Registration() const {
  WorkerRegistration r;
  r.device = 0;
  r.caller_pid = getpid();
  r.caller_uid = getuid();
  const uint64_t bytes = num_tensors_ * num_blocks_ * page_bytes_;
  for (uint32_t t = 0; t < num_tensors_; ++t) {
    r.tensors.push_back(TensorRegistration{name_, bytes, t * num_blocks_ * page_bytes_,
                                           num_blocks_, page_bytes_, page_bytes_});
  }
  return r;
}

std::string ShmWorkerMemory::Block(uint64_t block) const {
  std::string out;
  for (uint32_t t = 0; t < num_tensors_; ++t) {
    out.append(reinterpret_cast<const char*>(Page(t, block)), page_bytes_);
  }
  return out;
}

void ShmWorkerMemory::Scramble(uint64_t block, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (uint32_t t = 0; t < num_tensors_; ++t) FillRandom(Page(t, block), page_bytes_, rng);
}

}  // namespace kvoffload::daemon
