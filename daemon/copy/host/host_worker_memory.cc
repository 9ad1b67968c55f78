#include "daemon/copy/host/host_worker_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/copy/copy_plan.h"

namespace kvoffload::daemon {
namespace {

std::string Printable(const std::string& handle) { return absl::CHexEscape(handle); }

constexpr char kMemfdPrefix[] = "memfd:";

// One memfd of a worker, mapped read-write. Move-only; unmaps on destruction.
class ShmMapping {
 public:
  // Opens "memfd:<fd>": descriptor <fd> of process `pid` (0: this process), reopened through
  // /proc/<pid>/fd (the daemon learnt `pid` from the kernel, so a caller can only name its own
  // descriptors). The object must be a regular file owned by `uid` (the caller's, so a reopen
  // with the daemon's credentials never reaches what the caller could not open itself), sealed
  // with F_SEAL_SHRINK (so it can never be truncated under a copy: no SIGBUS in the daemon), and
  // at least `bytes` long. Named shm objects are refused: the daemon would open them with its
  // own credentials. Codes: INVALID_ARGUMENT (bad handle, no such descriptor, too small),
  // PERMISSION_DENIED (another owner; the daemon may not read that process's descriptors),
  // FAILED_PRECONDITION (not sealed), RESOURCE_EXHAUSTED (descriptors or address space).
  static absl::StatusOr<ShmMapping> Open(const std::string& handle, uint64_t bytes, int32_t pid,
                                         uint32_t uid) {
    const std::string what = absl::StrCat("allocation '", Printable(handle), "'");
    int number = -1;
    if (!absl::StartsWith(handle, kMemfdPrefix) ||
        !absl::SimpleAtoi(absl::string_view(handle).substr(sizeof(kMemfdPrefix) - 1), &number) ||
        number < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what,
          ": the host backend opens only \"memfd:<fd>\" handles (a sealed memfd of the "
          "registering process); named shm objects are not opened"));
    }
    if (pid <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the registration names no calling process (caller_pid ", pid,
                       "); the daemon opens a worker's memfd through /proc/<its pid>/fd"));
    }
    const std::string path = absl::StrCat("/proc/", pid, "/fd/", number);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      const std::string message = absl::StrCat(what, ": cannot open descriptor ", number,
                                               " of pid ", pid, ": ", strerror(err));
      if (err == EMFILE || err == ENFILE) return absl::ResourceExhaustedError(message);
      if (err == EACCES || err == EPERM) {
        return absl::PermissionDeniedError(absl::StrCat(
            message, " (the daemon needs the worker's uid, root or CAP_SYS_PTRACE for it)"));
      }
      return absl::InvalidArgumentError(message);
    }
    auto refuse = [&](absl::Status status) {
      close(fd);
      return status;
    };
    struct stat st;
    if (fstat(fd, &st) != 0) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(what, ": fstat: ", strerror(errno))));
    }
    if (!S_ISREG(st.st_mode)) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(what, " is not a memfd")));
    }
    if (st.st_uid != uid) {
      return refuse(absl::PermissionDeniedError(absl::StrCat(
          what, " is owned by uid ", st.st_uid, ", not by the registering uid ", uid)));
    }
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      return refuse(absl::FailedPreconditionError(absl::StrCat(
          what,
          " is not sealed against shrinking: create it with memfd_create(MFD_ALLOW_SEALING) "
          "and add F_SEAL_SHRINK (fcntl F_ADD_SEALS), so that it cannot be truncated under "
          "a copy")));
    }
    if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < bytes) {
      return refuse(absl::InvalidArgumentError(
          absl::StrCat(what, " holds ", st.st_size, " bytes, less than the registered ", bytes)));
    }
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    close(fd);  // the mapping keeps the object alive
    if (data == MAP_FAILED) {
      const std::string message =
          absl::StrCat(what, ": mmap of ", bytes, " bytes: ", strerror(err));
      if (err == ENOMEM) return absl::ResourceExhaustedError(message);
      return absl::InvalidArgumentError(message);
    }
    return ShmMapping(static_cast<uint8_t*>(data), bytes);
  }

  ShmMapping(ShmMapping&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  ShmMapping& operator=(ShmMapping&& other) noexcept {
    if (this != &other) {
      Unmap();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  ~ShmMapping() { Unmap(); }

  uint8_t* data() const { return data_; }

 private:
  ShmMapping(uint8_t* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  void Unmap() {
    if (data_ != nullptr) munmap(data_, bytes_);
    data_ = nullptr;
  }

  uint8_t* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// Checks one tensor's numbers against its allocation; `index` names it in the message.
absl::Status ValidateTensor(const TensorRegistration& t, size_t index) {
  const std::string what = absl::StrCat("tensor ", index);
  if (t.allocation_handle.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty allocation handle"));
  }
  if (t.allocation_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": allocation_bytes is 0"));
  }
  return ValidateTensorGeometry(index, t.offset, t.num_blocks, t.block_stride_bytes, t.page_bytes,
                                t.allocation_bytes);
}

}  // namespace

class HostWorkerMemory::Mappings {
 public:
  std::vector<ShmMapping> all;  // unmapped by their destructors
};

HostWorkerMemory::HostWorkerMemory(std::unique_ptr<Mappings> mappings,
                                   std::vector<TensorDescriptor> tensors, uint64_t num_blocks,
                                   uint64_t bytes_per_block, size_t num_events)
    : mappings_(std::move(mappings)),
      tensors_(std::move(tensors)),
      num_blocks_(num_blocks),
      bytes_per_block_(bytes_per_block),
      num_events_(num_events) {}

HostWorkerMemory::~HostWorkerMemory() = default;

absl::StatusOr<std::unique_ptr<HostWorkerMemory>> OpenHostWorker(
    const WorkerRegistration& registration) {
  if (registration.tensors.empty()) {
    return absl::InvalidArgumentError("worker registration has no tensors");
  }
  // Every check on the numbers comes before anything is opened.
  std::map<std::string, uint64_t> allocation_bytes;  // distinct handles, in no particular order
  uint64_t bytes_per_block = 0;
  uint64_t num_blocks = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < registration.tensors.size(); ++i) {
    const TensorRegistration& t = registration.tensors[i];
    absl::Status valid = ValidateTensor(t, i);
    if (!valid.ok()) return valid;
    auto [it, inserted] = allocation_bytes.emplace(t.allocation_handle, t.allocation_bytes);
    if (!inserted && it->second != t.allocation_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", i, ": allocation '", Printable(t.allocation_handle), "' registered with ",
          t.allocation_bytes, " bytes, but an earlier tensor said ", it->second));
    }
    if (__builtin_add_overflow(bytes_per_block, t.page_bytes, &bytes_per_block)) {
      return absl::InvalidArgumentError("worker registration: bytes per block overflow");
    }
    num_blocks = std::min(num_blocks, t.num_blocks);
  }

  auto mappings = std::make_unique<HostWorkerMemory::Mappings>();
  std::map<std::string, uint8_t*> bases;
  mappings->all.reserve(allocation_bytes.size());
  for (const auto& [handle, bytes] : allocation_bytes) {
    absl::StatusOr<ShmMapping> mapping =
        ShmMapping::Open(handle, bytes, registration.caller_pid, registration.caller_uid);
    if (!mapping.ok()) return mapping.status();  // earlier mappings unmap themselves
    bases[handle] = mapping->data();
    mappings->all.push_back(std::move(mapping).value());
  }

  std::vector<TensorDescriptor> tensors;
  tensors.reserve(registration.tensors.size());
  uint64_t host_offset = 0;
  for (const TensorRegistration& t : registration.tensors) {
    tensors.push_back(TensorDescriptor{
        static_cast<uint64_t>(reinterpret_cast<uintptr_t>(bases[t.allocation_handle] + t.offset)),
        t.block_stride_bytes, t.page_bytes, host_offset});
    host_offset += t.page_bytes;
  }
  return std::make_unique<HostWorkerMemory>(std::move(mappings), std::move(tensors), num_blocks,
                                            bytes_per_block, registration.event_handles.size());
}

}  // namespace kvoffload::daemon
