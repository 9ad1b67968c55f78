// DiskTier: round trips, restart, corruption and truncation are misses, device faults through
// the FaultBlockIo seam, LRU eviction, namespace drop. Every test runs on io_uring and on the
// pread/pwrite implementation.
#include "daemon/tier/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/tier/block_io_factory.h"
#include "daemon/tier/record_format.h"
#include "daemon/tier/testing/fault_block_io.h"
#include "daemon/tier/testing/io_kinds.h"
#include "daemon/tier/testing/tier_test_util.h"
#include "daemon/tier/tier_file.h"
#include "gtest/gtest.h"

namespace kvoffload::tier {
namespace {

using testing::FaultBlockIo;
using testing::RandomPayload;
using testing::ReadAndWait;
using testing::WriteAndWait;

constexpr uint64_t kMaxPayload = 64 * 1024;
constexpr uint64_t kSlot = kRecordHeaderBytes + kMaxPayload;
constexpr uint64_t kNs = 0x1111;

bool SameBytes(const AlignedBuffer& a, const AlignedBuffer& b, uint64_t n) {
  return std::memcmp(a.data(), b.data(), n) == 0;
}

// Rewrites `bytes` bytes at `offset` of `path` with ordinary (buffered) I/O, then syncs: the
// tier's O_DIRECT reads see it.
void Poke(const std::string& path, uint64_t offset, const void* bytes, size_t n) {
  const int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, bytes, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  ASSERT_EQ(fsync(fd), 0);
  close(fd);
}

std::string Peek(const std::string& path, uint64_t offset, size_t n) {
  std::string out(n, '\0');
  const int fd = open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(pread(fd, out.data(), n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  close(fd);
  return out;
}

class DiskTierTest : public ::testing::TestWithParam<BlockIoKind> {
 protected:
  void SetUp() override { dir_ = testing::FreshDir("disk_tier"); }

  DiskTierOptions Options(uint64_t slots = 16) const {
    DiskTierOptions o;
    o.paths = {dir_};
    o.capacity_bytes = kSuperblockBytes + slots * kSlot;
    o.max_payload_bytes = kMaxPayload;
    o.queue_depth = 8;
    o.write_depth = 4;
    return o;
  }
  // Opens the tier; `fault` (if given) receives the fault injector it owns.
  std::unique_ptr<DiskTier> OpenTier(const DiskTierOptions& o, FaultBlockIo** fault = nullptr) {
    absl::StatusOr<std::unique_ptr<BlockIo>> io = MakeBlockIo(8, GetParam());
    EXPECT_TRUE(io.ok()) << io.status();
    auto wrapped = std::make_unique<FaultBlockIo>(*std::move(io));
    if (fault != nullptr) *fault = wrapped.get();
    absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Open(o, std::move(wrapped));
    EXPECT_TRUE(tier.ok()) << tier.status();
    return tier.ok() ? *std::move(tier) : nullptr;
  }
  std::string File0() const { return dir_ + "/kvtier.0.dat"; }

  std::string dir_;
};

TEST_P(DiskTierTest, RoundTripIsByteExactForManySizes) {
  std::unique_ptr<DiskTier> tier = OpenTier(Options());
  ASSERT_NE(tier, nullptr);
  const std::vector<uint64_t> sizes = {4096, 8192, 12288, 32768, 61440, kMaxPayload};
  for (size_t i = 0; i < sizes.size(); ++i) {
    AlignedBuffer in = RandomPayload(sizes[i], i);
    ASSERT_TRUE(WriteAndWait(*tier, kNs, absl::StrCat("k", i), in, sizes[i]).ok());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    AlignedBuffer in = RandomPayload(sizes[i], i);
    AlignedBuffer out(kMaxPayload);
    absl::StatusOr<uint64_t> n = ReadAndWait(*tier, kNs, absl::StrCat("k", i), out);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, sizes[i]);
    EXPECT_TRUE(SameBytes(in, out, sizes[i])) << sizes[i];
  }
  EXPECT_EQ(tier->stats().reads_ok, sizes.size());
  EXPECT_EQ(tier->stats().records, sizes.size());
}

TEST_P(DiskTierTest, RefusesBadArgumentsAndMissesWithNotFound) {
  std::unique_ptr<DiskTier> tier = OpenTier(Options());
  ASSERT_NE(tier, nullptr);
  AlignedBuffer in = RandomPayload(2 * kMaxPayload, 1);
  auto never = [](absl::Status) { ADD_FAILURE() << "done called on a refusal"; };
  EXPECT_EQ(tier->Write(kNs, "k", in.data(), 4000, never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Write(kNs, "k", in.data() + 512, 4096, never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Write(kNs, "k", in.data(), 2 * kMaxPayload, never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Write(kNs, "", in.data(), 4096, never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Write(kNs, std::string(kMaxKeyBytes + 1, 'k'), in.data(), 4096, never).code(),
            absl::StatusCode::kInvalidArgument);
  AlignedBuffer out(4096);
  EXPECT_EQ(ReadAndWait(*tier, kNs, "absent", out).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "big", in, 8192).ok());
  EXPECT_EQ(ReadAndWait(*tier, kNs, "big", out).status().code(),
            absl::StatusCode::kInvalidArgument);  // destination smaller than the record
  EXPECT_EQ(ReadAndWait(*tier, kNs + 1, "big", out).status().code(),
            absl::StatusCode::kNotFound);  // another namespace
  EXPECT_EQ(tier->stats().read_misses, 2u);
}

TEST_P(DiskTierTest, ReopenServesEveryCommittedRecordByteExact) {
  constexpr int kRecords = 12;
  {
    std::unique_ptr<DiskTier> tier = OpenTier(Options());
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < kRecords; ++i) {
      AlignedBuffer in = RandomPayload(kMaxPayload, 100 + i);
      ASSERT_TRUE(WriteAndWait(*tier, kNs + i % 3, absl::StrCat("key", i), in, kMaxPayload).ok());
    }
    // Rewriting a key: the newer generation must win after the restart.
    AlignedBuffer newer = RandomPayload(kMaxPayload, 999);
    ASSERT_TRUE(WriteAndWait(*tier, kNs, "key0", newer, kMaxPayload).ok());
  }
  std::unique_ptr<DiskTier> tier = OpenTier(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().scan_records, static_cast<uint64_t>(kRecords));
  EXPECT_EQ(tier->stats().files_formatted, 0u);
  for (int i = 0; i < kRecords; ++i) {
    AlignedBuffer want = RandomPayload(kMaxPayload, i == 0 ? 999 : 100 + i);
    AlignedBuffer out(kMaxPayload);
    absl::StatusOr<uint64_t> n = ReadAndWait(*tier, kNs + i % 3, absl::StrCat("key", i), out);
    ASSERT_TRUE(n.ok()) << i << " " << n.status();
    EXPECT_TRUE(SameBytes(want, out, kMaxPayload)) << i;
  }
  // New writes after the restart get generations above the restored ones.
  AlignedBuffer again = RandomPayload(kMaxPayload, 5000);
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "key0", again, kMaxPayload).ok());
  tier.reset();
  tier = OpenTier(Options());
  AlignedBuffer out(kMaxPayload);
  ASSERT_TRUE(ReadAndWait(*tier, kNs, "key0", out).ok());
  EXPECT_TRUE(SameBytes(again, out, kMaxPayload));
}

TEST_P(DiskTierTest, CorruptPayloadIsAMissCountedAndForgotten) {
  std::unique_ptr<DiskTier> tier = OpenTier(Options());
  ASSERT_NE(tier, nullptr);
  AlignedBuffer in = RandomPayload(kMaxPayload, 7);
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "k", in, kMaxPayload).ok());
  // The first write lands in slot 0 of the only file: payload at superblock + header.
  const char flipped = static_cast<char>(in.data()[100] ^ 0x40);
  Poke(File0(), kSuperblockBytes + kRecordHeaderBytes + 100, &flipped, 1);
  AlignedBuffer out(kMaxPayload);
  EXPECT_EQ(ReadAndWait(*tier, kNs, "k", out).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(tier->stats().read_corrupt, 1u);
  EXPECT_FALSE(tier->Contains(kNs, "k"));
  EXPECT_EQ(ReadAndWait(*tier, kNs, "k", out).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(DiskTierTest, HeaderOfAnotherRecordOrNamespaceIsAMiss) {
  std::unique_ptr<DiskTier> tier = OpenTier(Options());
  ASSERT_NE(tier, nullptr);
  AlignedBuffer a = RandomPayload(kMaxPayload, 1);
  AlignedBuffer b = RandomPayload(kMaxPayload, 2);
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "a", a, kMaxPayload).ok());       // slot 0
  ASSERT_TRUE(WriteAndWait(*tier, kNs + 1, "a", b, kMaxPayload).ok());   // slot 1
  // Slot 0 now carries slot 1's header (a valid header naming another namespace) and payload.
  const std::string other = Peek(File0(), kSuperblockBytes + kSlot, kSlot);
  Poke(File0(), kSuperblockBytes, other.data(), other.size());
  AlignedBuffer out(kMaxPayload);
  EXPECT_EQ(ReadAndWait(*tier, kNs, "a", out).status().code(), absl::StatusCode::kDataLoss);
  // A torn header (its own checksum fails) is also a miss.
  const char junk = 0x5a;
  Poke(File0(), kSuperblockBytes + kSlot + 60, &junk, 1);
  EXPECT_EQ(ReadAndWait(*tier, kNs + 1, "a", out).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(tier->stats().read_corrupt, 2u);
  EXPECT_EQ(tier->stats().reads_ok, 0u);
}

TEST_P(DiskTierTest, TruncatedFileKeepsWholeRecordsAndMissesTheCutOne) {
  {
    std::unique_ptr<DiskTier> tier = OpenTier(Options());
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < 3; ++i) {
      AlignedBuffer in = RandomPayload(kMaxPayload, 30 + i);
      ASSERT_TRUE(WriteAndWait(*tier, kNs, absl::StrCat("t", i), in, kMaxPayload).ok());
    }
  }
  // Cut the file in the middle of slot 1's payload; slot 2 is gone entirely.
  ASSERT_EQ(truncate(File0().c_str(), kSuperblockBytes + kSlot + kRecordHeaderBytes + 8192), 0);
  std::unique_ptr<DiskTier> tier = OpenTier(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().scan_records, 2u);  // t0 whole, t1's header survived
  AlignedBuffer out(kMaxPayload);
  ASSERT_TRUE(ReadAndWait(*tier, kNs, "t0", out).ok());
  EXPECT_TRUE(SameBytes(RandomPayload(kMaxPayload, 30), out, kMaxPayload));
  EXPECT_EQ(ReadAndWait(*tier, kNs, "t1", out).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadAndWait(*tier, kNs, "t2", out).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tier->stats().read_corrupt, 1u);
}

TEST_P(DiskTierTest, DeviceErrorsGiveExactCodesAndLoseNothingCommitted) {
  FaultBlockIo* fault = nullptr;
  std::unique_ptr<DiskTier> tier = OpenTier(Options(), &fault);
  ASSERT_NE(tier, nullptr);
  AlignedBuffer keep = RandomPayload(kMaxPayload, 11);
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "keep", keep, kMaxPayload).ok());
  AlignedBuffer other = RandomPayload(kMaxPayload, 12);

