#include "daemon/copy/testing/shm_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
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
  static std::atomic<int> counter{0};
  std::string name = absl::StrCat("/kvoffload_test_", getpid(), "_", counter++);
  const uint64_t bytes = uint64_t{num_tensors} * num_blocks * page_bytes;
  if (bytes == 0) return absl::InvalidArgumentError("empty worker memory");
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("shm_open ", name, ": ", strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return absl::InternalError(absl::StrCat("ftruncate ", name, ": ", strerror(err)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(name.c_str());
    return absl::InternalError(absl::StrCat("mmap ", name, ": ", strerror(errno)));
  }
  std::mt19937_64 rng(seed);
  FillRandom(static_cast<uint8_t*>(data), bytes, rng);
  return std::unique_ptr<ShmWorkerMemory>(new ShmWorkerMemory(
      std::move(name), static_cast<uint8_t*>(data), num_tensors, num_blocks, page_bytes));
}

ShmWorkerMemory::ShmWorkerMemory(std::string name, uint8_t* data, uint32_t num_tensors,
                                 uint64_t num_blocks, uint64_t page_bytes)
    : name_(std::move(name)),
      data_(data),
      num_tensors_(num_tensors),
      num_blocks_(num_blocks),
      page_bytes_(page_bytes) {}

ShmWorkerMemory::~ShmWorkerMemory() {
  munmap(data_, num_tensors_ * num_blocks_ * page_bytes_);
  shm_unlink(name_.c_str());
}

WorkerRegistration ShmWorkerMemory::Registration() const {
  WorkerRegistration r;
  r.device = 0;
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
