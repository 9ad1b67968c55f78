// End-to-end tests of RunKvoffloadctl against an in-process fake Admin server (plus gRPC's
// standard health service) on a temporary Unix socket: dispatch, global flags before and after
// the command, $KVOFFLOAD_ADMIN_SOCKET, the requests sent, and every exit code.
#include "client/ctl/kvoffloadctl.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/ctl/exit_codes.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client::ctl {
namespace {

// Answers with canned responses, or with `error` when it is set; records the last requests.
class FakeAdmin final : public v1::Admin::Service {
 public:
  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* response) override {
    absl::SleepFor(delay());
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    *response = stats_;
    return grpc::Status::OK;
  }
  grpc::Status ListEngines(grpc::ServerContext*, const v1::Empty*,
                           v1::ListEnginesResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    *response->mutable_engines() = stats_.engines();
    return grpc::Status::OK;
  }
  grpc::Status DropEngine(grpc::ServerContext*, const v1::DropEngineRequest* request,
                          v1::Empty*) override {
    absl::MutexLock lock(&mu_);
    drop_ = *request;
    ++calls_;
    return error_;
  }
  grpc::Status Cleanup(grpc::ServerContext*, const v1::CleanupRequest* request,
                       v1::CleanupResponse* response) override {
    absl::MutexLock lock(&mu_);
    cleanup_ = *request;
    ++calls_;
    if (!error_.ok()) return error_;
    response->set_rows_reset(request->reset_engine_id().empty() ? 0 : 12);
    if (request->drop_idle()) response->add_dropped("old/0");
    return grpc::Status::OK;
  }

  // How long Stats waits before answering.
  void set_delay(absl::Duration delay) {
    absl::MutexLock lock(&mu_);
    delay_ = delay;
  }
  absl::Duration delay() {
    absl::MutexLock lock(&mu_);
    return delay_;
  }
  void set_error(grpc::Status error) {
    absl::MutexLock lock(&mu_);
    error_ = std::move(error);
  }
  void set_stats(v1::StatsResponse stats) {
    absl::MutexLock lock(&mu_);
    stats_ = std::move(stats);
  }
  v1::DropEngineRequest drop() {
    absl::MutexLock lock(&mu_);
    return drop_;
  }
  v1::CleanupRequest cleanup() {
    absl::MutexLock lock(&mu_);
    return cleanup_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_);
  grpc::Status error_ ABSL_GUARDED_BY(mu_);
  v1::StatsResponse stats_ ABSL_GUARDED_BY(mu_);
  v1::DropEngineRequest drop_ ABSL_GUARDED_BY(mu_);
  v1::CleanupRequest cleanup_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Result {
  int rc;
  std::string out;
  std::string err;
};

class KvoffloadctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/kvoctl_test.XXXXXX";
    ASSERT_NE(mkdtemp(path), nullptr);
    dir_ = path;
    socket_ = dir_ + "/admin.sock";
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(&admin_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  Result Run(const std::vector<std::string>& args, const std::string& env_socket = "") {
    std::ostringstream out, err;
    const int rc = RunKvoffloadctl(args, env_socket, out, err);
    return {rc, out.str(), err.str()};
  }
  std::string RuntimeDirFlag() const { return "--runtime_dir=" + dir_; }

  std::string dir_;
  std::string socket_;
  FakeAdmin admin_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(KvoffloadctlTest, StatsJsonWithGlobalFlagAfterTheCommand) {
  v1::StatsResponse stats;
  stats.set_backend("host");
  stats.set_max_region_bytes(1 << 30);
  stats.add_engines()->set_engine_id("llama");
  admin_.set_stats(stats);
  Result r = Run({"stats", "--json", RuntimeDirFlag()});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(absl::StartsWith(r.out, "{\"backend\":\"host\",\"uptime_seconds\":0,")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\"engines\":[{\"engine_id\":\"llama\",\"dp_rank\":0,"));
  EXPECT_TRUE(absl::EndsWith(r.out, "}],\"pools\":[],\"tiers\":[]}\n")) << r.out;
}

TEST_F(KvoffloadctlTest, StatsTableWithSocketFlagBeforeTheCommand) {
  v1::StatsResponse stats;
  stats.set_backend("host");
  admin_.set_stats(stats);
  Result r = Run({"--socket", socket_, "--timeout_s=5", "stats"});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.out, "backend       host\n")) << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out, "\nno engines\n")) << r.out;
}

