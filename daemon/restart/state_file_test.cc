// The state file format (durable regions): what a daemon writes is what the next one reads back through
// a descriptor (the fd store's copy); a truncated or corrupted file is refused with DATA_LOSS;
// a corrupted record is FREE, never a wrong row; an index restored from it serves the same keys.
#include "daemon/restart/state_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/geometry.h"
#include "daemon/index/slot_index.h"
#include "daemon/index/testing/row_lists.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::HasSubstr;

common::EngineSpec Spec(uint64_t budget = 64 << 20) {
  common::EngineSpec s;
  s.engine_id = "restart-test";
  s.dp_rank = 3;
  s.num_layers = 4;
  s.page_bytes = 16384;  // 64 KiB rows
  s.budget_bytes = budget;
  s.member_uids = {1001, 1002};
  s.member_gids = {2001};
  return s;
}

StateIdentity Identity() {
  StateIdentity id;
  id.spec = Spec();
  id.owner_uid = 1000;
  id.region_epoch = 0x1234567890abcdefull;
  return id;
}

common::Geometry GeometryOf(const common::EngineSpec& spec) {
  auto g = common::ComputeGeometry(spec);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

// What a restart hands the next daemon: a duplicate of the memfd; this one's mapping goes away.
UniqueFd Keep(const StateFile& file) { return UniqueFd(dup(file.fd())); }

TEST(StateFileTest, RecordsAreOneCacheLineAndOverheadIsSmall) {
  EXPECT_EQ(StateFile::RecordBytes(StateFile::kDefaultKeyCapacity), 64u);
  EXPECT_EQ(StateFile::RecordBytes(256), 280u);
  const common::Geometry g = GeometryOf(Spec());
  auto bytes = StateFile::BytesFor(Identity(), g, StateFile::kDefaultKeyCapacity);
  ASSERT_TRUE(bytes.ok());
  // 1024 rows of 64 KiB: 64 KiB of records plus two header pages (spec, layout) = 0.11 %.
  EXPECT_EQ(*bytes, 8192u + g.num_rows * 64);
  EXPECT_LT(static_cast<double>(*bytes) / g.capacity_bytes, 0.0012);
  EXPECT_EQ(StateFile::BytesFor(Identity(), g, 7).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StateFileTest, WhatIsWrittenComesBackThroughTheDescriptor) {
  const common::Geometry g = GeometryOf(Spec());
  UniqueFd kept;
  {
    auto file = StateFile::Create(Identity(), g, StateFile::kDefaultKeyCapacity);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ((*file)->bytes(), *StateFile::BytesFor(Identity(), g, 40));
    (*file)->RecordLayout({8192, 8192, 8192, 8192, 32768});
    (*file)->OnTicketsReserved(70000);
    (*file)->OnReady(5, "key-five", 11);
    (*file)->OnReady(7, std::string(40, 'x'), 12);  // exactly the capacity
    (*file)->OnReady(8, std::string(41, 'y'), 13);  // too long: not durable
    (*file)->OnReady(9, "evicted", 14);
    (*file)->OnFree(9);
    (*file)->OnTouch(5);  // now the most recent
    EXPECT_EQ((*file)->rows_not_durable(), 1u);
    kept = Keep(**file);
  }
  auto adopted = StateFile::Adopt(std::move(kept));
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ(adopted->identity.spec, Spec());
  EXPECT_EQ(adopted->identity.spec.member_uids, Spec().member_uids);
  EXPECT_EQ(adopted->identity.spec.member_gids, Spec().member_gids);
  EXPECT_EQ(adopted->identity.owner_uid, 1000u);
  EXPECT_EQ(adopted->identity.region_epoch, 0x1234567890abcdefull);
  EXPECT_EQ(adopted->geometry.num_rows, g.num_rows);
  EXPECT_EQ(adopted->next_ticket, 70000u);
  // Stamped at Create (wall clock): later than a time taken before this test ran.
  EXPECT_GT(adopted->created_ns, uint64_t{1700000000} * 1000000000);
  EXPECT_EQ(adopted->layout, (std::vector<uint64_t>{8192, 8192, 8192, 8192, 32768}));
  ASSERT_EQ(adopted->rows.size(), 2u);
  std::map<uint32_t, RestoredRow> by_row;
  for (const RestoredRow& r : adopted->rows) by_row[r.row] = r;
  EXPECT_EQ(by_row[5].key, "key-five");
  EXPECT_EQ(by_row[5].ticket, 11u);
  EXPECT_EQ(by_row[7].key, std::string(40, 'x'));
  EXPECT_GT(by_row[5].seq, by_row[7].seq);

  // The index built from it, journaling into the same file, survives a second restart too.
  UniqueFd again(dup(adopted->file->fd()));
  auto restored = SlotIndex::Restore(adopted->geometry.num_rows, adopted->rows,
                                     adopted->next_ticket, std::move(adopted->file));
  ASSERT_TRUE(restored.ok());
  auto rows = restored->index->PrepareLoad({"key-five", std::string(40, 'x')});
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ((*rows)[0], 5u);
  EXPECT_EQ((*rows)[1], 7u);
  ASSERT_TRUE(restored->index->CompleteLoad({"key-five", std::string(40, 'x')}).ok());
  auto store = restored->index->PrepareStore({"new"});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(store->ticket, 70000u);
  ASSERT_TRUE(BeginCopy(*restored->index, CopyDirection::kStore, store->rows).ok());
  ASSERT_TRUE(EndStoreCopy(*restored->index, store->rows, true).ok());
  ASSERT_TRUE(restored->index->CompleteStore({"new"}, true).ok());
  restored->index.reset();
  auto second = StateFile::Adopt(std::move(again));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->rows.size(), 3u);
  EXPECT_EQ(second->next_ticket, 70000u + (1u << 16));  // reserved when "new" took its ticket
}

// Bytes of the file behind a descriptor, for corrupting it.
uint8_t* Map(int fd, uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<uint8_t*>(p);
}

class CorruptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ = GeometryOf(Spec());
    auto file = StateFile::Create(Identity(), g_, StateFile::kDefaultKeyCapacity);
    ASSERT_TRUE(file.ok());
    (*file)->RecordLayout({4096, 4096});
    for (uint32_t row = 0; row < 10; ++row) (*file)->OnReady(row, absl::StrCat("k", row), 1);
    bytes_ = (*file)->bytes();
    fd_ = Keep(**file);
    data_ = Map(fd_.get(), bytes_);
  }
  void TearDown() override { munmap(data_, bytes_); }
  uint8_t* Record(uint32_t row) { return data_ + 8192 + uint64_t{row} * 64; }
  absl::StatusOr<StateFile::Adopted> Adopt() { return StateFile::Adopt(UniqueFd(dup(fd_.get()))); }

  common::Geometry g_;
  uint64_t bytes_ = 0;
  UniqueFd fd_;
  uint8_t* data_ = nullptr;
};