  fault->FailWrites(ENOSPC, 1);
  EXPECT_EQ(WriteAndWait(*tier, kNs, "keep", other, kMaxPayload).code(),
            absl::StatusCode::kResourceExhausted);
  fault->FailWrites(EIO, 1);
  EXPECT_EQ(WriteAndWait(*tier, kNs, "x", other, kMaxPayload).code(), absl::StatusCode::kInternal);
  fault->TearWrites(kRecordHeaderBytes + 8192, 1);  // header and 8 KiB reach the disk
  EXPECT_EQ(WriteAndWait(*tier, kNs, "y", other, kMaxPayload).code(), absl::StatusCode::kInternal);
  fault->ShortWrites(kRecordHeaderBytes, 1);
  EXPECT_EQ(WriteAndWait(*tier, kNs, "z", other, kMaxPayload).code(), absl::StatusCode::kDataLoss);
  fault->FailReads(EIO, 1);
  AlignedBuffer out(kMaxPayload);
  EXPECT_EQ(ReadAndWait(*tier, kNs, "keep", out).status().code(), absl::StatusCode::kInternal);

  const DiskTierStats s = tier->stats();
  EXPECT_EQ(s.write_errors, 4u);
  EXPECT_EQ(s.read_errors, 1u);
  EXPECT_EQ(s.records, 1u);
  for (const char* k : {"x", "y", "z"}) EXPECT_FALSE(tier->Contains(kNs, k)) << k;
  // The committed record (overwrite attempt failed) reads back, before and after a restart,
  // and no torn record is ever served.
  ASSERT_TRUE(ReadAndWait(*tier, kNs, "keep", out).ok());
  EXPECT_TRUE(SameBytes(keep, out, kMaxPayload));
  tier.reset();
  tier = OpenTier(Options());
  ASSERT_TRUE(ReadAndWait(*tier, kNs, "keep", out).ok());
  EXPECT_TRUE(SameBytes(keep, out, kMaxPayload));
  // The failed writes all used the same freed slot, z last: z's header reached the disk with
  // only y's first 8 KiB of payload behind it, so the scan finds "z", whose read is DATA_LOSS;
  // "y" (header overwritten) is simply absent.
  EXPECT_EQ(ReadAndWait(*tier, kNs, "z", out).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadAndWait(*tier, kNs, "y", out).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tier->stats().reads_ok, 1u);
}

