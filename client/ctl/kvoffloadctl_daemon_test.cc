// kvoffloadctl against the real daemon library, in process: Daemon::Start with the host copy
// backend on a temporary runtime directory. One engine is opened and given READY rows through
// the Engine service; every admin subcommand is then run through RunKvoffloadctl.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/ctl/args.h"
#include "client/ctl/exit_codes.h"
#include "client/host/store_rows.h"
#include "client/ctl/kvoffloadctl.h"
#include "common/engine_spec.h"
#include "daemon/backend_factory.h"
#include "daemon/daemon.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "proto/spec_convert.h"

namespace kvoffload::client::ctl {
namespace {

struct Result {
  int rc;
  std::string out;
  std::string err;
};

class KvoffloadctlDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/kvoctl_daemon.XXXXXX";
    ASSERT_NE(mkdtemp(path), nullptr);
    dir_ = path;
    daemon::BackendOptions backend_options;
    backend_options.kind = daemon::BackendKind::kHost;
    backend_options.host_copy_threads = 2;
    auto backend = daemon::CreateBackend(backend_options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    daemon::DaemonOptions options;
    options.runtime_dir = dir_ + "/run";
    options.max_region_bytes = 64 << 20;
    auto started = daemon::Daemon::Start(options, *std::move(backend));
    ASSERT_TRUE(started.ok()) << started.status();
    daemon_ = *std::move(started);
    ASSERT_EQ(daemon_->admin_socket(),
              absl::StrCat(options.runtime_dir, "/", kAdminSocketName));  // same name as ours
  }
  void TearDown() override {
    if (daemon_ != nullptr) daemon_->Shutdown(absl::Seconds(1));
    daemon_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  Result Run(std::vector<std::string> args) {
    args.push_back("--runtime_dir=" + dir_ + "/run");
    std::ostringstream out, err;
    const int rc = RunKvoffloadctl(args, "", out, err);
    return {rc, out.str(), err.str()};
  }

  // Opens engine "llama" (1 MiB budget, 8 KiB rows) and stores `n` keys: n READY rows.
  void OpenEngineWithReadyRows(int n) {
    auto stub = v1::Engine::NewStub(grpc::CreateChannel("unix:" + daemon_->data_socket(),
                                                        grpc::InsecureChannelCredentials()));
    common::EngineSpec spec;
    spec.engine_id = "llama";
    spec.num_layers = 2;
    spec.page_bytes = 4096;
    spec.budget_bytes = 1 << 20;
    v1::OpenEngineRequest open;
    SpecToProto(spec, open.mutable_spec());
    v1::OpenEngineResponse opened;
    grpc::ClientContext c1;
    ASSERT_TRUE(stub->OpenEngine(&c1, open, &opened).ok());
    v1::KeysRequest keys;
    keys.set_engine_id("llama");
    for (int i = 0; i < n; ++i) keys.add_keys(absl::StrCat("key", i));
    v1::PrepareStoreResponse prepared;
    grpc::ClientContext c2;
    grpc::Status s = stub->PrepareStore(&c2, keys, &prepared);
    ASSERT_TRUE(s.ok()) << s.error_message();
    const std::vector<uint64_t> rows(prepared.rows().begin(), prepared.rows().end());
    absl::Status stored = client::StoreRows(daemon_->data_socket(), spec, rows);
    ASSERT_TRUE(stored.ok()) << stored;  // a commit alone makes no row READY
    v1::CompleteStoreRequest complete;
    complete.set_engine_id("llama");
    *complete.mutable_keys() = keys.keys();
    complete.set_success(true);
    v1::Empty empty;
    grpc::ClientContext c3;
    s = stub->CompleteStore(&c3, complete, &empty);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  std::string dir_;
  std::unique_ptr<daemon::Daemon> daemon_;
};

TEST_F(KvoffloadctlDaemonTest, HealthIsServing) {
  Result r = Run({"health"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "SERVING\n");
}

TEST_F(KvoffloadctlDaemonTest, StatsOfAnEmptyNode) {
  Result r = Run({"stats", "--json"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.out, "{\"backend\":\"host\",\"uptime_seconds\":")) << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out, ",\"region_bytes\":0,\"max_region_bytes\":67108864,"
                                    "\"gpu_memory_bytes\":{},\"engines\":[],\"pools\":[],\"tiers\":[]}\n"))
      << r.out;
  r = Run({"engines"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "no engines\n");
}

TEST_F(KvoffloadctlDaemonTest, EveryCommandOnAnEngine) {
  OpenEngineWithReadyRows(3);
  Result r = Run({"stats", "--json"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "{\"engine_id\":\"llama\",\"dp_rank\":0,\"num_rows\":128,"
                                       "\"rows_free\":125,\"rows_writing\":0,\"rows_ready\":3,"
                                       "\"rows_reading\":0,\"rows_quarantined\":0,"
                                       "\"rows_not_ready\":0,\"region_bytes\":1048576,"
                                       "\"region_ready_bytes\":1048576,"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"replicated\":false,\"num_copies\":1,"
                                       "\"row_bytes\":8192}],\"pools\":[],\"tiers\":[]}"))
      << r.out;

  r = Run({"stats"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "region bytes  1 MiB of 64 MiB node cap\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\nllama/0   128   125        0      3        0"
                                       "          0  1 MiB of 1 MiB")) << r.out;

  r = Run({"engines"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_TRUE(absl::StartsWith(
      r.out, "engine   replicated  copies  row bytes  rows  region bytes  workers  idle s\n"
             "llama/0  no               1      8 KiB   128         1 MiB        0"))
      << r.out;

  r = Run({"cleanup", "--reset=llama"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "reset llama/0: 3 rows freed\n");

  r = Run({"drop", "llama", "--dp_rank=1"});
  EXPECT_EQ(r.rc, kExitDaemonError);
  EXPECT_TRUE(absl::StartsWith(r.err, "kvoffloadctl: NOT_FOUND: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = Run({"drop", "llama"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "dropped llama/0\n");

  r = Run({"cleanup", "--idle"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "no idle engines\n");
}

TEST_F(KvoffloadctlDaemonTest, CleanupIdleDropsAnEngineWithoutWorkers) {
  OpenEngineWithReadyRows(1);
  Result r = Run({"cleanup", "--idle"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "dropped idle engine llama/0\n");
}

TEST_F(KvoffloadctlDaemonTest, StoppedDaemonIsNotRunning) {
  const std::string socket = daemon_->admin_socket();
  daemon_->Shutdown(absl::Seconds(1));
  daemon_.reset();
  Result r = Run({"stats"});
  EXPECT_EQ(r.rc, kExitUnreachable);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "kvoffloadctl: kvoffloadd is not running (no socket at " + socket + ")\n");
}

}  // namespace
}  // namespace kvoffload::client::ctl