TEST_F(KvoffloadctlTest, EnvironmentNamesTheSocketWhenNoFlagDoes) {
  Result r = Run({"engines"}, socket_);
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "no engines\n");
  // A flag wins over the environment.
  r = Run({"engines", "--runtime_dir=" + dir_ + "/elsewhere"}, socket_);
  EXPECT_EQ(r.rc, kExitUnreachable);
  EXPECT_EQ(r.err, "kvoffloadctl: kvoffloadd is not running (no socket at " + dir_ +
                       "/elsewhere/admin.sock)\n");
}

TEST_F(KvoffloadctlTest, DropSendsTheRequest) {
  Result r = Run({"drop", "llama", "--dp_rank", "3", "--force", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "dropped llama/3\n");
  EXPECT_EQ(admin_.drop().engine_id(), "llama");
  EXPECT_EQ(admin_.drop().dp_rank(), 3u);
  EXPECT_TRUE(admin_.drop().force());
}

TEST_F(KvoffloadctlTest, DaemonErrorIsExit1WithCodeAndMessage) {
  admin_.set_error(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                "engine llama/0 has 2 connected workers (use force)"));
  Result r = Run({"drop", "llama", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitDaemonError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "kvoffloadctl: FAILED_PRECONDITION: engine llama/0 has 2 connected workers (use "
            "force)\n");
  EXPECT_FALSE(admin_.drop().force());
  admin_.set_error(grpc::Status(grpc::StatusCode::NOT_FOUND, "no engine x/0"));
  r = Run({"stats", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitDaemonError);
  EXPECT_EQ(r.err, "kvoffloadctl: NOT_FOUND: no engine x/0\n");
}

TEST_F(KvoffloadctlTest, NoAnswerWithinTheTimeoutIsExit3) {
  admin_.set_delay(absl::Milliseconds(500));
  Result r = Run({"stats", "--timeout_s=0.1", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitUnreachable);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "kvoffloadctl: cannot reach kvoffloadd at " + socket_ +
                       ": no answer within 100ms (--timeout_s)\n");
}

TEST_F(KvoffloadctlTest, DeadlineExceededAnsweredByTheDaemonIsExit1) {
  admin_.set_error(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "job timed out"));
  Result r = Run({"stats", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitDaemonError);
  EXPECT_EQ(r.err, "kvoffloadctl: DEADLINE_EXCEEDED: job timed out\n");
}

TEST_F(KvoffloadctlTest, CleanupSendsTheRequestAndPrintsWhatWasDone) {
  Result r = Run({"cleanup", "--idle", "--reset=llama", "--dp_rank=2", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "reset llama/2: 12 rows freed\ndropped idle engine old/0\n");
  EXPECT_TRUE(admin_.cleanup().drop_idle());
  EXPECT_EQ(admin_.cleanup().reset_engine_id(), "llama");
  EXPECT_EQ(admin_.cleanup().reset_dp_rank(), 2u);
}

TEST_F(KvoffloadctlTest, CleanupUsageErrorsDoNotCallTheDaemon) {
  const std::string socket = "--socket=" + socket_;
  for (const auto& [args, line] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"cleanup", socket}, "give --idle, --reset=ENGINE_ID or both"},
           {{"cleanup", "--idle", "--dp_rank=1", socket}, "--dp_rank needs --reset=ENGINE_ID"},
           {{"cleanup", "--reset=", socket}, "--reset needs an engine id"},
           {{"cleanup", "--reset=a", "--dp_rank=-1", socket},
            "--dp_rank needs an integer from 0 to 4294967295, got \"-1\""},
           {{"cleanup", "--idle=1", socket}, "--idle takes no value"},
       }) {
    Result r = Run(args);
    EXPECT_EQ(r.rc, kExitUsage);
    EXPECT_EQ(r.err, "kvoffloadctl cleanup: " + line + " (see kvoffloadctl cleanup --help)\n");
  }
  EXPECT_EQ(admin_.calls(), 0);
}