TEST_P(DiskTierTest, FullDiskAtOpenIsResourceExhausted) {
  absl::StatusOr<std::unique_ptr<BlockIo>> io = MakeBlockIo(4, GetParam());
  ASSERT_TRUE(io.ok());
  auto fault = std::make_unique<FaultBlockIo>(*std::move(io));
  fault->FailPreallocate(ENOSPC);
  EXPECT_EQ(DiskTier::Open(Options(), std::move(fault)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_P(DiskTierTest, EvictsLeastRecentlyUsedWithinTheByteBound) {
  std::unique_ptr<DiskTier> tier = OpenTier(Options(/*slots=*/4));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().capacity_slots, 4u);
  AlignedBuffer p = RandomPayload(4096, 3);
  AlignedBuffer out(4096);
  for (const char* k : {"a", "b", "c", "d"}) ASSERT_TRUE(WriteAndWait(*tier, kNs, k, p, 4096).ok());
  ASSERT_TRUE(ReadAndWait(*tier, kNs, "a", out).ok());  // a is now the most recent
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "e", p, 4096).ok());  // evicts b
  EXPECT_FALSE(tier->Contains(kNs, "b"));
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "f", p, 4096).ok());  // evicts c
  EXPECT_FALSE(tier->Contains(kNs, "c"));
  for (const char* k : {"a", "d", "e", "f"}) EXPECT_TRUE(tier->Contains(kNs, k)) << k;
  EXPECT_EQ(tier->stats().evictions, 2u);
  EXPECT_EQ(tier->stats().records, 4u);
}

