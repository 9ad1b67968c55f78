#include "client/host/host_kv_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace kvoffload::client {

HostKvMemory::~HostKvMemory() {
  for (Allocation& a : allocations_) munmap(a.data, a.bytes);
}

absl::Status HostKvMemory::Allocate(uint64_t bytes) {
  Allocation a;
  a.name = absl::StrCat("/kvo-host-", getpid(), "-", allocations_.size());
  a.bytes = bytes;
  int fd = shm_open(a.name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("shm_open ", a.name, ": ", strerror(errno)));
  if (ftruncate(fd, bytes) != 0) {
    close(fd);
    shm_unlink(a.name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("ftruncate ", a.name, ": ", strerror(errno)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(a.name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("mmap ", a.name, ": ", strerror(errno)));
  }
  a.data = static_cast<uint8_t*>(data);
  allocations_.push_back(a);
  return absl::OkStatus();
}

absl::Status HostKvMemory::Create(const std::string& layout, uint32_t layers, uint64_t layer_page,
                                  uint64_t blocks) {
  absl::StatusOr<KvLayout> plan = PlanKvLayout(layout, layers, layer_page, blocks);
  if (!plan.ok()) return plan.status();
  blocks_ = blocks;
  tensors_ = plan->tensors;
  for (uint64_t bytes : plan->allocation_bytes) {
    absl::Status s = Allocate(bytes);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void HostKvMemory::Fill(uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Allocation& a : allocations_) {
    for (uint64_t i = 0; i + 8 <= a.bytes; i += 8) {
      const uint64_t v = rng() | 1;  // never a zero word
      std::memcpy(a.data + i, &v, 8);
    }
  }
  golden_.clear();
  for (uint64_t b = 0; b < blocks_; ++b) golden_.push_back(BlockBytes(b));
}

std::string HostKvMemory::BlockBytes(uint64_t block) const {
  std::string out;
  for (const KvLayout::Tensor& t : tensors_) {
    out.append(reinterpret_cast<const char*>(allocations_[t.allocation].data + t.offset +
                                             block * t.stride),
               t.page);
  }
  return out;
}

void HostKvMemory::Clobber(uint64_t block) {
  for (const KvLayout::Tensor& t : tensors_) {
    std::memset(allocations_[t.allocation].data + t.offset + block * t.stride, 0xA5, t.page);
  }
}

bool HostKvMemory::Verify(uint64_t block) const {
  return block < golden_.size() && BlockBytes(block) == golden_[block];
}

std::vector<TensorHandle> HostKvMemory::Handles() const {
  std::vector<TensorHandle> out;
  for (const KvLayout::Tensor& t : tensors_) {
    const Allocation& a = allocations_[t.allocation];
    out.push_back({a.name, a.bytes, t.offset, blocks_, t.stride, t.page});
  }
  return out;
}

void HostKvMemory::UnlinkNames() {
  for (const Allocation& a : allocations_) shm_unlink(a.name.c_str());
}

}  // namespace kvoffload::client
