#include "daemon/copy/cuda/region_pins.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
#include "daemon/copy/cuda/log.h"
#include "common/status_macros.h"

namespace kvoffload::daemon::cuda {
namespace {

// Chunks of at most this many bytes, each ending on a row boundary (vLLM #51080).
constexpr uint64_t kMaxRegisterChunkBytes = uint64_t{64} << 30;

}  // namespace

absl::Status RegionPins::Register(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                                  const std::function<int()>& device_in_use) {
  if (base == nullptr || bytes == 0 || row_bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion needs a base, a size and a row size");
  }
  if (row_bytes > kMaxRegisterChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("row_bytes ", row_bytes,
                                                   " exceeds the registration chunk of ",
                                                   kMaxRegisterChunkBytes, " bytes"));
  }
  const uint64_t chunk_bytes = kMaxRegisterChunkBytes / row_bytes * row_bytes;
  auto region = std::make_shared<PinnedRegion>(base, bytes, row_bytes, chunk_bytes);
  absl::MutexLock pin(&pin_mu_);
  {
    absl::MutexLock lock(&regions_mu_);
    if (regions_.count(base) != 0) {
      return absl::FailedPreconditionError("region already registered with the CUDA backend");
    }
  }
  const int ordinal = device_in_use();
  if (ordinal >= 0) RETURN_IF_ERROR(Pin(*region, ordinal));
  if (ordinal >= 0) {
    Log()->info("registered a region of {} bytes in {} chunks (pinned in device {}'s context)",
                bytes, region->num_chunks(), ordinal);
  } else {
    Log()->info("registered a region of {} bytes in {} chunks (pinned when the first worker "
                "opens)", bytes, region->num_chunks());
  }
  absl::MutexLock lock(&regions_mu_);
  regions_.emplace(base, std::move(region));
  return absl::OkStatus();
}

absl::Status RegionPins::Declare(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                                 uint64_t chunk_bytes) {
  if (base == nullptr || bytes == 0 || row_bytes == 0) {
    return absl::InvalidArgumentError("DeclareRegion needs a base, a size and a row size");
  }
  if (chunk_bytes == 0 || chunk_bytes % row_bytes != 0 || chunk_bytes > kMaxRegisterChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes ", chunk_bytes, " must be a positive multiple of row_bytes ", row_bytes,
        " of at most ", kMaxRegisterChunkBytes));
  }
  auto region = std::make_shared<PinnedRegion>(base, bytes, row_bytes, chunk_bytes,
                                               /*chunked=*/true);
  absl::MutexLock lock(&regions_mu_);
  if (regions_.count(base) != 0) {
    return absl::FailedPreconditionError("region already registered with the CUDA backend");
  }
  Log()->info("declared a region of {} bytes in {} chunks of {} bytes (pinned chunk by chunk)",
              bytes, region->num_chunks(), chunk_bytes);
  regions_.emplace(base, std::move(region));
  return absl::OkStatus();
}

absl::Status RegionPins::PinChunk(uint8_t* base, size_t chunk,
                                  const std::function<int()>& device_in_use) {
  std::shared_ptr<PinnedRegion> region = Find(base);
  if (region == nullptr || !region->chunked()) {
    return absl::NotFoundError("PinRegionChunk: the base is not a declared region");
  }
  if (chunk >= region->num_chunks()) {
    return absl::OutOfRangeError(absl::StrCat("PinRegionChunk: chunk ", chunk, " of ",
                                              region->num_chunks()));
  }
  if (region->chunk_pinned(chunk)) return absl::OkStatus();
  const int ordinal = device_in_use();
  if (ordinal < 0) {
    return absl::UnavailableError("no device context yet: chunks are pinned once a worker opens");
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  const uint64_t offset = chunk * region->chunk_bytes();
  const uint64_t length = std::min(region->chunk_bytes(), region->bytes() - offset);
  const cudaError_t err =
      cudaHostRegister(base + offset, length, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err != cudaSuccess) {
    return CudaStatus(err, absl::StrCat("cudaHostRegister of chunk ", chunk, " (", length,
                                        " bytes at offset ", offset, ")",
                                        err == cudaErrorMemoryAllocation
                                            ? " (is the locked-memory limit, LimitMEMLOCK, "
                                              "high enough?)"
                                            : ""));
  }
  region->MarkPinned(chunk, ordinal);
  return absl::OkStatus();
}

void RegionPins::Unregister(uint8_t* base) {
  absl::MutexLock pin(&pin_mu_);
  std::shared_ptr<PinnedRegion> region;
  {
    absl::MutexLock lock(&regions_mu_);
    auto it = regions_.find(base);
    if (it == regions_.end()) return;
    region = std::move(it->second);
    regions_.erase(it);
  }
  const int ordinal = region->pinned_device();
  if (ordinal < 0) return;  // never pinned
  cudaSetDevice(ordinal);
  for (size_t c = 0; c < region->num_chunks(); ++c) {
    if (!region->chunk_pinned(c)) continue;  // a declared region's chunk not pinned yet
    absl::Status s = CudaStatus(cudaHostUnregister(base + c * region->chunk_bytes()),
                                "cudaHostUnregister");
    if (!s.ok()) Log()->warn("unregistering a region: {}", s.ToString());
  }
}

absl::Status RegionPins::PinPending(int ordinal) {
  absl::MutexLock pin(&pin_mu_);
  std::vector<std::shared_ptr<PinnedRegion>> pending;
  {
    absl::MutexLock lock(&regions_mu_);
    for (const auto& [base, region] : regions_) {
      if (region->pinned_device() < 0 && !region->chunked()) pending.push_back(region);
    }
  }
  for (const std::shared_ptr<PinnedRegion>& region : pending) {
    RETURN_IF_ERROR(Pin(*region, ordinal));
    Log()->info("pinned a region of {} bytes in device {}'s context", region->bytes(), ordinal);
  }
  return absl::OkStatus();
}

std::shared_ptr<PinnedRegion> RegionPins::Find(uint8_t* base) {
  absl::MutexLock lock(&regions_mu_);
  auto it = regions_.find(base);
  return it == regions_.end() ? nullptr : it->second;
}

std::vector<uint8_t*> RegionPins::Bases() {
  std::vector<uint8_t*> bases;
  absl::MutexLock lock(&regions_mu_);
  for (const auto& [base, region] : regions_) bases.push_back(base);
  return bases;
}

absl::Status RegionPins::Pin(PinnedRegion& region, int ordinal) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  uint8_t* const base = region.base();
  for (size_t c = 0; c < region.num_chunks(); ++c) {
    const uint64_t offset = c * region.chunk_bytes();
    const uint64_t length = std::min(region.chunk_bytes(), region.bytes() - offset);
    const cudaError_t err =
        cudaHostRegister(base + offset, length, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (err != cudaSuccess) {
      for (size_t u = 0; u < c; ++u) cudaHostUnregister(base + u * region.chunk_bytes());
      return CudaStatus(err, absl::StrCat("cudaHostRegister of ", length, " bytes at offset ",
                                          offset, " of a ", region.bytes(), "-byte region",
                                          err == cudaErrorMemoryAllocation
                                              ? " (is the locked-memory limit, LimitMEMLOCK, "
                                                "high enough?)"
                                              : ""));
    }
  }
  region.MarkPinned(SIZE_MAX, ordinal);
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon::cuda
