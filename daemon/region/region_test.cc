#include "daemon/region/region.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

int CountOpenFds() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

// Lines of /proc/self/maps that name a memfd of ours.
int CountRegionMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find("kvoffload:") != std::string::npos) ++count;
  }
  return count;
}

void FillRandom(uint8_t* data, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng() | 1;  // never a zero word
    std::memcpy(data + i, &v, 8);
  }
  for (; i < bytes; ++i) data[i] = static_cast<uint8_t>(rng() | 1);
}

bool MatchesRandom(const uint8_t* data, uint64_t bytes, uint64_t seed) {
  std::vector<uint8_t> expected(bytes);
  FillRandom(expected.data(), bytes, seed);
  return std::memcmp(expected.data(), data, bytes) == 0;
}

TEST(RegionTest, HasExactlyTheRequestedSize) {
  const uint64_t bytes = (3ull << 20) + 123;  // not a multiple of any page size
  auto region = Region::Create("exact", bytes, RegionOptions());
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->size(), bytes);
  struct stat st;
  ASSERT_EQ(fstat((*region)->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), bytes);
  EXPECT_FALSE((*region)->hugetlb());
  EXPECT_EQ((*region)->name(), "exact");
}

TEST(RegionTest, WholeRangeIsWritableAndReadable) {
  const uint64_t bytes = (16ull << 20) + 4096 + 17;
  auto region = Region::Create("rw", bytes, RegionOptions());
  ASSERT_TRUE(region.ok()) << region.status();
  uint8_t* data = (*region)->data();
  EXPECT_EQ(data[0], 0);
  EXPECT_EQ(data[bytes - 1], 0);
  FillRandom(data, bytes, 42);
  EXPECT_TRUE(MatchesRandom(data, bytes, 42));

  // The memfd is the memory: a second MAP_SHARED mapping sees the same bytes.
  void* again = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, (*region)->fd(), 0);
  ASSERT_NE(again, MAP_FAILED);
  EXPECT_EQ(std::memcmp(again, data, bytes), 0);
  munmap(again, bytes);
}

TEST(RegionTest, PopulatesWithSeveralThreadsBeforeReturning) {
  const uint64_t bytes = 64ull << 20;
  RegionOptions options;
  options.populate_threads = 4;
  auto region = Region::Create("populate", bytes, options);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->populate_threads(), 4);
  EXPECT_GE((*region)->populate_seconds(), 0.0);

  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  ASSERT_EQ(mincore((*region)->data(), bytes, resident.data()), 0);
  uint64_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) ? 0 : 1;
  EXPECT_EQ(missing, 0u) << "pages not resident after Create";
}

TEST(RegionTest, UsesFewerThreadsThanChunksForSmallRegions) {
  RegionOptions options;
  options.populate_threads = 16;
  auto region = Region::Create("small", 4096, options);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ((*region)->populate_threads(), 1);
}

TEST(RegionTest, ZeroSizeIsRejected) {
  auto region = Region::Create("zero", 0, RegionOptions());
  EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RegionTest, ImpossibleSizeFailsAndLeaksNothing) {
  const int fds_before = CountOpenFds();
  const int maps_before = CountRegionMappings();
  for (uint64_t bytes : {uint64_t{1} << 62, ~uint64_t{0}, uint64_t{1} << 47}) {
    auto region = Region::Create("impossible", bytes, RegionOptions());
    EXPECT_EQ(region.status().code(), absl::StatusCode::kResourceExhausted)
        << bytes << ": " << region.status();
    EXPECT_NE(region.status().message().find(std::to_string(bytes)), std::string::npos)
        << "the message names the size: " << region.status();
  }
  EXPECT_EQ(CountOpenFds(), fds_before);
  EXPECT_EQ(CountRegionMappings(), maps_before);
}

TEST(RegionTest, DestructorReleasesMappingAndFd) {
  const int fds_before = CountOpenFds();
  const int maps_before = CountRegionMappings();
  {
    auto region = Region::Create("scoped", 1 << 20, RegionOptions());
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(CountOpenFds(), fds_before + 1);
    EXPECT_GT(CountRegionMappings(), maps_before);
  }
  EXPECT_EQ(CountOpenFds(), fds_before);
  EXPECT_EQ(CountRegionMappings(), maps_before);
}