TEST_P(DiskTierTest, DroppedNamespaceStaysDroppedAcrossRestart) {
  AlignedBuffer p = RandomPayload(8192, 4);
  {
    std::unique_ptr<DiskTier> tier = OpenTier(Options());
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(WriteAndWait(*tier, kNs, absl::StrCat("d", i), p, 8192).ok());
      ASSERT_TRUE(WriteAndWait(*tier, kNs + 1, absl::StrCat("d", i), p, 8192).ok());
    }
    ASSERT_TRUE(tier->DropNamespace(kNs).ok());
    EXPECT_FALSE(tier->Contains(kNs, "d0"));
    ASSERT_TRUE(WriteAndWait(*tier, kNs, "after", p, 8192).ok());  // the namespace lives on
  }
  std::unique_ptr<DiskTier> tier = OpenTier(Options());
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().records, 5u);
  AlignedBuffer out(8192);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ReadAndWait(*tier, kNs, absl::StrCat("d", i), out).status().code(),
              absl::StatusCode::kNotFound);
    ASSERT_TRUE(ReadAndWait(*tier, kNs + 1, absl::StrCat("d", i), out).ok());
  }
  ASSERT_TRUE(ReadAndWait(*tier, kNs, "after", out).ok());
  EXPECT_TRUE(SameBytes(p, out, 8192));
}

TEST_P(DiskTierTest, AnotherGeometryReformatsAndServesNothingOld) {
  AlignedBuffer p = RandomPayload(4096, 5);
  {
    std::unique_ptr<DiskTier> tier = OpenTier(Options(8));
    ASSERT_TRUE(WriteAndWait(*tier, kNs, "old", p, 4096).ok());
  }
  std::unique_ptr<DiskTier> tier = OpenTier(Options(6));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().files_formatted, 1u);
  EXPECT_FALSE(tier->Contains(kNs, "old"));
}

TEST_P(DiskTierTest, StripesAcrossPaths) {
  DiskTierOptions o = Options();
  o.paths = {dir_ + "/p0", dir_ + "/p1"};
  o.capacity_bytes = 2 * (kSuperblockBytes + 4 * kSlot);
  std::unique_ptr<DiskTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->stats().capacity_slots, 8u);
  AlignedBuffer p = RandomPayload(4096, 6);
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "s0", p, 4096).ok());
  ASSERT_TRUE(WriteAndWait(*tier, kNs, "s1", p, 4096).ok());
  // One record in slot 0 of each file.
  for (const char* f : {"/p0/kvtier.0.dat", "/p1/kvtier.1.dat"}) {
    EXPECT_EQ(Peek(dir_ + f, kSuperblockBytes, 8), "KVOTREC1") << f;
  }
}

INSTANTIATE_TEST_SUITE_P(Io, DiskTierTest,
                         testing::AllIoKinds(), testing::IoKindTestName);

}  // namespace
}  // namespace kvoffload::tier
