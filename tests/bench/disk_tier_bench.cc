// Disk tier benchmark: the device's own O_DIRECT ceiling measured by fio at the same
// block size and queue depth, then the tier's write and read GB/s against it, the latency of
// one record read alone (p50/p99), and the header scan a restart costs. Prints one JSON object
// (and writes it to --out). Needs fio on PATH (deploy/install_deps.sh).
//
//   bazel run //tests/bench:disk_tier_bench -- --dir=/nvme/bench --bytes=8589934592
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/block_io_factory.h"
#include "daemon/tier/disk_tier.h"
#include "daemon/tier/testing/tier_test_util.h"
#include "daemon/tier/tier_file.h"

ABSL_FLAG(std::string, dir, "/tmp/kvoffload-disk-tier-bench", "directory on the device to test");
ABSL_FLAG(uint64_t, bytes, 4ull << 30, "bytes written and read by fio and by the tier");
ABSL_FLAG(uint64_t, block, 2ull << 20, "fio block size = the tier's payload per record");
ABSL_FLAG(int32_t, qd, 32, "queue depth (fio iodepth, the tier's queue depth and write depth)");
ABSL_FLAG(std::string, io, "uring", "the tier's I/O: uring or pread");
ABSL_FLAG(int32_t, latency_samples, 200, "single-record reads timed alone");
ABSL_FLAG(std::string, out, "", "also write the JSON here");

namespace kvoffload::tier {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Runs fio once (one job, O_DIRECT, io_uring) and returns its bandwidth in bytes/s.
absl::StatusOr<double> Fio(const std::string& rw, const std::string& file) {
  const std::string cmd = absl::StrCat(
      "fio --name=ceiling --filename=", file, " --rw=", rw, " --direct=1 --ioengine=io_uring",
      " --bs=", absl::GetFlag(FLAGS_block), " --iodepth=", absl::GetFlag(FLAGS_qd),
      " --size=", absl::GetFlag(FLAGS_bytes), " --numjobs=1 --output-format=json 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::InternalError("popen fio");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return absl::InternalError("fio failed: " + out.substr(0, 2000));
  // One job, one direction: the largest "bw_bytes" is this run's (the other direction's is 0).
  std::regex re("\"bw_bytes\"\\s*:\\s*([0-9]+)");
  double best = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it) {
    best = std::max(best, std::stod((*it)[1]));
  }
  if (best == 0) return absl::InternalError("no bw_bytes in fio's output");
  return best;
}

// Keeps one request in flight per buffer over `count` records: start(i, buffer, done) must
// return OK and call done(ok) later. Returns seconds, or -1 if any request failed.
class Pipeline {
 public:
  explicit Pipeline(int depth) : depth_(depth), busy_(depth, false) {}

  template <typename StartFn>
  double Run(uint64_t count, StartFn start) {
    const auto t0 = Clock::now();
    for (uint64_t i = 0; i < count; ++i) {
      const size_t b = i % depth_;
      std::pair<Pipeline*, size_t> arg(this, b);
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::pair<Pipeline*, size_t>* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return !a->first->busy_[a->second];
            },
            &arg));
        busy_[b] = true;
      }
      absl::Status s = start(i, b, [this, b](bool ok) {
        absl::MutexLock lock(&mu_);
        busy_[b] = false;
        failed_ |= !ok;
      });
      if (!s.ok()) {
        absl::MutexLock lock(&mu_);
        busy_[b] = false;
        failed_ = true;
      }
    }
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Pipeline::AllFree));
    return failed_ ? -1 : Seconds(t0);
  }

 private:
  bool AllFree() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::none_of(busy_.begin(), busy_.end(), [](bool b) { return b; });
  }
  const size_t depth_;
  absl::Mutex mu_;
  std::vector<bool> busy_ ABSL_GUARDED_BY(mu_);
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<DiskTier>> OpenTier(const std::string& dir, uint64_t records) {
  DiskTierOptions o;
  o.paths = {dir};
  o.max_payload_bytes = absl::GetFlag(FLAGS_block);
  o.capacity_bytes = kSuperblockBytes + records * (kRecordHeaderBytes + o.max_payload_bytes);
  o.queue_depth = absl::GetFlag(FLAGS_qd);
  o.write_depth = o.queue_depth;  // writes alone here: no reads to protect
  const std::string kind = absl::GetFlag(FLAGS_io);
  auto io = MakeBlockIo(o.queue_depth, kind == "pread" ? BlockIoKind::kPosix : BlockIoKind::kUring);
  if (!io.ok()) return io.status();
  return DiskTier::Open(o, *std::move(io));
}

