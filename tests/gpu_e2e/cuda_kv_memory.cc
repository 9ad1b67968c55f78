#include "tests/gpu_e2e/cuda_kv_memory.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tests/gpu_e2e/bench_kernels.h"

namespace kvoffload::testing {
namespace {

constexpr uint64_t kPatternBytes = 64ull << 20;

absl::Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " ", cudaGetErrorString(err)));
}

using Clock = std::chrono::steady_clock;
double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "3,4,9" (or "-" for none), as the scripted worker's own commands take them.
bool ParseList(const std::string& text, std::vector<uint64_t>* out) {
  out->clear();
  if (text == "-") return true;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    uint64_t v;
    if (!absl::SimpleAtoi(item, &v)) return false;
    out->push_back(v);
  }
  return true;
}

std::vector<uint64_t> Range(uint64_t first, uint64_t n) {
  std::vector<uint64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = first + i;
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaKvMemory>> CudaKvMemory::Create(const std::string& layout,
                                                                   uint32_t layers,
                                                                   uint64_t layer_page,
                                                                   uint64_t blocks) {
  auto plan = client::PlanKvLayout(layout, layers, layer_page, blocks);
  if (!plan.ok()) return plan.status();
  auto memory = std::unique_ptr<CudaKvMemory>(new CudaKvMemory());
  memory->layout_ = *plan;
  if (auto s = Cuda(cudaSetDevice(0), "cudaSetDevice"); !s.ok()) return s;
  if (auto s = Cuda(cudaStreamCreateWithFlags(&memory->stream_, cudaStreamNonBlocking),
                    "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  for (uint64_t bytes : plan->allocation_bytes) {
    void* p = nullptr;
    if (auto s = Cuda(cudaMalloc(&p, bytes), "cudaMalloc"); !s.ok()) return s;
    memory->allocations_.push_back(static_cast<uint8_t*>(p));
  }
  memory->overrides_.resize(blocks);
  return memory;
}

CudaKvMemory::~CudaKvMemory() {
  events_.reset();
  for (uint8_t* p : allocations_) cudaFree(p);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaKvMemory::Fill(uint64_t seed) {
  std::mt19937_64 rng(seed);
  patterns_.clear();
  for (size_t a = 0; a < allocations_.size(); ++a) {
    const uint64_t bytes = layout_.allocation_bytes[a];
    std::string pattern(std::min(bytes, kPatternBytes) & ~uint64_t{7}, '\0');
    for (size_t i = 0; i < pattern.size(); i += 8) {
      const uint64_t v = rng() | 1;
      std::memcpy(&pattern[i], &v, 8);
    }
    for (uint64_t off = 0; off < bytes; off += pattern.size()) {
      cudaMemcpy(allocations_[a] + off, pattern.data(),
                 std::min<uint64_t>(pattern.size(), bytes - off), cudaMemcpyHostToDevice);
    }
    patterns_.push_back(std::move(pattern));
  }
  // A pageable cudaMemcpy may return before its DMA lands; a store the daemon starts at once
  // (no event) must read the new bytes.
  cudaDeviceSynchronize();
  std::fill(overrides_.begin(), overrides_.end(), std::string());
}

std::string CudaKvMemory::ExpectedBlock(uint64_t block) const {
  if (!overrides_[block].empty()) return overrides_[block];
  std::string out;
  for (const auto& t : layout_.tensors) {
    const std::string& pattern = patterns_[t.allocation];
    uint64_t off = t.offset + block * t.stride;
    for (uint64_t done = 0; done < t.page;) {
      const uint64_t at = off % pattern.size();
      const uint64_t n = std::min<uint64_t>(t.page - done, pattern.size() - at);
      out.append(pattern, at, n);
      done += n;
      off += n;
    }
  }
  return out;
}

std::string CudaKvMemory::BlockBytes(uint64_t block) const {
  std::string out;
  for (const auto& t : layout_.tensors) {
    std::string page(t.page, '\0');
    cudaMemcpy(page.data(), allocations_[t.allocation] + t.offset + block * t.stride, t.page,
               cudaMemcpyDeviceToHost);
    out += page;
  }
  return out;
}

void CudaKvMemory::Clobber(uint64_t block) {
  for (const auto& t : layout_.tensors) {
    cudaMemset(allocations_[t.allocation] + t.offset + block * t.stride, 0xA5, t.page);
  }
  cudaDeviceSynchronize();
}

bool CudaKvMemory::Verify(uint64_t block) const {
  return BlockBytes(block) == ExpectedBlock(block);
}

void CudaKvMemory::WriteBlock(uint64_t block, const std::string& bytes, cudaStream_t stream) {
  uint64_t at = 0;
  for (const auto& t : layout_.tensors) {
    cudaMemcpyAsync(allocations_[t.allocation] + t.offset + block * t.stride, bytes.data() + at,
                    t.page, cudaMemcpyHostToDevice, stream);
    at += t.page;
  }
}

absl::Status CudaKvMemory::Describe(client::WorkerOptions* options) {
  auto events = client::cuda::EventPool::Create(8);
  if (!events.ok()) return events.status();
  events_ = std::move(*events);
  options->event_handles = events_->ipc_handles();
  options->device = 0;
  auto uuid = client::cuda::DeviceUuid(0);
  if (!uuid.ok()) return uuid.status();
  options->device_uuid = *uuid;
  for (const auto& t : layout_.tensors) {
    auto ref = client::cuda::ResolveAllocation(
        reinterpret_cast<uint64_t>(allocations_[t.allocation] + t.offset));
    if (!ref.ok()) return ref.status();
    options->tensors.push_back(
        {ref->ipc_handle, ref->allocation_bytes, ref->offset, layout_.blocks, t.stride, t.page});
  }
  return absl::OkStatus();
}

bool CudaKvMemory::HandleCommand(const std::vector<std::string>& w, client::WorkerClient& worker,
                                 std::ostream& out) {
  if (w[0] == "write_then_store" && w.size() >= 5) {
    WriteThenStore(w, worker, out);
  } else if (w[0] == "bench" && w.size() >= 6) {
    Bench(w, worker, out);
  } else if (w[0] == "latency" && w.size() >= 3) {
    Latency(w, worker, out);
  } else if (w[0] == "interference" && w.size() >= 4) {
    Interference(w, worker, out);
  } else if (w[0] == "submit_gated" && w.size() >= 7) {
    SubmitGated(w, worker, out);
  } else if (w[0] == "record_behind" && w.size() >= 3) {
    RecordBehind(w, out);
  } else if (w[0] == "busy" && w.size() >= 2) {
    Busy(w, out);
  } else {
    return false;
  }
  out.flush();
  return true;
}

// write_then_store JOB BLOCK ROW SEED: on the worker's stream, a 20 ms delay kernel and then new
// bytes for BLOCK, recorded in event 0; the store is submitted at once naming event 0. If the
// daemon did not wait on the event it would store the old bytes.
void CudaKvMemory::WriteThenStore(const std::vector<std::string>& w, client::WorkerClient& worker,
                                  std::ostream& out) {
  uint64_t job, block, row, seed;
  if (!absl::SimpleAtoi(w[1], &job) || !absl::SimpleAtoi(w[2], &block) ||
      !absl::SimpleAtoi(w[3], &row) || !absl::SimpleAtoi(w[4], &seed) || block >= blocks()) {
    out << "error bad arguments" << std::endl;
    return;
  }
  std::string fresh = ExpectedBlock(block);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= fresh.size(); i += 8) {
    const uint64_t v = rng() | 1;
    std::memcpy(&fresh[i], &v, 8);
  }
  LaunchDelay(20'000'000, stream_);
  WriteBlock(block, fresh, stream_);
  if (auto s = events_->Record(0, stream_); !s.ok()) {
    out << "error " << s.ToString() << std::endl;
    return;
  }
  client::JobRequest request{job, client::Direction::kStore, {block}, {row}, 0};
  absl::Status s = worker.Submit(request);
  cudaStreamSynchronize(stream_);  // keeps `fresh` alive until the async copy read it
  overrides_[block] = fresh;
  auto done =
      s.ok() ? worker.WaitFinished(job, absl::Seconds(30)) : absl::StatusOr<client::FinishedJob>(s);
  if (!done.ok()) {
    out << "error " << done.status().ToString() << std::endl;
  } else {
    out << "finished " << done->job_id << " " << static_cast<int>(done->status.code()) << " "
        << done->bytes << std::endl;
  }
}

// bench store|load JOB_BASE FIRST_ROW N REPS: jobs of blocks [0, N) ↔ rows [FIRST_ROW, +N).
// Single: each job timed alone, submit → finished (median). Pipelined: REPS jobs with two in
// flight, as an engine submitting every step would; bytes over the whole span.
void CudaKvMemory::Bench(const std::vector<std::string>& w, client::WorkerClient& worker,
                         std::ostream& out) {
  uint64_t job_base, first_row, n, reps;
  if (!absl::SimpleAtoi(w[2], &job_base) || !absl::SimpleAtoi(w[3], &first_row) ||
      !absl::SimpleAtoi(w[4], &n) || !absl::SimpleAtoi(w[5], &reps) || n > blocks() || reps == 0) {
    out << "error bad arguments" << std::endl;
    return;
  }
  const auto direction = w[1] == "load" ? client::Direction::kLoad : client::Direction::kStore;
  const std::vector<uint64_t> gpu_blocks = Range(0, n), rows = Range(first_row, n);
  uint64_t next_job = job_base;
  auto submit = [&]() -> absl::StatusOr<uint64_t> {
    client::JobRequest request{next_job++, direction, gpu_blocks, rows, -1};
    absl::Status s = worker.Submit(request);
    if (!s.ok()) return s;
    return request.job_id;
  };
  auto finish = [&](uint64_t id) -> absl::StatusOr<uint64_t> {
    auto done = worker.WaitFinished(id, absl::Seconds(60));
    if (!done.ok()) return done.status();
    if (!done->status.ok()) return done->status;
    return done->bytes;
  };
  std::vector<double> us;
  uint64_t bytes = 0;
  for (uint64_t r = 0; r < reps + 1; ++r) {  // one warm-up
    const auto t0 = Clock::now();
    auto id = submit();
    auto moved = id.ok() ? finish(*id) : id;
    const auto t1 = Clock::now();
    if (!moved.ok()) {
      out << "error " << moved.status().ToString() << std::endl;
      return;
    }
    bytes = *moved;
    if (r > 0) us.push_back(Micros(t0, t1));
  }
  const auto t0 = Clock::now();
  std::vector<uint64_t> in_flight;
  uint64_t total = 0;
  for (uint64_t r = 0; r < reps; ++r) {
    auto id = submit();
    if (!id.ok()) break;
    in_flight.push_back(*id);
    if (in_flight.size() == 2) {
      auto moved = finish(in_flight.front());
      in_flight.erase(in_flight.begin());
      if (!moved.ok()) {
        out << "error " << moved.status().ToString() << std::endl;
        return;
      }
      total += *moved;
    }
  }
  for (uint64_t id : in_flight) {
    auto moved = finish(id);
    if (!moved.ok()) {
      out << "error " << moved.status().ToString() << std::endl;
      return;
    }
    total += *moved;
  }
  const double span_us = Micros(t0, Clock::now());
  const double median = Median(us);
  out << absl::StrFormat("bench %s median_us=%.1f bytes=%d gbps=%.2f pipelined_gbps=%.2f", w[1],
                         median, bytes, bytes / median / 1e3, total / span_us / 1e3)
      << std::endl;
}

// latency N ROWS: N 1-block jobs (store, then load of the same row), submit → finished.
void CudaKvMemory::Latency(const std::vector<std::string>& w, client::WorkerClient& worker,
                           std::ostream& out) {
  uint64_t n, rows;
  if (!absl::SimpleAtoi(w[1], &n) || !absl::SimpleAtoi(w[2], &rows) || rows == 0 || n == 0) {
    out << "error bad arguments" << std::endl;
    return;
  }
  std::vector<double> us;
  for (uint64_t i = 0; i < n + 50; ++i) {
    const auto direction = i % 2 == 0 ? client::Direction::kStore : client::Direction::kLoad;
    client::JobRequest request{1'000'000 + i, direction, {i % blocks()}, {(i / 2) % rows}, -1};
    const auto t0 = Clock::now();
    absl::Status s = worker.Submit(request);
    auto done = s.ok() ? worker.WaitFinished(request.job_id, absl::Seconds(10))
                       : absl::StatusOr<client::FinishedJob>(s);
    const auto t1 = Clock::now();
    if (!done.ok() || !done->status.ok()) {
      out << "error " << (done.ok() ? done->status : done.status()).ToString() << std::endl;
      return;
    }
    if (i >= 50) us.push_back(Micros(t0, t1));
  }
  std::sort(us.begin(), us.end());
  out << absl::StrFormat("latency p50_us=%.1f p99_us=%.1f n=%d", us[us.size() / 2],
                         us[std::min(us.size() - 1, us.size() * 99 / 100)], us.size())
      << std::endl;
}

// interference ITERATIONS N_BLOCKS ROWS: a compute-bound kernel on every SM, timed alone and
// while this worker keeps store and load jobs of N_BLOCKS blocks going.
void CudaKvMemory::Interference(const std::vector<std::string>& w, client::WorkerClient& worker,
                                std::ostream& out) {
  uint64_t iterations, n, rows;
  if (!absl::SimpleAtoi(w[1], &iterations) || !absl::SimpleAtoi(w[2], &n) ||
      !absl::SimpleAtoi(w[3], &rows) || n > blocks() || n > rows) {
    out << "error bad arguments" << std::endl;
    return;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int grid = prop.multiProcessorCount * 4;
  float* sink = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&sink), grid * 256 * sizeof(float));
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  auto time_kernels = [&](int launches) {
    cudaEventRecord(start, stream_);
    for (int i = 0; i < launches; ++i) LaunchBusyFma(sink, grid, 256, iterations, stream_);
    cudaEventRecord(stop, stream_);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return static_cast<double>(ms);
  };
  time_kernels(2);  // warm-up
  const int launches = 20;
  std::vector<double> alone;
  for (int r = 0; r < 3; ++r) alone.push_back(time_kernels(launches));

  std::atomic<bool> stop_traffic{false};
  std::atomic<uint64_t> moved{0};
  std::thread traffic([&] {
    for (uint64_t j = 0; !stop_traffic.load(); ++j) {
      const auto direction = j % 2 == 0 ? client::Direction::kStore : client::Direction::kLoad;
      client::JobRequest request{2'000'000 + j, direction, Range(0, n), Range(0, n), -1};
      if (!worker.Submit(request).ok()) return;
      auto done = worker.WaitFinished(request.job_id, absl::Seconds(60));
      if (!done.ok() || !done->status.ok()) return;
      moved += done->bytes;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // traffic in full flow
  const auto t0 = Clock::now();
  const uint64_t moved0 = moved.load();
  std::vector<double> loaded;
  for (int r = 0; r < 3; ++r) loaded.push_back(time_kernels(launches));
  const double seconds = Micros(t0, Clock::now()) / 1e6;
  const uint64_t moved_during = moved.load() - moved0;
  stop_traffic = true;
  traffic.join();
  cudaFree(sink);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double base = Median(alone), with = Median(loaded);
  out << absl::StrFormat(
             "interference alone_ms=%.3f loaded_ms=%.3f slowdown_pct=%.2f copy_gbps=%.2f", base,
             with, (with / base - 1) * 100, moved_during / seconds / 1e9)
      << std::endl;
}

// submit_gated store|load JOB BLOCKS ROWS SLOT DELAY_MS [PROBE_JOB PROBE_BLOCKS PROBE_ROWS]:
// records event SLOT on the worker's stream behind DELAY_MS of GPU work (a one-thread delay
// kernel; 0: behind only what the stream already holds, e.g. `busy`), submits the job naming SLOT
// and does not wait for it → "submitted JOB". With a probe it then submits a store PROBE_JOB
// naming no event and waits for it (20 s): one session's messages are handled in order, so the
// probe's verdict proves the daemon holds the gated part → "submitted JOB probe=finished PROBE
// CODE BYTES" (or "probe=error ..."). The test SIGKILLs the worker while the record is still
// queued: the event never fires.
void CudaKvMemory::SubmitGated(const std::vector<std::string>& w, client::WorkerClient& worker,
                               std::ostream& out) {
  client::JobRequest request;
  uint64_t slot, delay_ms;
  if ((w[1] != "store" && w[1] != "load") || !absl::SimpleAtoi(w[2], &request.job_id) ||
      !ParseList(w[3], &request.gpu_blocks) || !ParseList(w[4], &request.rows) ||
      !absl::SimpleAtoi(w[5], &slot) || !absl::SimpleAtoi(w[6], &delay_ms) ||
      slot >= events_->size() || (w.size() != 7 && w.size() != 10)) {
    out << "error bad arguments" << std::endl;
    return;
  }
  client::JobRequest probe;
  if (w.size() == 10 && (!absl::SimpleAtoi(w[7], &probe.job_id) ||
                         !ParseList(w[8], &probe.gpu_blocks) || !ParseList(w[9], &probe.rows))) {
    out << "error bad arguments" << std::endl;
    return;
  }
  request.direction = w[1] == "store" ? client::Direction::kStore : client::Direction::kLoad;
  request.event_index = static_cast<int32_t>(slot);
  if (delay_ms > 0) {
    if (auto s = Cuda(LaunchDelay(delay_ms * 1'000'000, stream_), "LaunchDelay"); !s.ok()) {
      out << "error " << s.ToString() << std::endl;
      return;
    }
  }
  if (auto s = events_->Record(slot, stream_); !s.ok()) {
    out << "error " << s.ToString() << std::endl;
    return;
  }
  if (auto s = worker.Submit(request); !s.ok()) {
    out << "error " << s.ToString() << std::endl;
    return;
  }
  std::string line = absl::StrCat("submitted ", request.job_id);
  if (w.size() == 10) {
    probe.direction = client::Direction::kStore;
    probe.event_index = -1;
    absl::Status s = worker.Submit(probe);
    auto done = s.ok() ? worker.WaitFinished(probe.job_id, absl::Seconds(20))
                       : absl::StatusOr<client::FinishedJob>(s);
    if (!done.ok()) {
      absl::StrAppend(&line, " probe=error ", static_cast<int>(done.status().code()));
    } else {
      absl::StrAppend(&line, " probe=finished ", done->job_id, " ",
                      static_cast<int>(done->status.code()), " ", done->bytes);
    }
  }
  out << line << std::endl;
}

// record_behind SLOT DELAY_MS: records event SLOT behind DELAY_MS of GPU work and submits
// nothing (a worker killed between its record and its submit) → "recorded SLOT".
void CudaKvMemory::RecordBehind(const std::vector<std::string>& w, std::ostream& out) {
  uint64_t slot, delay_ms;
  if (!absl::SimpleAtoi(w[1], &slot) || !absl::SimpleAtoi(w[2], &delay_ms) ||
      slot >= events_->size()) {
    out << "error bad arguments" << std::endl;
    return;
  }
  absl::Status s = Cuda(LaunchDelay(delay_ms * 1'000'000, stream_), "LaunchDelay");
  if (s.ok()) s = events_->Record(slot, stream_);
  out << (s.ok() ? absl::StrCat("recorded ", slot) : absl::StrCat("error ", s.ToString()))
      << std::endl;
}

// busy MS: queues MS milliseconds of GPU work that keeps every SM busy (spin kernels of at most
// 250 ms, two blocks of 512 threads per SM) on the worker's compute stream, and returns at once
// → "busy MS". Work submitted to the stream afterwards (e.g. submit_gated's record) runs only
// after it.
void CudaKvMemory::Busy(const std::vector<std::string>& w, std::ostream& out) {
  uint64_t ms;
  if (!absl::SimpleAtoi(w[1], &ms) || ms == 0) {
    out << "error bad arguments" << std::endl;
    return;
  }
  int sms = 0;
  if (auto s = Cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
                    "cudaDeviceGetAttribute");
      !s.ok()) {
    out << "error " << s.ToString() << std::endl;
    return;
  }
  for (uint64_t left = ms; left > 0;) {
    const uint64_t chunk = std::min<uint64_t>(left, 250);
    if (auto s = Cuda(LaunchSpin(chunk * 1'000'000, 2 * sms, 512, stream_), "LaunchSpin");
        !s.ok()) {
      out << "error " << s.ToString() << std::endl;
      return;
    }
    left -= chunk;
  }
  out << "busy " << ms << std::endl;
}

}  // namespace kvoffload::testing