TEST_F(CorruptTest, IntactFileRestoresEveryRecord) {
  auto a = Adopt();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rows.size(), 10u);
}

TEST_F(CorruptTest, TruncatedFileIsDataLoss) {
  ASSERT_EQ(ftruncate(fd_.get(), static_cast<off_t>(bytes_ - 64)), 0);
  auto a = Adopt();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(a.status().message(), HasSubstr("truncated"));
  ASSERT_EQ(ftruncate(fd_.get(), 100), 0);
  EXPECT_EQ(Adopt().status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(CorruptTest, CorruptedHeaderIsDataLoss) {
  data_[0] ^= 1;  // magic
  EXPECT_EQ(Adopt().status().code(), absl::StatusCode::kDataLoss);
  data_[0] ^= 1;
  data_[40] ^= 0x10;  // num_rows / row_bytes area: the checksum catches it
  auto a = Adopt();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(a.status().message(), HasSubstr("checksum"));
  data_[40] ^= 0x10;
  data_[256 + 3] ^= 0xff;  // inside the serialized spec
  EXPECT_EQ(Adopt().status().code(), absl::StatusCode::kDataLoss);
  data_[256 + 3] ^= 0xff;
  data_[128] ^= 1;  // the ticket reservation
  EXPECT_EQ(Adopt().status().code(), absl::StatusCode::kDataLoss);
  data_[128] ^= 1;
  EXPECT_TRUE(Adopt().ok());
}

TEST_F(CorruptTest, NewerVersionIsRefused) {
  data_[8] = 2;
  EXPECT_EQ(Adopt().status().code(), absl::StatusCode::kFailedPrecondition);
}

// A record no crash can leave (only corruption can) means nothing of the file is trusted: the
// engine starts empty under a new region epoch (DATA_LOSS here), never with some rows missing
// under the old epoch, which would tell clients that every row survived. The recency seq is not
// covered: a stale one only moves a row in LRU.
TEST_F(CorruptTest, ACorruptedRecordRefusesTheWholeFile) {
  std::memset(Record(6) + 8, 0xff, 8);  // seq
  auto intact = Adopt();
  ASSERT_TRUE(intact.ok()) << intact.status();
  EXPECT_EQ(intact->rows.size(), 10u);
  intact->file.reset();
  struct Corruption {
    uint32_t row;
    size_t offset;
    uint8_t value;  // XOR-ed in
    const char* what;
  };
  const Corruption corruptions[] = {
      {2, 24, 1, "a key byte: the checksum no longer holds"},
      {3, 4, 1, "the ticket"},
      {4, 0, 0x02, "a state word that is neither FREE nor READY"},
      {5, 20, 0xc8, "key_size beyond the capacity"},
  };
  for (const Corruption& c : corruptions) {
    Record(c.row)[c.offset] ^= c.value;
    auto a = Adopt();
    EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss) << c.what;
    EXPECT_THAT(a.status().message(), HasSubstr("1 of 10 row records are corrupted")) << c.what;
    EXPECT_THAT(a.status().message(), HasSubstr("new region epoch")) << c.what;
    Record(c.row)[c.offset] ^= c.value;
  }
  // Nothing was rewritten: with the bytes back, every record verifies again.
  auto again = Adopt();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rows.size(), 10u);
}