// The tier's files from an earlier run (one path: one data file and the drop list).
void RemoveTier(const std::string& dir) {
  std::remove((dir + "/kvtier.0.dat").c_str());
  std::remove((dir + "/kvtier.drops").c_str());
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const uint64_t block = absl::GetFlag(FLAGS_block);
  const int qd = absl::GetFlag(FLAGS_qd);
  const uint64_t records = absl::GetFlag(FLAGS_bytes) / block;
  const uint64_t payload_bytes = records * block;
  mkdir(dir.c_str(), 0750);
  RemoveTier(dir);

  const std::string fio_file = dir + "/fio.dat";
  absl::StatusOr<double> fio_write = Fio("write", fio_file);
  absl::StatusOr<double> fio_read = Fio("read", fio_file);
  std::remove(fio_file.c_str());
  if (!fio_write.ok() || !fio_read.ok()) {
    std::fprintf(stderr, "%s %s\n", fio_write.status().ToString().c_str(),
                 fio_read.status().ToString().c_str());
    return 1;
  }

  auto tier = OpenTier(dir, records);
  if (!tier.ok()) {
    std::fprintf(stderr, "%s\n", tier.status().ToString().c_str());
    return 1;
  }
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < qd; ++i) buffers.push_back(testing::RandomPayload(block, i));
  auto key = [](uint64_t i) { return absl::StrCat("record-", i); };
  Pipeline pipeline(qd);
  const double write_s = pipeline.Run(records, [&](uint64_t i, size_t b, auto done) {
    return (*tier)->Write(1, key(i), buffers[b].data(), block,
                          [done](absl::Status s) { done(s.ok()); });
  });
  const double read_s = pipeline.Run(records, [&](uint64_t i, size_t b, auto done) {
    return (*tier)->Read(1, key(i), buffers[b].data(), block,
                         [done](absl::StatusOr<uint64_t> n) { done(n.ok()); });
  });
  if (write_s < 0 || read_s < 0) {
    std::fprintf(stderr, "tier I/O failed\n");
    return 1;
  }
  std::vector<double> latency_us;
  for (int i = 0; i < absl::GetFlag(FLAGS_latency_samples); ++i) {
    const auto t0 = Clock::now();
    auto n = testing::ReadAndWait(**tier, 1, key(i % records), buffers[0]);
    if (!n.ok()) return 1;
    latency_us.push_back(Seconds(t0) * 1e6);
  }
  const std::string io_name(( *tier)->io_name());
  tier->reset();
  // The restart: reopen and scan every header.
  auto reopened = OpenTier(dir, records);
  if (!reopened.ok()) return 1;
  const DiskTierStats scan = (*reopened)->stats();
  reopened->reset();
  RemoveTier(dir);

  const double gb = 1e9;
  const double tier_write = payload_bytes / write_s, tier_read = payload_bytes / read_s;
  const double per_header_us = scan.scan_seconds / std::max<uint64_t>(1, scan.scan_records) * 1e6;
  const std::string json = absl::StrFormat(
      "{\"block_bytes\": %d, \"queue_depth\": %d, \"bytes\": %d, \"records\": %d, "
      "\"tier_io\": \"%s\", "
      "\"fio\": {\"write_gbps\": %.3f, \"read_gbps\": %.3f}, "
      "\"tier\": {\"write_gbps\": %.3f, \"read_gbps\": %.3f, "
      "\"read_one_record_p50_us\": %.1f, \"read_one_record_p99_us\": %.1f}, "
      "\"ratio\": {\"write\": %.3f, \"read\": %.3f}, "
      "\"scan\": {\"records\": %d, \"seconds\": %.4f, \"per_record_us\": %.2f, "
      "\"extrapolated_64GiB_of_2MiB_s\": %.3f}}",
      block, qd, payload_bytes, records, io_name, *fio_write / gb, *fio_read / gb,
      tier_write / gb, tier_read / gb, Percentile(latency_us, 0.5), Percentile(latency_us, 0.99),
      tier_write / *fio_write, tier_read / *fio_read, scan.scan_records, scan.scan_seconds,
      per_header_us, per_header_us * 32768 / 1e6);
  std::printf("%s\n", json.c_str());
  if (!absl::GetFlag(FLAGS_out).empty()) std::ofstream(absl::GetFlag(FLAGS_out)) << json << "\n";
  return 0;
}

}  // namespace
}  // namespace kvoffload::tier

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kvoffload::tier::Run();
}
