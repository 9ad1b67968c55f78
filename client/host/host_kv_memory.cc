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
  for (Allocation& a : allocations_) {
    munmap(a.data, a.bytes);
    close(a.fd);
  }
}

absl::Status HostKvMemory::Allocate(uint64_t bytes) {
  Allocation a;
  a.bytes = bytes;
  const std::string label = absl::StrCat("kvo-host-", allocations_.size());
  a.fd = memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (a.fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", strerror(errno)));
  a.name = absl::StrCat("memfd:", a.fd);
  // Sealed against shrinking: the daemon refuses memory that could vanish under its copies.
  if (ftruncate(a.fd, bytes) != 0 || fcntl(a.fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
    const int err = errno;
    close(a.fd);
    return absl::ResourceExhaustedError(absl::StrCat("sizing ", label, ": ", strerror(err)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
  if (data == MAP_FAILED) {
    const int err = errno;
    close(a.fd);
    return absl::ResourceExhaustedError(absl::StrCat("mmap ", label, ": ", strerror(err)));
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

}  // namespace kvoffload::client
