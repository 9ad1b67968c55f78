// Durability: what goes to the fd store for an engine, what comes back, and what is refused at
// start (each refused descriptor removed from the store), against a recording fake store.
#include "daemon/restart/durability.h"

#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/geometry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

class FakeStore : public FdStore {
 public:
  bool enabled() const override { return true; }
  absl::Status Store(absl::string_view name, int fd) override {
    stored.emplace_back(std::string(name), UniqueFd(dup(fd)));
    return absl::OkStatus();
  }
  absl::Status Remove(absl::string_view name) override {
    removed.emplace_back(name);
    return absl::OkStatus();
  }
  std::string Describe() const override { return "fake"; }

  // What a manager passes back at the next start.
  std::vector<InheritedFd> Inherit() {
    std::vector<InheritedFd> out;
    for (auto& [name, fd] : stored) out.push_back(InheritedFd{name, UniqueFd(dup(fd.get()))});
    return out;
  }

  std::vector<std::pair<std::string, UniqueFd>> stored;
  std::vector<std::string> removed;
};

struct Engine {
  StateIdentity identity;
  common::Geometry geometry;
  UniqueFd region;
  std::unique_ptr<StateFile> state;
};

Engine MakeEngine(const std::string& id, uint64_t epoch) {
  Engine e;
  e.identity.spec.engine_id = id;
  e.identity.spec.num_layers = 2;
  e.identity.spec.page_bytes = 4096;
  e.identity.spec.budget_bytes = 1 << 20;
  e.identity.owner_uid = 42;
  e.identity.region_epoch = epoch;
  e.geometry = *common::ComputeGeometry(e.identity.spec);
  e.region.reset(memfd_create("region", MFD_CLOEXEC));
  EXPECT_EQ(ftruncate(e.region.get(), static_cast<off_t>(e.geometry.capacity_bytes)), 0);
  e.state = std::move(StateFile::Create(e.identity, e.geometry, 40)).value();
  return e;
}

TEST(DurabilityTest, PublishedEnginesComeBackPaired) {
  FakeStore store;
  Durability durability(&store, 40);
  Engine a = MakeEngine("a", 10);
  Engine b = MakeEngine("b", 11);
  a.state->RecordLayout({4096, 4096});
  a.state->OnReady(3, "key", 7);
  for (Engine* e : {&a, &b}) {
    ASSERT_TRUE(durability
                    .Publish(e->identity.region_epoch, e->identity.spec.Key(), e->region.get(),
                             e->state->fd())
                    .ok());
  }
  ASSERT_EQ(store.stored.size(), 4u);
  EXPECT_EQ(store.stored[0].first, StoredFdName(StoredKind::kRegion, 10, "a/0"));
  EXPECT_EQ(store.stored[1].first, StoredFdName(StoredKind::kState, 10, "a/0"));
  Durability::Collected c = durability.Collect(store.Inherit());
  EXPECT_EQ(c.refused, 0u);
  ASSERT_EQ(c.engines.size(), 2u);
  EXPECT_EQ(c.engines[0].state.identity.spec.Key(), "a/0");
  EXPECT_EQ(c.engines[0].state.identity.owner_uid, 42u);
  EXPECT_EQ(c.engines[0].state.layout, (std::vector<uint64_t>{4096, 4096}));
  ASSERT_EQ(c.engines[0].state.rows.size(), 1u);
  EXPECT_EQ(c.engines[0].state.rows[0].key, "key");
  EXPECT_TRUE(c.engines[0].region.valid());
  EXPECT_TRUE(store.removed.empty());

  durability.Forget(10, "a/0");
  EXPECT_THAT(store.removed, UnorderedElementsAre(StoredFdName(StoredKind::kState, 10, "a/0"),
                                                  StoredFdName(StoredKind::kRegion, 10, "a/0")));
}

