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
  if (layers == 0 || layer_page == 0 || blocks == 0 || layer_page % 2 != 0) {
    return absl::InvalidArgumentError("layers, blocks and an even layer_page must be > 0");
  }
  blocks_ = blocks;
  const uint64_t half = layer_page / 2;
  if (layout == "separate_kv") {
    // Strides padded by 256 bytes, tensors 4 KiB apart, V tensors in a second allocation: the
    // offsets are never 0, as with PyTorch's caching allocator.
    const uint64_t stride = half + 256;
    const uint64_t tensor_bytes = stride * blocks + 4096;
    for (int a = 0; a < 2; ++a) {
      absl::Status s = Allocate(tensor_bytes * layers + 4096);
      if (!s.ok()) return s;
    }
    for (uint32_t l = 0; l < layers; ++l) {
      tensors_.push_back({0, 4096 + l * tensor_bytes, stride, half});
      tensors_.push_back({1, 4096 + l * tensor_bytes, stride, half});
    }
  } else if (layout == "stacked_kv") {
    const uint64_t tensor_bytes = layer_page * blocks;
    absl::Status s = Allocate(tensor_bytes * layers + 8192);
    if (!s.ok()) return s;
    for (uint32_t l = 0; l < layers; ++l) {
      tensors_.push_back({0, 8192 + l * tensor_bytes, layer_page, layer_page});
    }
  } else if (layout == "block_first") {
    const uint64_t per_block = layer_page * layers;
    absl::Status s = Allocate(per_block * blocks + 512);
    if (!s.ok()) return s;
    tensors_.push_back({0, 512, per_block, per_block});
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown layout '", layout, "' (want separate_kv, stacked_kv or block_first)"));
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
  for (const Tensor& t : tensors_) {
    out.append(reinterpret_cast<const char*>(allocations_[t.allocation].data + t.offset +
                                             block * t.stride),
               t.page);
  }
  return out;
}

void HostKvMemory::Clobber(uint64_t block) {
  for (const Tensor& t : tensors_) {
    std::memset(allocations_[t.allocation].data + t.offset + block * t.stride, 0xA5, t.page);
  }
}

bool HostKvMemory::Verify(uint64_t block) const {
  return block < golden_.size() && BlockBytes(block) == golden_[block];
}

std::vector<TensorHandle> HostKvMemory::Handles() const {
  std::vector<TensorHandle> out;
  for (const Tensor& t : tensors_) {
    const Allocation& a = allocations_[t.allocation];
    out.push_back({a.name, a.bytes, t.offset, blocks_, t.stride, t.page});
  }
  return out;
}

void HostKvMemory::UnlinkNames() {
  for (const Allocation& a : allocations_) shm_unlink(a.name.c_str());
}

}  // namespace kvoffload::client
