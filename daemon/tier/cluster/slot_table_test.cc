#include "daemon/tier/cluster/slot_table.h"

#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

TEST(SlotTable, RangesMapToTheirMasters) {
  absl::StatusOr<SlotTable> t = SlotTable::Build({{0, 5460, {"10.0.0.1", 7000}},
                                                  {5461, 10922, {"10.0.0.2", 7000}},
                                                  {10923, 16383, {"10.0.0.3", 7000}}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->masters().size(), 3u);
  EXPECT_EQ(t->covered_slots(), 16384);
  EXPECT_EQ(t->owner(0)->host, "10.0.0.1");
  EXPECT_EQ(t->owner(5460)->host, "10.0.0.1");
  EXPECT_EQ(t->owner(5461)->host, "10.0.0.2");
  EXPECT_EQ(t->owner(16383)->host, "10.0.0.3");
  EXPECT_EQ(t->owner(KeySlot("somekey"))->host, "10.0.0.3");  // 11058
}

TEST(SlotTable, OneMasterWithSeveralRangesIsListedOnce) {
  absl::StatusOr<SlotTable> t =
      SlotTable::Build({{0, 10, {"a", 1}}, {11, 20, {"b", 1}}, {21, 30, {"a", 1}}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->masters().size(), 2u);
  EXPECT_EQ(*t->owner(25), (NodeAddress{"a", 1}));
}

TEST(SlotTable, UncoveredSlotsHaveNoOwner) {
  absl::StatusOr<SlotTable> t = SlotTable::Build({{0, 99, {"a", 1}}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->covered_slots(), 100);
  EXPECT_EQ(t->owner(100), nullptr);
}

TEST(SlotTable, BadRangesAreRefused) {
  EXPECT_EQ(SlotTable::Build({{-1, 5, {"a", 1}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SlotTable::Build({{0, 16384, {"a", 1}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SlotTable::Build({{9, 5, {"a", 1}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseRedirect, MovedAndAsk) {
  std::optional<Redirect> m = ParseRedirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->kind, Redirect::kMoved);
  EXPECT_EQ(m->slot, 3999);
  EXPECT_EQ(m->target, (NodeAddress{"127.0.0.1", 6381}));
  std::optional<Redirect> a = ParseRedirect("ASK 3999 [::1]:6381");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, Redirect::kAsk);
  EXPECT_EQ(a->target.host, "::1");
}

TEST(ParseRedirect, OtherErrorsAreNotRedirects) {
  for (const char* e : {"CLUSTERDOWN The cluster is down", "ERR unknown command", "MOVED 3999",
                        "MOVED x 127.0.0.1:1", "MOVED 16384 127.0.0.1:1", "MOVED 1 :6379",
                        "ASK 1 h:1 extra", ""}) {
    EXPECT_FALSE(ParseRedirect(e).has_value()) << e;
  }
}

}  // namespace
}  // namespace kvoffload::tier::cluster