TEST(DurabilityTest, RefusesWhatDoesNotPairAndRemovesIt) {
  FakeStore store;
  Durability durability(&store, 40);
  Engine a = MakeEngine("a", 1);  // state only
  Engine b = MakeEngine("b", 2);  // region only
  Engine c = MakeEngine("c", 3);  // region of the wrong size
  Engine d = MakeEngine("d", 4);  // state corrupted
  Engine ok = MakeEngine("ok", 5);
  ASSERT_EQ(ftruncate(c.region.get(), 4096), 0);
  const char junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(pwrite(d.state->fd(), junk, sizeof(junk), 0), 8);
  std::vector<InheritedFd> inherited;
  auto add = [&](StoredKind kind, const Engine& e, int fd) {
    inherited.push_back(InheritedFd{
        StoredFdName(kind, e.identity.region_epoch, e.identity.spec.Key()), UniqueFd(dup(fd))});
  };
  add(StoredKind::kState, a, a.state->fd());
  add(StoredKind::kRegion, b, b.region.get());
  add(StoredKind::kState, c, c.state->fd());
  add(StoredKind::kRegion, c, c.region.get());
  add(StoredKind::kState, d, d.state->fd());
  add(StoredKind::kRegion, d, d.region.get());
  add(StoredKind::kState, ok, ok.state->fd());
  add(StoredKind::kRegion, ok, ok.region.get());
  inherited.push_back(InheritedFd{"stored", UniqueFd(dup(ok.region.get()))});  // not ours
  Durability::Collected collected = durability.Collect(std::move(inherited));
  ASSERT_EQ(collected.engines.size(), 1u);
  EXPECT_EQ(collected.engines[0].state.identity.spec.Key(), "ok/0");
  EXPECT_EQ(collected.refused, 3u);  // a, c, d (b had no state to refuse)
  EXPECT_THAT(store.removed,
              UnorderedElementsAre("stored", StoredFdName(StoredKind::kState, 1, "a/0"),
                                   StoredFdName(StoredKind::kRegion, 2, "b/0"),
                                   StoredFdName(StoredKind::kState, 3, "c/0"),
                                   StoredFdName(StoredKind::kRegion, 3, "c/0"),
                                   StoredFdName(StoredKind::kState, 4, "d/0"),
                                   StoredFdName(StoredKind::kRegion, 4, "d/0")));
}

// Review S7: of two states of one engine the newer (creation time in the state, offset 136) is
// restored, whatever the region epochs; the older is refused and removed.
TEST(DurabilityTest, TheNewerOfTwoStatesOfOneEngineWins) {
  FakeStore store;
  Durability durability(&store, 40);
  Engine older = MakeEngine("a", 9);
  Engine newer = MakeEngine("a", 3);  // a lower epoch, created later
  auto set_created = [](const Engine& e, uint64_t ns) {
    ASSERT_EQ(pwrite(e.state->fd(), &ns, sizeof(ns), 136), static_cast<ssize_t>(sizeof(ns)));
  };
  set_created(older, 1000);
  set_created(newer, 2000);
  newer.state->RecordLayout({4096, 4096});
  newer.state->OnReady(1, "new", 5);
  std::vector<InheritedFd> inherited;
  for (const Engine* e : {&older, &newer}) {
    for (StoredKind kind : {StoredKind::kState, StoredKind::kRegion}) {
      inherited.push_back(InheritedFd{
          StoredFdName(kind, e->identity.region_epoch, e->identity.spec.Key()),
          UniqueFd(dup(kind == StoredKind::kState ? e->state->fd() : e->region.get()))});
    }
  }
  Durability::Collected c = durability.Collect(std::move(inherited));
  ASSERT_EQ(c.engines.size(), 1u);
  EXPECT_EQ(c.engines[0].state.identity.region_epoch, 3u);
  EXPECT_EQ(c.engines[0].state.created_ns, 2000u);
  ASSERT_EQ(c.engines[0].state.rows.size(), 1u);
  EXPECT_EQ(c.engines[0].state.rows[0].key, "new");
  EXPECT_EQ(c.refused, 1u);
  EXPECT_THAT(store.removed, UnorderedElementsAre(StoredFdName(StoredKind::kState, 9, "a/0"),
                                                  StoredFdName(StoredKind::kRegion, 9, "a/0")));
}

TEST(DurabilityTest, DisabledStoresNothing) {
  NoFdStore none;
  Durability durability(&none, 40);
  EXPECT_FALSE(durability.enabled());
  Engine a = MakeEngine("a", 1);
  EXPECT_EQ(*durability.StateBytes(a.identity, a.geometry), 0u);
  EXPECT_EQ(*durability.NewState(a.identity, a.geometry), nullptr);
  EXPECT_TRUE(durability.Publish(1, "a/0", a.region.get(), a.state->fd()).ok());
}

}  // namespace
}  // namespace kvoffload::daemon
