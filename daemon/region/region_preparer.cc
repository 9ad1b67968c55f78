#include "daemon/region/region_preparer.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("region");
  return log;
}

constexpr uint64_t kSplitAlignment = 2ull << 20;  // pieces of chunk 0 end on huge pages

}  // namespace

uint64_t ChunkBytesFor(uint64_t row_bytes, uint64_t target) {
  if (row_bytes == 0) return target;
  return std::max<uint64_t>(1, target / row_bytes) * row_bytes;
}

std::unique_ptr<RegionPreparer> RegionPreparer::Start(const Region* region, Options options,
                                                      PinFn pin, ReadyFn ready) {
  std::unique_ptr<RegionPreparer> p(
      new RegionPreparer(region, std::move(options), std::move(pin), std::move(ready)));
  p->coordinator_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

RegionPreparer::RegionPreparer(const Region* region, Options options, PinFn pin, ReadyFn ready)
    : region_(region),
      options_(std::move(options)),
      pin_(std::move(pin)),
      ready_(std::move(ready)),
      chunks_((region->size() + options_.chunk_bytes - 1) / options_.chunk_bytes),
      start_(absl::Now()),
      done_(chunks_, false) {}

RegionPreparer::~RegionPreparer() { Stop(); }

void RegionPreparer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_.store(true, std::memory_order_release);
  }
  if (coordinator_.joinable()) coordinator_.join();
}

absl::Status RegionPreparer::WaitFirstChunk() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](RegionPreparer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return p->usable_bytes_ > 0 || p->first_waits_for_device_ || !p->status_.ok() ||
               p->finished_;
      },
      this));
  // Chunk 0 usable wins over a later chunk's failure: the prefix stays served, so OpenEngine
  // must not fail because chunk 1 failed before this waiter woke up. Chunk 0 still waiting for
  // a device when another chunk failed never will be pinned: that failure is the answer.
  if (usable_bytes_ > 0) return absl::OkStatus();
  if (!status_.ok()) return status_;
  if (first_waits_for_device_) return absl::OkStatus();
  return absl::CancelledError("the region's preparation was stopped");
}

absl::Status RegionPreparer::WaitAll() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](RegionPreparer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->finished_; }, this));
  if (!status_.ok()) return status_;
  if (done_count_ != chunks_) return absl::CancelledError("the region's preparation was stopped");
  return absl::OkStatus();
}

absl::Status RegionPreparer::WaitFirstChunkUsable(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](RegionPreparer* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
                             return p->usable_bytes_ > 0 || !p->status_.ok() || p->finished_;
                           },
                           this),
                       timeout);
  if (usable_bytes_ > 0) return absl::OkStatus();
  if (!status_.ok()) return status_;
  if (finished_) return absl::CancelledError("the region's preparation was stopped");
  return absl::DeadlineExceededError(absl::StrCat(
      "region '", region_->name(), "': chunk 0 is not usable after ", absl::FormatDuration(timeout),
      waiting_for_device_ > 0 ? " (its pin waits for a device)" : ""));
}

void RegionPreparer::RetryNow() {
  absl::MutexLock lock(&mu_);  // wakes the retry waits, which re-read the generation
  retry_generation_.fetch_add(1, std::memory_order_relaxed);
}

RegionPreparer::Progress RegionPreparer::progress() const {
  absl::MutexLock lock(&mu_);
  Progress p;
  p.total_bytes = region_->size();
  p.ready_bytes = std::min<uint64_t>(region_->size(), prefix_ * options_.chunk_bytes);
  p.chunk_bytes = options_.chunk_bytes;
  p.chunks = chunks_;
  p.chunks_ready = done_count_;
  p.waiting_for_device = waiting_for_device_ > 0;
  p.status = status_;
  p.first_ready_seconds = first_ready_seconds_;
  p.fully_ready_seconds = fully_ready_seconds_;
  return p;
}

void RegionPreparer::Run() {
  common::SetThreadName("kvo-prepare");
  absl::Status s = options_.populate ? PopulateFirstChunk() : absl::OkStatus();
  if (!s.ok()) Fail(s);
  std::vector<std::thread> pool;
  if (s.ok() && !stopping()) {
    // Populating: the other chunks start populating while chunk 0 is pinned. Pinning only: chunk
    // 0 first, alone (the driver serialises registrations; measured on the H200 after a restart,
    // chunk 0 of a 64 GiB region queued behind the others for 6.9 s).
    if (!options_.populate) PrepareChunk(0);
    const int threads = std::max(1, options_.threads);
    for (int i = 1; i < threads && static_cast<uint64_t>(i) < chunks_ && !stopping(); ++i) {
      pool.emplace_back([this] { RunChunks(); });
    }
    if (options_.populate) PrepareChunk(0);
    RunChunks();
  }
  for (std::thread& t : pool) t.join();
  absl::MutexLock lock(&mu_);
  finished_ = true;
  if (status_.ok() && done_count_ == chunks_) {
    Log()->info("region '{}': {} bytes ready in {} chunks after {:.3f} s (first after {:.3f} s)",
                region_->name(), region_->size(), chunks_, fully_ready_seconds_,
                first_ready_seconds_);
  }
}