TEST_F(KvoffloadctlTest, HealthServingAndNotServing) {
  Result r = Run({"health", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "SERVING\n");
  server_->GetHealthCheckService()->SetServingStatus(false);
  r = Run({"health", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitDaemonError);
  EXPECT_EQ(r.out, "NOT_SERVING\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(KvoffloadctlTest, StoppedServerIsNotRunning) {
  server_->Shutdown();
  server_.reset();  // gRPC removes its socket file
  Result r = Run({"health", "--socket=" + socket_});
  EXPECT_EQ(r.rc, kExitUnreachable);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "kvoffloadctl: kvoffloadd is not running (no socket at " + socket_ + ")\n");
}

TEST_F(KvoffloadctlTest, MissingSocketIsExit3) {
  Result r = Run({"health", "--runtime_dir=" + dir_ + "/none"});
  EXPECT_EQ(r.rc, kExitUnreachable);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "kvoffloadctl: kvoffloadd is not running (no socket at " + dir_ + "/none/admin.sock)\n");
}

TEST(KvoffloadctlUsageTest, UsageErrorsAreExit2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "kvoffloadctl: missing COMMAND (see kvoffloadctl --help)\n"},
      {{"bogus"}, "kvoffloadctl: unknown command \"bogus\" (see kvoffloadctl --help)\n"},
      {{"--json", "stats"}, "kvoffloadctl: unknown global flag --json (see kvoffloadctl --help)\n"},
      {{"stats", "--timeout_s=0"},
       "kvoffloadctl: --timeout_s must be > 0 and at most 86400, got 0\n"},
      {{"drop"}, "kvoffloadctl drop: missing ENGINE_ID (see kvoffloadctl drop --help)\n"},
      {{"drop", "a", "--dp_rank=x"},
       "kvoffloadctl drop: --dp_rank needs an integer from 0 to 4294967295, got \"x\" (see "
       "kvoffloadctl drop --help)\n"},
      {{"engines", "x"},
       "kvoffloadctl engines: unexpected argument \"x\" (see kvoffloadctl engines --help)\n"},
      {{"health", "--service=x"},
       "kvoffloadctl health: unknown flag --service (see kvoffloadctl health --help)\n"},
      {{"help", "bogus"}, "kvoffloadctl help: unknown command \"bogus\" (see kvoffloadctl --help)\n"},
      {{"plan", "--bogus=1"}, "kvoffloadctl plan: unknown flag --bogus (see --help)\n"},
  };
  for (const auto& [args, line] : cases) {
    std::ostringstream out, err;
    EXPECT_EQ(RunKvoffloadctl(args, "", out, err), kExitUsage) << line;
    EXPECT_EQ(err.str(), line);
    EXPECT_EQ(out.str(), "");
  }
}

TEST(KvoffloadctlUsageTest, HelpIsExit0) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"-h"}, {"help"}, {"--socket=/x", "--help"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(RunKvoffloadctl(args, "", out, err), kExitOk);
    EXPECT_EQ(out.str(), KvoffloadctlUsage());
    EXPECT_EQ(err.str(), "");
  }
  for (const char* command : {"stats", "engines", "drop", "cleanup", "health", "plan"}) {
    std::ostringstream out, err, help_out, help_err;
    EXPECT_EQ(RunKvoffloadctl({command, "--help"}, "", out, err), kExitOk) << command;
    EXPECT_EQ(RunKvoffloadctl({"help", command}, "", help_out, help_err), kExitOk) << command;
    EXPECT_TRUE(absl::StartsWith(out.str(), "usage: kvoffloadctl ")) << out.str();
    EXPECT_EQ(out.str(), help_out.str());
    EXPECT_EQ(err.str() + help_err.str(), "");
  }
}

TEST(KvoffloadctlUsageTest, UsageDocumentsExitCodes) {
  const std::string usage = KvoffloadctlUsage();
  for (const char* text : {"  0  success", "  1  the daemon answered with an error",
                           "  2  usage error", "  3  the daemon cannot be reached",
                           "KVOFFLOAD_ADMIN_SOCKET", "--runtime_dir", "--socket", "--timeout_s"}) {
    EXPECT_TRUE(absl::StrContains(usage, text)) << text;
  }
}

TEST(KvoffloadctlUsageTest, PlanNeedsNoDaemon) {
  std::ostringstream out, err;
  EXPECT_EQ(RunKvoffloadctl({"--socket=/nonexistent.sock", "plan", "--num_layers=32",
                             "--page_bytes=16KiB", "--budget_bytes=1GiB"},
                            "", out, err),
            kExitOk)
      << err.str();
  EXPECT_TRUE(absl::StartsWith(out.str(), "{\"engine_key\":\"engine/0\"")) << out.str();
  std::ostringstream out2, err2;
  EXPECT_EQ(RunKvoffloadctl({"plan", "--num_layers=32", "--page_bytes=16KiB",
                             "--budget_bytes=1GiB", "--pp=2"},
                            "", out2, err2),
            kExitUsage);
  EXPECT_TRUE(absl::StartsWith(err2.str(), "rejected: ")) << err2.str();
}

}  // namespace
}  // namespace kvoffload::client::ctl
