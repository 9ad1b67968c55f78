#include "daemon/engine/engine_table.h"

#include <memory>
#include <string>
#include <vector>

#include "daemon/engine/testing/engine_test_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using testing::EngineTestEnv;
using ::testing::IsEmpty;
using testing::PerRankSpec;

class EngineTableTest : public ::testing::Test {
 protected:
  // An engine "<id>/0" with region epoch `epoch`, in the table.
  std::shared_ptr<Engine> Add(const std::string& id, uint64_t epoch) {
    auto engine = Engine::Create(PerRankSpec(1, id), env_.deps(), epoch);
    EXPECT_TRUE(engine.ok()) << engine.status();
    table_.Insert((*engine)->key(), *engine);
    return *engine;
  }
  static std::vector<std::string> Keys(const std::vector<std::shared_ptr<Engine>>& engines) {
    std::vector<std::string> keys;
    for (const auto& engine : engines) keys.push_back(engine->key());
    return keys;
  }

  EngineTestEnv env_;
  EngineTable table_;
};

TEST_F(EngineTableTest, KeysAreEngineIdSlashDpRank) {
  EXPECT_EQ(EngineTable::KeyOf("llama", 3), "llama/3");
  EXPECT_EQ(PerRankSpec(1, "llama").Key(), EngineTable::KeyOf("llama", 0));
}

TEST_F(EngineTableTest, FindsEnginesByKeyAndByRegionEpoch) {
  std::shared_ptr<Engine> a = Add("a", 11);
  std::shared_ptr<Engine> b = Add("b", 12);
  EXPECT_EQ(table_.Find("a/0"), a);
  EXPECT_EQ(table_.Find("c/0"), nullptr);
  EXPECT_EQ(table_.HolderOfEpoch(12), "b/0");
  EXPECT_EQ(table_.HolderOfEpoch(13), "");
  EXPECT_EQ(table_.size(), 2u);
  EXPECT_THAT(Keys(table_.List()), ElementsAre("a/0", "b/0"));
}

TEST_F(EngineTableTest, HandsEnginesOutOfTheTable) {
  Add("a", 1);
  Add("b", 2);
  Add("c", 3);
  std::shared_ptr<Engine> b = table_.Take("b/0");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->key(), "b/0");
  EXPECT_EQ(table_.Take("b/0"), nullptr);
  EXPECT_THAT(Keys(table_.TakeIf([](const Engine& e) { return e.region_epoch() == 3; })),
              ElementsAre("c/0"));
  EXPECT_THAT(Keys(table_.TakeAll()), ElementsAre("a/0"));
  EXPECT_THAT(table_.List(), IsEmpty());
}

TEST_F(EngineTableTest, ATakenKeyKeepsItsEngine) {
  std::shared_ptr<Engine> first = Add("a", 1);
  auto second = Engine::Create(PerRankSpec(1, "a"), env_.deps(), 2);
  ASSERT_TRUE(second.ok()) << second.status();
  table_.Insert("a/0", *second);
  EXPECT_EQ(table_.Find("a/0"), first);
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(EngineTableTest, ShuttingDownIsForGood) {
  EXPECT_FALSE(table_.shutting_down());
  table_.StartShutdown();
  EXPECT_TRUE(table_.shutting_down());
}

}  // namespace
}  // namespace kvoffload::daemon