void RegionPreparer::RunChunks() {
  common::SetThreadName("kvo-prepare");
  while (!stopping()) {
    const size_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) return;
    PrepareChunk(c);
  }
}

absl::Status RegionPreparer::PopulateFirstChunk() {
  const uint64_t bytes = std::min<uint64_t>(options_.chunk_bytes, region_->size());
  if (options_.populate_chunk) return options_.populate_chunk(0, 0, bytes);
  // All threads on chunk 0: it gates the first row.
  const int threads = std::max(1, options_.threads);
  uint64_t piece = (bytes + threads - 1) / threads;
  piece =
      std::max(kSplitAlignment, (piece + kSplitAlignment - 1) / kSplitAlignment * kSplitAlignment);
  const size_t pieces = (bytes + piece - 1) / piece;
  std::vector<absl::Status> statuses(pieces);
  std::vector<std::thread> workers;
  for (size_t i = 1; i < pieces; ++i) {
    workers.emplace_back([&, i] {
      const uint64_t begin = i * piece;
      statuses[i] = region_->PopulateRange(begin, std::min(bytes, begin + piece) - begin);
    });
  }
  statuses[0] = region_->PopulateRange(0, std::min(bytes, piece));
  for (std::thread& t : workers) t.join();
  for (absl::Status& st : statuses) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

void RegionPreparer::PrepareChunk(size_t c) {
  const uint64_t offset = c * options_.chunk_bytes;
  const uint64_t bytes = std::min<uint64_t>(options_.chunk_bytes, region_->size() - offset);
  if (c != 0 && options_.populate) {
    absl::Status s = options_.populate_chunk ? options_.populate_chunk(c, offset, bytes)
                                             : region_->PopulateRange(offset, bytes);
    if (!s.ok()) return Fail(s);
  }
  bool waiting = false;
  bool pinned = false;
  while (!stopping()) {
    // Read before the pin: a RetryNow while the pin answers UNAVAILABLE then ends the wait.
    const uint64_t generation = retry_generation_.load(std::memory_order_relaxed);
    absl::Status s = pin_(c);
    if (s.ok()) {
      pinned = true;
      break;
    }
    if (!absl::IsUnavailable(s)) {
      if (waiting) {
        absl::MutexLock lock(&mu_);
        --waiting_for_device_;
      }
      return Fail(absl::Status(s.code(), absl::StrCat("pinning chunk ", c, ": ", s.message())));
    }
    absl::MutexLock lock(&mu_);
    if (!waiting) {
      waiting = true;
      ++waiting_for_device_;
      if (c == 0) first_waits_for_device_ = true;  // populated; pinned once a worker brings one
    }
    // Woken early by Stop and by RetryNow.
    struct Wake {
      const RegionPreparer* p;
      uint64_t seen;
    } wake{this, generation};
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](Wake* w) {
                               return w->p->stop_.load() ||
                                      w->p->retry_generation_.load() != w->seen;
                             },
                             &wake),
                         options_.retry_after);
  }
  if (waiting) {
    absl::MutexLock lock(&mu_);
    --waiting_for_device_;
  }
  // A chunk pinned is reported even when another chunk's failure stops the rest meanwhile:
  // chunk 0 must not be lost to chunk N's error (Stop joins every thread before it returns, so
  // `ready` is still allowed here).
  if (!pinned) return;
  ChunkDone(c);
  if (options_.pause_between_pins > absl::ZeroDuration() && c + 1 < chunks_) {
    absl::MutexLock lock(&mu_);  // woken early by Stop
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::atomic<bool>* stop) { return stop->load(); }, &stop_),
                         options_.pause_between_pins);
  }
}

void RegionPreparer::ChunkDone(size_t c) {
  absl::MutexLock ready_lock(&ready_mu_);
  uint64_t ready_bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    done_[c] = true;
    ++done_count_;
    while (prefix_ < chunks_ && done_[prefix_]) ++prefix_;
    ready_bytes = std::min<uint64_t>(region_->size(), prefix_ * options_.chunk_bytes);
    const double now = absl::ToDoubleSeconds(absl::Now() - start_);
    if (ready_bytes > 0 && first_ready_seconds_ < 0) first_ready_seconds_ = now;
    if (prefix_ == chunks_ && fully_ready_seconds_ < 0) fully_ready_seconds_ = now;
  }
  if (ready_bytes > reported_) {
    reported_ = ready_bytes;
    ready_(ready_bytes);
    // Only after `ready` heard of it: the waiters return with these rows usable.
    absl::MutexLock lock(&mu_);
    usable_bytes_ = std::max(usable_bytes_, ready_bytes);
  }
}

void RegionPreparer::Fail(const absl::Status& s) {
  absl::MutexLock lock(&mu_);
  if (status_.ok()) {
    status_ = s;
    Log()->error("region '{}': preparing it stopped ({}); only its first {} bytes are served",
                 region_->name(), s.ToString(),
                 std::min<uint64_t>(region_->size(), prefix_ * options_.chunk_bytes));
  }
  stop_.store(true, std::memory_order_release);
}

}  // namespace kvoffload::daemon
