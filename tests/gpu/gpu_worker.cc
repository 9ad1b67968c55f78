#include "tests/gpu/gpu_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cuda/cuda_client.h"
#include "tests/gpu/test_kernels.h"
#include "tests/gpu/test_pattern.h"

namespace kvoffload::testing {
namespace {

constexpr char kWorkerFlag[] = "--kvo_gpu_worker=";

enum Command : uint64_t {
  kSetup = 1,
  kFill = 2,
  kSpinFillRecord = 3,
  kSync = 4,
  kWaitEvent = 5,
  kVerify = 6,
  kExit = 7,
};

// ----- tiny binary messages: u64 little-endian words and length-prefixed strings -----
class Writer {
 public:
  Writer& U64(uint64_t v) {
    data_.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  Writer& Bytes(const std::string& s) {
    U64(s.size());
    data_.append(s);
    return *this;
  }
  const std::string& data() const { return data_; }

 private:
  std::string data_;
};

class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  bool U64(uint64_t* v) {
    if (pos_ + sizeof(*v) > data_.size()) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(*v));
    pos_ += sizeof(*v);
    return true;
  }
  bool Bytes(std::string* s) {
    uint64_t n = 0;
    if (!U64(&n) || pos_ + n > data_.size()) return false;
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes; with a deadline when `deadline` is finite.
absl::Status ReadAll(int fd, void* p, size_t n, absl::Time deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (deadline != absl::InfiniteFuture()) {
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (ms <= 0) return absl::DeadlineExceededError("worker did not answer in time");
      pollfd pfd{fd, POLLIN, 0};
      const int r = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return absl::DeadlineExceededError("worker did not answer in time");
    }
    const ssize_t got = read(fd, c, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return absl::UnavailableError("worker connection closed");
    c += got;
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

bool SendFrame(int fd, const std::string& payload) {
  const uint64_t n = payload.size();
  return WriteAll(fd, &n, sizeof(n)) && WriteAll(fd, payload.data(), payload.size());
}

absl::StatusOr<std::string> ReceiveFrame(int fd, absl::Time deadline) {
  uint64_t n = 0;
  absl::Status s = ReadAll(fd, &n, sizeof(n), deadline);
  if (!s.ok()) return s;
  if (n > (uint64_t{1} << 30)) return absl::InternalError("oversized frame");
  std::string payload(n, '\0');
  s = ReadAll(fd, payload.data(), n, deadline);
  if (!s.ok()) return s;
  return payload;
}

std::string Reply(const absl::Status& status, const std::string& payload = "") {
  Writer w;
  w.U64(static_cast<uint64_t>(status.code())).Bytes(std::string(status.message()));
  return w.data() + payload;
}

absl::Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("worker ", getpid(), ": ", what, ": ",
                                          cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                          ")"));
}

// ----- the worker process -----
class Worker {
 public:
  std::string Handle(const std::string& request, bool* exit) {
    Reader r(request);
    uint64_t command = 0;
    if (!r.U64(&command)) return Reply(absl::InvalidArgumentError("empty request"));
    switch (command) {
      case kSetup:
        return Setup(r);
      case kFill: {
        uint64_t generation = 0;
        r.U64(&generation);
        absl::Status s = Cuda(LaunchFillPattern(buffer_, layout_.buffer_bytes, generation, stream_),
                              "fill");
        if (s.ok()) s = Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        return Reply(s);
      }
      case kSpinFillRecord: {
        uint64_t spin_ns = 0, generation = 0, event = 0;
        r.U64(&spin_ns);
        r.U64(&generation);
        r.U64(&event);
        absl::Status s = Cuda(LaunchSpin(spin_ns, stream_), "spin");
        if (s.ok()) {
          s = Cuda(LaunchFillPattern(buffer_, layout_.buffer_bytes, generation, stream_), "fill");
        }
        if (s.ok()) s = events_->Record(event, stream_);
        return Reply(s);
      }
      case kSync:
        return Reply(Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
      case kWaitEvent: {
        uint64_t event = 0;
        r.U64(&event);
        absl::Status s = events_->Wait(event, stream_);
        if (s.ok()) s = Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        return Reply(s);
      }
      case kVerify:
        return Verify(r);
      case kExit:
        *exit = true;
        return Reply(absl::OkStatus());
      default:
        return Reply(absl::InvalidArgumentError(absl::StrCat("unknown command ", command)));
    }
  }

  ~Worker() {
    events_.reset();
    if (buffer_ != nullptr) cudaFree(buffer_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

 private:
  std::string Setup(Reader& r) {
    uint64_t generation = 0, num_events = 0, num_tensors = 0;
    r.U64(&layout_.buffer_bytes);
    r.U64(&generation);
    r.U64(&num_events);
    r.U64(&num_tensors);
    for (uint64_t i = 0; i < num_tensors; ++i) {
      TensorSpec t;
      r.U64(&t.offset);
      r.U64(&t.num_blocks);
      r.U64(&t.stride);
      r.U64(&t.page_bytes);
      layout_.tensors.push_back(t);
    }
    absl::Status s = Cuda(cudaSetDevice(0), "cudaSetDevice");
    if (s.ok()) s = Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    if (s.ok()) s = Cuda(cudaMalloc(&buffer_, layout_.buffer_bytes), "cudaMalloc");
    if (s.ok()) {
      s = Cuda(LaunchFillPattern(buffer_, layout_.buffer_bytes, generation, stream_), "fill");
    }
    if (s.ok()) s = Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (!s.ok()) return Reply(s);
    auto pool = client::cuda::EventPool::Create(num_events);
    if (!pool.ok()) return Reply(pool.status());
    events_ = std::move(*pool);
    auto uuid = client::cuda::DeviceUuid(0);
    if (!uuid.ok()) return Reply(uuid.status());
    Writer w;
    w.Bytes(*uuid).U64(layout_.tensors.size());
    const uint64_t base = reinterpret_cast<uint64_t>(buffer_);
    for (const TensorSpec& t : layout_.tensors) {
      auto ref = client::cuda::ResolveAllocation(base + t.offset);
      if (!ref.ok()) return Reply(ref.status());
      if (ref->base != base || ref->offset != t.offset) {
        return Reply(absl::InternalError(absl::StrCat(
            "ResolveAllocation: base ", ref->base, " offset ", ref->offset, ", expected ", base,
            " and ", t.offset)));
      }
      w.Bytes(ref->ipc_handle).U64(ref->allocation_bytes).U64(ref->offset);
    }
    w.U64(events_->size());
    for (const std::string& h : events_->ipc_handles()) w.Bytes(h);
    return Reply(absl::OkStatus(), w.data());
  }

  std::string Verify(Reader& r) {
    uint64_t rest = 0, n = 0;
    r.U64(&rest);
    r.U64(&n);
    std::vector<WorkerProcess::Expect> expect(n);
    for (auto& e : expect) {
      r.U64(&e.dst_block);
      r.U64(&e.src_block);
      r.U64(&e.src_generation);
    }
    absl::Status s = Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (!s.ok()) return Reply(s);
    const uint64_t bytes = layout_.buffer_bytes;
    std::vector<uint8_t> actual(bytes);
    s = Cuda(cudaMemcpy(actual.data(), buffer_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (!s.ok()) return Reply(s);
    std::vector<uint8_t> expected(bytes);
    FillPatternBytes(expected.data(), rest, 0, bytes);
    for (const auto& e : expect) {
      for (const TensorSpec& t : layout_.tensors) {
        const uint64_t dst = t.offset + e.dst_block * t.stride;
        const uint64_t src = t.offset + e.src_block * t.stride;
        FillPatternBytes(expected.data() + dst, e.src_generation, src, t.page_bytes);
      }
    }
    uint64_t mismatches = 0;
    uint64_t first = bytes;
    for (uint64_t i = 0; i < bytes; ++i) {
      if (actual[i] != expected[i]) {
        if (mismatches == 0) first = i;
        ++mismatches;
      }
    }
    std::string detail;
    if (mismatches > 0) {
      detail = absl::StrCat("first difference at buffer offset ", first, ": got ",
                            static_cast<int>(actual[first]), ", expected ",
                            static_cast<int>(expected[first]));
    }
    Writer w;
    w.U64(mismatches).Bytes(detail);
    return Reply(absl::OkStatus(), w.data());
  }

  WorkerLayout layout_;
  void* buffer_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<client::cuda::EventPool> events_;
};

absl::Status ParseReply(const std::string& frame, std::string* payload) {
  Reader r(frame);
  uint64_t code = 0;
  std::string message;
  if (!r.U64(&code) || !r.Bytes(&message)) return absl::InternalError("malformed reply");
  const size_t header = sizeof(uint64_t) * 2 + message.size();
  *payload = frame.substr(header);
  if (code != 0) return absl::Status(static_cast<absl::StatusCode>(code), message);
  return absl::OkStatus();
}

}  // namespace

int MaybeRunWorker(int argc, char** argv) {
  if (argc < 2 || !absl::StartsWith(argv[1], kWorkerFlag)) return -1;
  int fd = -1;
  if (!absl::SimpleAtoi(argv[1] + strlen(kWorkerFlag), &fd)) return 2;
  Worker worker;
  for (;;) {
    absl::StatusOr<std::string> request = ReceiveFrame(fd, absl::InfiniteFuture());
    if (!request.ok()) return 0;  // parent went away
    bool exit = false;
    if (!SendFrame(fd, worker.Handle(*request, &exit))) return 1;
    if (exit) return 0;
  }
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Spawn() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  const std::string flag = absl::StrCat(kWorkerFlag, fds[1]);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // Exec at once: no CUDA in a forked copy of a process that may have initialized it.
    char* const args[] = {const_cast<char*>("kvo_gpu_worker"), const_cast<char*>(flag.c_str()),
                          nullptr};
    execv("/proc/self/exe", args);
    _exit(127);
  }
  close(fds[1]);
  return std::unique_ptr<WorkerProcess>(new WorkerProcess(fds[0], pid));
}

WorkerProcess::~WorkerProcess() {
  Writer w;
  w.U64(kExit);
  (void)Call(w.data(), absl::Seconds(10));
  close(fd_);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    usleep(100 * 1000);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

absl::StatusOr<std::string> WorkerProcess::Call(const std::string& request,
                                                absl::Duration timeout) {
  if (!SendFrame(fd_, request)) return absl::UnavailableError("worker connection closed");
  absl::StatusOr<std::string> frame = ReceiveFrame(fd_, absl::Now() + timeout);
  if (!frame.ok()) return frame.status();
  std::string payload;
  absl::Status s = ParseReply(*frame, &payload);
  if (!s.ok()) return s;
  return payload;
}

absl::StatusOr<daemon::WorkerRegistration> WorkerProcess::Setup(const WorkerLayout& layout,
                                                                uint64_t generation,
                                                                int num_events) {
  Writer w;
  w.U64(kSetup).U64(layout.buffer_bytes).U64(generation).U64(num_events).U64(
      layout.tensors.size());
  for (const TensorSpec& t : layout.tensors) {
    w.U64(t.offset).U64(t.num_blocks).U64(t.stride).U64(t.page_bytes);
  }
  absl::StatusOr<std::string> payload = Call(w.data(), absl::Seconds(120));
  if (!payload.ok()) return payload.status();
  Reader r(*payload);
  daemon::WorkerRegistration reg;
  uint64_t n = 0;
  if (!r.Bytes(&reg.device_uuid) || !r.U64(&n) || n != layout.tensors.size()) {
    return absl::InternalError("malformed setup reply");
  }
  for (const TensorSpec& t : layout.tensors) {
    daemon::TensorRegistration tr;
    if (!r.Bytes(&tr.allocation_handle) || !r.U64(&tr.allocation_bytes) || !r.U64(&tr.offset)) {
      return absl::InternalError("malformed setup reply");
    }
    tr.num_blocks = t.num_blocks;
    tr.block_stride_bytes = t.stride;
    tr.page_bytes = t.page_bytes;
    reg.tensors.push_back(std::move(tr));
  }
  uint64_t events = 0;
  if (!r.U64(&events)) return absl::InternalError("malformed setup reply");
  for (uint64_t i = 0; i < events; ++i) {
    std::string h;
    if (!r.Bytes(&h)) return absl::InternalError("malformed setup reply");
    reg.event_handles.push_back(std::move(h));
  }
  return reg;
}

absl::Status WorkerProcess::Fill(uint64_t generation) {
  Writer w;
  w.U64(kFill).U64(generation);
  return Call(w.data(), absl::Seconds(60)).status();
}

absl::Status WorkerProcess::SpinFillRecord(absl::Duration spin, uint64_t generation,
                                           int event_index) {
  Writer w;
  w.U64(kSpinFillRecord).U64(absl::ToInt64Nanoseconds(spin)).U64(generation).U64(event_index);
  return Call(w.data(), absl::Seconds(60)).status();
}

absl::Status WorkerProcess::Sync() {
  Writer w;
  w.U64(kSync);
  return Call(w.data(), absl::Seconds(120)).status();
}

absl::Status WorkerProcess::WaitEvent(int event_index) {
  Writer w;
  w.U64(kWaitEvent).U64(event_index);
  return Call(w.data(), absl::Seconds(60)).status();
}

absl::StatusOr<uint64_t> WorkerProcess::CountMismatches(uint64_t rest_generation,
                                                        const std::vector<Expect>& expect,
                                                        std::string* detail) {
  Writer w;
  w.U64(kVerify).U64(rest_generation).U64(expect.size());
  for (const Expect& e : expect) w.U64(e.dst_block).U64(e.src_block).U64(e.src_generation);
  absl::StatusOr<std::string> payload = Call(w.data(), absl::Seconds(300));
  if (!payload.ok()) return payload.status();
  Reader r(*payload);
  uint64_t mismatches = 0;
  std::string d;
  if (!r.U64(&mismatches) || !r.Bytes(&d)) return absl::InternalError("malformed verify reply");
  if (detail != nullptr) *detail = d;
  return mismatches;
}

}  // namespace kvoffload::testing