TEST(RegionTest, MoveTransfersOwnership) {
  auto created = Region::Create("move", 1 << 20, RegionOptions());
  ASSERT_TRUE(created.ok()) << created.status();
  Region& original = **created;
  original.data()[5] = 7;
  uint8_t* data = original.data();
  const int fd = original.fd();

  Region moved(std::move(original));
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.fd(), fd);
  EXPECT_EQ(moved.size(), 1u << 20);
  EXPECT_EQ(moved.data()[5], 7);
  EXPECT_EQ(original.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the state
  EXPECT_EQ(original.fd(), -1);
  EXPECT_EQ(original.size(), 0u);

  auto other = Region::Create("move2", 4096, RegionOptions());
  ASSERT_TRUE(other.ok()) << other.status();
  **other = std::move(moved);
  EXPECT_EQ((*other)->data(), data);
  EXPECT_EQ((*other)->data()[5], 7);
}

TEST(RegionTest, HugePagesFallBackToRegularPagesWithExactSize) {
  RegionOptions options;
  options.huge_pages = true;
  // Not a multiple of any huge page size: hugetlbfs cannot hold it exactly, so regular pages.
  const uint64_t odd = (2ull << 20) + 4096;
  auto region = Region::Create("huge-odd", odd, options);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_FALSE((*region)->hugetlb());
  struct stat st;
  ASSERT_EQ(fstat((*region)->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), odd);

  // A multiple of 2 MiB: hugetlb if the node has a pool, else the same fallback. Either way the
  // region exists with exactly the requested size and is usable.
  const uint64_t aligned = 4ull << 20;
  auto maybe_huge = Region::Create("huge-aligned", aligned, options);
  ASSERT_TRUE(maybe_huge.ok()) << maybe_huge.status();
  ASSERT_EQ(fstat((*maybe_huge)->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), aligned);
  FillRandom((*maybe_huge)->data(), aligned, 9);
  EXPECT_TRUE(MatchesRandom((*maybe_huge)->data(), aligned, 9));
}

// Durable regions: a region memfd kept by the service manager is mapped again by the next daemon, with
// its bytes, without being populated or cleared.
TEST(RegionTest, AdoptMapsAnExistingMemfdWithItsBytes) {
  const uint64_t bytes = 4ull << 20;
  RegionOptions options;
  options.populate_threads = 2;
  int kept = -1;
  {
    auto region = Region::Create("adopt-me", bytes, options);
    ASSERT_TRUE(region.ok()) << region.status();
    FillRandom((*region)->data(), bytes, 19);
    kept = dup((*region)->fd());  // what the fd store holds while the daemon restarts
    ASSERT_GE(kept, 0);
  }  // the first daemon's mapping and descriptor are gone
  const int fds_before = CountOpenFds();
  auto adopted = Region::Adopt(kept, "adopt-me", bytes, options);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ((*adopted)->size(), bytes);
  EXPECT_EQ((*adopted)->fd(), kept);
  EXPECT_EQ((*adopted)->populate_seconds(), 0);
  EXPECT_TRUE(MatchesRandom((*adopted)->data(), bytes, 19));
  adopted->reset();
  EXPECT_EQ(CountOpenFds(), fds_before - 1);  // the region owned and closed it
}

TEST(RegionTest, AdoptRefusesAFileOfAnotherSizeAndClosesIt) {
  const int fd = memfd_create("kvoffload:wrong-size", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  const int fds_before = CountOpenFds();
  auto adopted = Region::Adopt(fd, "wrong-size", 2 << 20, RegionOptions());
  EXPECT_EQ(adopted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CountOpenFds(), fds_before - 1);
  EXPECT_EQ(Region::Adopt(-1, "none", 4096, RegionOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int fd2 = memfd_create("kvoffload:zero", MFD_CLOEXEC);
  EXPECT_EQ(Region::Adopt(fd2, "zero", 0, RegionOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvoffload::daemon