TEST_F(CorruptTest, AnotherDaemonsGeometryIsRefused) {
  // A header whose geometry is not what this daemon computes from the spec (a daemon whose
  // sizing rules differ): written with a spec of 32 MiB and the geometry of 64 MiB.
  StateIdentity other = Identity();
  other.spec.budget_bytes = 32 << 20;
  auto file = StateFile::Create(other, GeometryOf(Spec()), StateFile::kDefaultKeyCapacity);
  ASSERT_TRUE(file.ok());
  auto a = StateFile::Adopt(Keep(**file));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a.status().message(), HasSubstr("geometry"));
}

// Without a valid layout no row comes back (a worker could split the same bytes differently):
// READY records under a corrupted layout page refuse the file like a corrupted record.
TEST_F(CorruptTest, NoRowWithoutItsLayout) {
  data_[4096 + 16] ^= 1;  // a layout run: its checksum no longer holds
  auto a = Adopt();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(a.status().message(),
              HasSubstr("10 of 10 row records are corrupted (the layout page does not verify)"));
  data_[4096 + 16] ^= 1;
  auto b = Adopt();
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->layout_recorded);
  EXPECT_EQ(b->rows.size(), 10u);
}

// No layout and no READY record is a state no worker joined yet: adopted, empty, layout open.
TEST(StateFileTest, NoLayoutAndNoRowsIsAFreshState) {
  auto file = StateFile::Create(Identity(), GeometryOf(Spec()), StateFile::kDefaultKeyCapacity);
  ASSERT_TRUE(file.ok());
  auto a = StateFile::Adopt(Keep(**file));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->layout_recorded);
  EXPECT_TRUE(a->rows.empty());
}

TEST(StateFileTest, LayoutsOfTooManyRunsAreNotRecorded) {
  const common::Geometry g = GeometryOf(Spec());
  auto file = StateFile::Create(Identity(), g, StateFile::kDefaultKeyCapacity);
  ASSERT_TRUE(file.ok());
  std::vector<uint64_t> pages;
  for (int i = 0; i < 300; ++i) pages.push_back(4096 * (1 + i % 2));  // 300 runs
  (*file)->RecordLayout(pages);
  (*file)->OnReady(0, "k", 1);
  // Its rows were never durable: the engine starts empty under a new epoch, as when corrupted.
  auto a = StateFile::Adopt(Keep(**file));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a.status().message(), HasSubstr("none of its 1 rows can be served"));
}

TEST(StateFileTest, NotAStateFileIsDataLoss) {
  UniqueFd fd(memfd_create("kvoffload:not-state", MFD_CLOEXEC));
  ASSERT_EQ(ftruncate(fd.get(), 1 << 20), 0);
  EXPECT_EQ(StateFile::Adopt(std::move(fd)).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvoffload::daemon
