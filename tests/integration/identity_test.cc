// Identity and isolation: every attack found against main, reproduced against the real
// daemon from processes running as other uids (setpriv; CI runs as root), each refused with its
// exact status while the victim engine's keys, rows and bytes stay as they were; and the owners'
// own flows still pass.
//
// Cast: the daemon runs as root; its data socket belongs to group kSocketGroup and its admin
// socket to kAdminSocketGroup (both 0660). The victim (uid kVictim) and the attacker (uid
// kAttacker) are both in both socket groups: the attacker can reach everything the victim can.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/integration/engine_fixture.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {
namespace {

constexpr uint32_t kVictim = 65533;
constexpr uint32_t kAttacker = 65534;
constexpr uint32_t kOperator = 65532;  // in kAdminGroup
constexpr uint32_t kSocketGroup = 4242;
constexpr uint32_t kAdminSocketGroup = 4243;
constexpr uint32_t kAdminGroup = 4244;
constexpr char kDenied[] = "7 ";  // PERMISSION_DENIED, as identity_client prints it

// Copies a runfile binary where other uids can execute it (the runfiles tree is under root's home).
std::string Executable(const std::string& dir, const std::string& runfile) {
  const std::string to = absl::StrCat(dir, "/", runfile.substr(runfile.rfind('/') + 1));
  std::ifstream in(RunfilePath(runfile), std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  out.close();
  chmod(to.c_str(), 0755);
  return to;
}

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to run clients as other uids (CI runs as root)";
    if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs setpriv (util-linux)";
    auto daemon =
        DaemonProcess::Start({absl::StrCat("--socket_group=", kSocketGroup),
                              absl::StrCat("--admin_socket_group=", kAdminSocketGroup),
                              absl::StrCat("--admin_group=", kAdminGroup), "--job_timeout_s=5"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    chmod(daemon_->runtime_dir().c_str(), 0755);  // the sockets' own modes decide
    char bin[] = "/tmp/kvo-id-bin-XXXXXX";
    ASSERT_NE(mkdtemp(bin), nullptr);
    bin_ = bin;
    chmod(bin, 0755);
    client_ = Executable(bin_, "tests/integration/identity_client");
    worker_ = Executable(bin_, "client/host/kvoffload_host_worker");
    ctl_ = Executable(bin_, "client/ctl/kvoffloadctl");
  }

  void TearDown() override {
    if (!bin_.empty()) (void)!system(absl::StrCat("rm -rf ", bin_).c_str());
  }

  static std::vector<std::string> As(uint32_t uid, uint32_t extra_group = kSocketGroup) {
    return {"/usr/bin/setpriv", absl::StrCat("--reuid=", uid), absl::StrCat("--regid=", uid),
            absl::StrCat("--groups=", kSocketGroup, ",", kAdminSocketGroup, ",", extra_group),
            "--"};
  }

  // One identity_client call as `uid`; its line ("CODE message...").
  std::string Call(uint32_t uid, std::vector<std::string> args,
                   uint32_t extra_group = kSocketGroup) {
    std::vector<std::string> argv = As(uid, extra_group);
    argv.push_back(client_);
    argv.push_back(absl::StrCat("--socket=", daemon_->data_socket()));
    argv.push_back(absl::StrCat("--admin_socket=", daemon_->admin_socket()));
    argv.insert(argv.end(), args.begin(), args.end());
    auto process = common::ChildProcess::Spawn(argv);
    if (!process.ok()) return process.status().ToString();
    std::string line = (*process)->ReadLine(30);
    (*process)->Wait();
    return line;
  }

  std::unique_ptr<WorkerProcess> Worker(uint32_t uid, const TestEngine& engine, uint32_t mp_rank) {
    auto worker =
        WorkerProcess::Start(daemon_->data_socket(), engine.WorkerArgs(mp_rank), worker_, As(uid));
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? std::move(*worker) : nullptr;
  }

  static std::string Rows(const std::string& line) {
    const size_t at = line.find("rows=");
    return at == std::string::npos ? "" : line.substr(at + 5);
  }

  // The victim's engine as root sees it through the admin socket.
  std::string VictimState(const std::string& engine_id, const std::string& keys) {
    auto stats = daemon_->EngineStats(engine_id);
    if (!stats.ok()) return stats.status().ToString();
    return absl::StrCat("ready=", stats->rows_ready(), " writing=", stats->rows_writing(),
                        " reading=", stats->rows_reading(), " free=", stats->rows_free(),
                        " owner=", stats->owner_uid(), " epoch=", stats->region_epoch(), " ",
                        Call(0, {"--action=lookup", "--engine_id=" + engine_id, "--keys=" + keys}));
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::string bin_;
  std::string client_;
  std::string worker_;
  std::string ctl_;
};

// The victim: engine "victim" owned by kVictim with three keys stored (rows READY, bytes known)
// and a fourth key whose store is in progress (WRITING).
struct Victim {
  TestEngine engine;
  std::unique_ptr<WorkerProcess> worker;
  std::string rows;  // of v-0..v-2
};

TEST_F(IdentityTest, AnotherUidCannotTouchAnEngineItDoesNotOwn) {
  Victim v;
  v.engine.engine_id = "victim";
  v.worker = Worker(kVictim, v.engine, 0);
  ASSERT_NE(v.worker, nullptr);
  ASSERT_TRUE(absl::StartsWith(v.worker->hello(), "registered")) << v.worker->hello();
  const std::string keys = "--keys=v-0,v-1,v-2";
  const std::string id = "--engine_id=victim";
  const std::string prepared = Call(kVictim, {"--action=prepare_store", id, keys});
  ASSERT_TRUE(absl::StartsWith(prepared, "0 ")) << prepared;
  v.rows = Rows(prepared);
  EXPECT_EQ(v.worker->Command(absl::StrCat("store 1 0,1,2 ", v.rows)),
            Finished(1, 3 * v.engine.worker_bytes_per_block()));
  ASSERT_TRUE(absl::StartsWith(Call(kVictim, {"--action=complete_store", id, keys}), "0 "));
  ASSERT_TRUE(absl::StartsWith(Call(kVictim, {"--action=prepare_store", id, "--keys=v-3"}), "0 "));
  const std::string all_keys = "v-0,v-1,v-2,v-3";
  const std::string before = VictimState("victim", all_keys);
  ASSERT_NE(before.find("ready=3 writing=1"), std::string::npos) << before;
  EXPECT_NE(before.find(absl::StrCat("owner=", kVictim)), std::string::npos) << before;

  // Each identity-and-isolation attack, as kAttacker: refused, nothing changed.
  struct Attack {
    const char* what;
    std::vector<std::string> args;
  };
  const std::vector<Attack> attacks = {
      {"look up B's keys", {"--action=lookup", id, keys}},
      {"pin B's rows", {"--action=prepare_load", id, keys}},
      {"unpin B's rows", {"--action=complete_load", id, keys}},
      {"abort B's store in progress", {"--action=complete_store_failed", id, "--keys=v-3"}},
      {"CompleteStore(true) of B's WRITING row", {"--action=complete_store", id, "--keys=v-3"}},
      {"evict B's keys", {"--action=prepare_store", id, "--keys=a-0,a-1,a-2,a-3,a-4,a-5"}},
      {"touch B's keys", {"--action=touch", id, keys}},
      {"open B's engine", {"--action=open", id}},
      {"register into B's engine", {"--action=register", id, "--mp_rank=0"}},
      {"drop B through admin.sock", {"--action=drop", id}},
      {"reset B through admin.sock", {"--action=reset", id}},
  };
  for (const Attack& attack : attacks) {
    const std::string got = Call(kAttacker, attack.args);
    EXPECT_TRUE(absl::StartsWith(got, kDenied)) << attack.what << ": " << got;
    EXPECT_NE(got.find(absl::StrCat("uid ", kAttacker)), std::string::npos) << got;
    EXPECT_EQ(VictimState("victim", all_keys), before) << "after: " << attack.what;
  }
  // Cleanup and Stats from the attacker neither drop nor show B.
  EXPECT_EQ(Call(kAttacker, {"--action=cleanup_idle"}), "0 dropped=");
  EXPECT_EQ(Call(kAttacker, {"--action=list"}), "0 engines=");
  EXPECT_EQ(VictimState("victim", all_keys), before);

  // B's bytes are B's: clobber, load back, verify.
  EXPECT_EQ(v.worker->Command("clobber 0,1,2"), "ok");
  const std::string pinned = Call(kVictim, {"--action=prepare_load", id, keys});
  ASSERT_TRUE(absl::StartsWith(pinned, "0 ")) << pinned;
  EXPECT_EQ(Rows(pinned), v.rows);
  EXPECT_EQ(v.worker->Command(absl::StrCat("load 2 0,1,2 ", v.rows)),
            Finished(2, 3 * v.engine.worker_bytes_per_block()));
  EXPECT_EQ(v.worker->Command("verify 0,1,2"), "verify ok");
  EXPECT_TRUE(absl::StartsWith(Call(kVictim, {"--action=complete_load", id, keys}), "0 "));
  // The owner still sees and administers its own engine.
  EXPECT_EQ(Call(kVictim, {"--action=list"}), "0 engines=victim/0");
  EXPECT_TRUE(daemon_->Serving());
}

TEST_F(IdentityTest, AnotherUidCannotTakeAFreeRankOfALiveEngine) {
  // B's per-rank engine with one of two ranks present, and B's replicated MLA engine whose writer
  // (rank 0) is present: the attacker's worker may take neither missing rank.
  for (const char* attention : {"mha", "mla"}) {
    TestEngine engine;
    engine.engine_id = absl::StrCat("victim-", attention);
    engine.world_size = 2;
    engine.attention = attention;
    auto owner = Worker(kVictim, engine, 0);
    ASSERT_NE(owner, nullptr);
    ASSERT_TRUE(absl::StartsWith(owner->hello(), "registered")) << owner->hello();
    auto attacker = Worker(kAttacker, engine, 1);
    ASSERT_NE(attacker, nullptr);
    EXPECT_TRUE(absl::StartsWith(attacker->hello(), "refused 7 ")) << attacker->hello();
    auto stats = daemon_->EngineStats(engine.engine_id);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->workers(), 1u) << attention;
    // The owner's own second rank joins.
    auto second = Worker(kVictim, engine, 1);
    ASSERT_NE(second, nullptr);
    EXPECT_TRUE(absl::StartsWith(second->hello(), "registered")) << second->hello();
  }
}

TEST_F(IdentityTest, AWorkerMustRegisterFromThePidItDeclares) {
  const std::string got =
      Call(kAttacker, {"--action=register", "--engine_id=mine", "--pid_delta=1"});
  EXPECT_TRUE(absl::StartsWith(got, kDenied)) << got;
  EXPECT_NE(got.find("registered as pid"), std::string::npos) << got;
  EXPECT_EQ(daemon_->EngineStats("mine").status().code(), absl::StatusCode::kNotFound);
  // The same registration from its own pid is accepted.
  EXPECT_EQ(Call(kAttacker, {"--action=register", "--engine_id=mine"}), "0  registered slot=0");
}

TEST_F(IdentityTest, HostBackendOpensOnlyTheCallersOwnSealedMemory) {
  // A root-owned 0600 POSIX shm object with known content: the attacker names it as its memory.
  const std::string secret_name = absl::StrCat("/kvo-identity-secret-", getpid());
  const int secret = shm_open(secret_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(secret, 0);
  const size_t secret_bytes = 16 * 4 * 8192;
  std::string content(secret_bytes, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>('A' + i % 23);
  ASSERT_EQ(pwrite(secret, content.data(), content.size(), 0),
            static_cast<ssize_t>(content.size()));
  std::string got = Call(kAttacker, {"--action=register", "--engine_id=thief",
                                     absl::StrCat("--memory=named:", secret_name)});
  EXPECT_TRUE(absl::StartsWith(got, "3 ")) << got;  // INVALID_ARGUMENT: names are never opened
  EXPECT_NE(got.find("memfd:<fd>"), std::string::npos) << got;

  // A root-owned file the attacker may read (0644) and holds open read-only: the daemon must not
  // reopen it read-write on the attacker's behalf.
  const std::string readable = absl::StrCat(bin_, "/root-owned");
  {
    std::ofstream out(readable, std::ios::binary);
    out << content;
  }
  chmod(readable.c_str(), 0644);
  got = Call(kAttacker,
             {"--action=register", "--engine_id=thief", absl::StrCat("--memory=open:", readable)});
  EXPECT_TRUE(absl::StartsWith(got, kDenied)) << got;
  EXPECT_NE(got.find("owned by uid 0"), std::string::npos) << got;

  // An unsealed memfd could be truncated under a copy (SIGBUS in the daemon): refused.
  got = Call(kAttacker, {"--action=register", "--engine_id=thief", "--memory=unsealed"});
  EXPECT_TRUE(absl::StartsWith(got, "9 ")) << got;  // FAILED_PRECONDITION
  EXPECT_NE(got.find("F_SEAL_SHRINK"), std::string::npos) << got;
  EXPECT_EQ(daemon_->EngineStats("thief").status().code(), absl::StatusCode::kNotFound);

  // The truncation attack itself, on sealed memory: the kernel refuses the ftruncate, the store
  // job succeeds, the daemon lives.
  got = Call(kAttacker, {"--action=register", "--engine_id=thief", "--truncate_and_store"});
  EXPECT_EQ(got, "0  registered slot=0 ftruncate=Operation not permitted job_code=0") << got;
  EXPECT_EQ(kill(daemon_->pid(), 0), 0);
  EXPECT_TRUE(daemon_->Serving());

  // Nothing of the secrets was read or written.
  std::string after(secret_bytes, '\0');
  ASSERT_EQ(pread(secret, after.data(), after.size(), 0), static_cast<ssize_t>(after.size()));
  EXPECT_EQ(after, content);
  close(secret);
  shm_unlink(secret_name.c_str());
  std::ifstream in(readable, std::ios::binary);
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(file.str(), content);
}

TEST_F(IdentityTest, MembersNamedByTheOwnerAndTheAdminGroupMayJoinAndAdminister) {
  // The owner names the attacker's uid as a member: its scheduler calls and workers are let in.
  ASSERT_EQ(Call(kVictim, {"--action=open", "--engine_id=shared",
                           absl::StrCat("--member_uids=", kAttacker)}),
            absl::StrCat("0 owner=", kVictim));
  EXPECT_EQ(Call(kAttacker, {"--action=open", "--engine_id=shared"}),
            absl::StrCat("0 owner=", kVictim));
  EXPECT_TRUE(absl::StartsWith(
      Call(kAttacker, {"--action=prepare_store", "--engine_id=shared", "--keys=s-0"}), "0 "));
  EXPECT_EQ(Call(kAttacker, {"--action=register", "--engine_id=shared"}), "0  registered slot=0");
  // A member uses the engine but does not administer it.
  EXPECT_TRUE(absl::StartsWith(Call(kAttacker, {"--action=drop", "--engine_id=shared"}), kDenied));
  // A member of --admin_group administers every engine.
  EXPECT_EQ(Call(kOperator, {"--action=list"}, kAdminGroup), "0 engines=shared/0");
  EXPECT_EQ(Call(kOperator, {"--action=drop", "--engine_id=shared"}, kAdminGroup), "0 ");
  EXPECT_EQ(daemon_->EngineStats("shared").status().code(), absl::StatusCode::kNotFound);
  // Without the group, the same uid administers nothing.
  ASSERT_TRUE(absl::StartsWith(Call(kVictim, {"--action=open", "--engine_id=again"}), "0 "));
  EXPECT_TRUE(absl::StartsWith(Call(kOperator, {"--action=drop", "--engine_id=again"}), kDenied));
}

// kvoffloadctl says which permission is missing: the socket's group, or the engine's owner.
TEST_F(IdentityTest, KvoffloadctlSaysWhichPermissionIsMissing) {
  ASSERT_TRUE(absl::StartsWith(Call(kVictim, {"--action=open", "--engine_id=victim"}), "0 "));
  auto ctl = [&](std::vector<std::string> wrapper, const std::string& command) {
    // stderr and the exit code on stdout, one line each.
    std::vector<std::string> argv = std::move(wrapper);
    argv.insert(argv.end(),
                {"/bin/sh", "-c", "exec 2>&1; \"$0\" \"$@\"; echo \"rc=$?\"", ctl_,
                 absl::StrCat("--socket=", daemon_->admin_socket()), command, "victim"});
    auto process = common::ChildProcess::Spawn(argv);
    EXPECT_TRUE(process.ok());
    std::string out = (*process)->ReadLine(30);
    out += " " + (*process)->ReadLine(30);
    (*process)->Wait();
    return out;
  };
  // In the admin socket's group, not the engine's owner: the daemon refuses, exit 1.
  const std::string refused = ctl(As(kAttacker), "drop");
  EXPECT_TRUE(absl::StartsWith(
      refused, absl::StrCat("kvoffloadctl: PERMISSION_DENIED: uid ", kAttacker, " (pid ")))
      << refused;
  EXPECT_TRUE(absl::EndsWith(refused,
                             " may not drop engine victim/0: it belongs to another uid (only its "
                             "owner, root and the --admin_group may) rc=1"))
      << refused;
  // Not in the admin socket's group: kvoffloadctl names the group to join, exit 3.
  const std::vector<std::string> outsider = {
      "/usr/bin/setpriv", absl::StrCat("--reuid=", kAttacker), absl::StrCat("--regid=", kAttacker),
      absl::StrCat("--groups=", kSocketGroup), "--"};
  EXPECT_EQ(ctl(outsider, "drop"),
            absl::StrCat("kvoffloadctl: permission denied on ", daemon_->admin_socket(),
                         " (join group ", kAdminSocketGroup, ") rc=3"));
  EXPECT_TRUE(daemon_->EngineStats("victim").ok());
}

TEST_F(IdentityTest, SocketsHaveTheirOwnGroupsAndModes) {
  struct stat data {
  }, admin{};
  ASSERT_EQ(stat(daemon_->data_socket().c_str(), &data), 0);
  ASSERT_EQ(stat(daemon_->admin_socket().c_str(), &admin), 0);
  EXPECT_EQ(data.st_mode & 0777, 0660u);
  EXPECT_EQ(admin.st_mode & 0777, 0660u);
  EXPECT_EQ(data.st_gid, kSocketGroup);
  EXPECT_EQ(admin.st_gid, kAdminSocketGroup);
  // A uid in neither group cannot connect at all (UNAVAILABLE from the client's side).
  std::vector<std::string> argv = {"/usr/bin/setpriv",
                                   absl::StrCat("--reuid=", kAttacker),
                                   absl::StrCat("--regid=", kAttacker),
                                   "--clear-groups",
                                   "--",
                                   client_,
                                   absl::StrCat("--socket=", daemon_->data_socket()),
                                   "--action=lookup",
                                   "--engine_id=x",
                                   "--keys=k"};
  auto process = common::ChildProcess::Spawn(argv);
  ASSERT_TRUE(process.ok());
  const std::string line = (*process)->ReadLine(30);
  EXPECT_TRUE(absl::StartsWith(line, "14 ")) << line;  // UNAVAILABLE: permission denied
  (*process)->Wait();
}

}  // namespace
}  // namespace kvoffload::testing
