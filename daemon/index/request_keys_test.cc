#include "daemon/index/request_keys.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Rows 0..3 hold keys "a".."d"; row 1 is READY and idle, the others WRITING.
class RequestKeysTest : public ::testing::Test {
 protected:
  RequestKeysTest() : table_(rows_, 4) {
    for (uint32_t r = 0; r < 4; ++r) {
      rows_.SetKey(r, std::string(1, static_cast<char>('a' + r)));
      rows_[r].state = r == 1 ? RowState::kReady : RowState::kWriting;
      table_.Insert(r);
    }
  }
  bool AnyMarked() const {
    for (uint32_t r = 0; r < 4; ++r) {
      if (rows_[r].marked) return true;
    }
    return false;
  }
  static absl::Status Any(size_t, uint32_t, const RowTable::Row&) { return absl::OkStatus(); }

  RowTable rows_{4};
  KeyTable table_;
  RequestKeys request_;
};

TEST_F(RequestKeysTest, PresentKeysResolveToTheirRowsInRequestOrder) {
  ASSERT_TRUE(request_.ResolvePresent("Op", {"c", "a"}, rows_, table_, Any).ok());
  EXPECT_THAT(request_.rows(), ElementsAre(2, 0));
  EXPECT_FALSE(AnyMarked());
}

TEST_F(RequestKeysTest, TheFirstWrongKeyInRequestOrderIsRefusedAndNothingStaysMarked) {
  absl::Status status = request_.ResolvePresent("Op", {"a", "zz", "a"}, rows_, table_, Any);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(status.message(), "Op: key #1 (7a7a) is not in the index"));
  status = request_.ResolvePresent("Op", {"a", "b", "a"}, rows_, table_, Any);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "key #2"));
  status = request_.ResolvePresent("Op", {"a", ""}, rows_, table_, Any);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(request_.rows(), IsEmpty());
  EXPECT_FALSE(AnyMarked());
}

TEST_F(RequestKeysTest, TheCallersRuleRefusesByState) {
  auto ready_only = [](size_t i, uint32_t, const RowTable::Row& r) {
    return r.state == RowState::kReady ? absl::OkStatus()
                                       : absl::FailedPreconditionError(std::to_string(i));
  };
  EXPECT_TRUE(request_.ResolvePresent("Op", {"b"}, rows_, table_, ready_only).ok());
  const absl::Status status = request_.ResolvePresent("Op", {"b", "c"}, rows_, table_, ready_only);
  EXPECT_EQ(status, absl::FailedPreconditionError("1"));
  EXPECT_FALSE(AnyMarked());
}

TEST_F(RequestKeysTest, AStoreSplitsPresentFromNewKeysAndKeepsThePresentOnesMarked) {
  uint64_t protected_evictable = 0;
  uint64_t held_back[16] = {};
  ASSERT_TRUE(request_
                  .ResolveStore("Store", {"x", "b", "c", "y"}, rows_, table_, &protected_evictable,
                                held_back)
                  .ok());
  EXPECT_THAT(request_.rows(), ElementsAre(1, 2));
  EXPECT_THAT(request_.new_keys(), ElementsAre(0, 3));
  EXPECT_EQ(protected_evictable, 1u);  // b: READY and idle
  EXPECT_EQ(held_back[0], 1u);
  EXPECT_TRUE(rows_[1].marked && rows_[2].marked);
  request_.Unmark(rows_);
  EXPECT_FALSE(AnyMarked());
}

TEST_F(RequestKeysTest, AStoreRefusesDuplicatesAmongPresentAndNewKeys) {
  uint64_t protected_evictable = 0;
  absl::Status status =
      request_.ResolveStore("Store", {"b", "b"}, rows_, table_, &protected_evictable, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(AnyMarked());
  status = request_.ResolveStore("Store", {"b", "x", "y", "x"}, rows_, table_, &protected_evictable,
                                 nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "key #3"));
  EXPECT_FALSE(AnyMarked());
}

}  // namespace
}  // namespace kvoffload::daemon
