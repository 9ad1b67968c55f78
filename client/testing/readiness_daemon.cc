#include "client/testing/readiness_daemon.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client::testing {
namespace {

class FakeEngine final : public v1::Engine::Service {
  grpc::Status OpenEngine(grpc::ServerContext*, const v1::OpenEngineRequest*,
                          v1::OpenEngineResponse* response) override {
    v1::Geometry* g = response->mutable_geometry();
    g->set_num_copies(1);
    g->set_blocks_per_row(1);
    g->set_worker_bytes_per_block(ReadinessDaemon::kRowBytes);
    g->set_slot_bytes(ReadinessDaemon::kRowBytes);
    g->set_row_bytes(ReadinessDaemon::kRowBytes);
    g->set_num_rows(ReadinessDaemon::kNumRows);
    g->set_capacity_bytes(ReadinessDaemon::kRegionBytes);
    g->set_fingerprint("readiness-fake");
    g->set_local_world_size(1);
    response->set_created(true);
    response->set_region_epoch(ReadinessDaemon::kEpoch);
    response->set_owner_uid(getuid());
    return grpc::Status::OK;
  }
};

class FakeAdmin final : public v1::Admin::Service {
 public:
  FakeAdmin(std::string engine_id, int64_t not_ready_answers)
      : engine_id_(std::move(engine_id)), not_ready_answers_(not_ready_answers) {}

  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* response) override {
    const int64_t call = calls_.fetch_add(1);
    const bool ready = not_ready_answers_ >= 0 && call >= not_ready_answers_;
    response->add_engines()->set_engine_id("someone-else");  // another engine comes first
    v1::EngineStats* e = response->add_engines();
    e->set_engine_id(engine_id_);
    e->set_region_epoch(ReadinessDaemon::kEpoch);
    e->set_num_rows(ReadinessDaemon::kNumRows);
    e->set_region_bytes(ReadinessDaemon::kRegionBytes);
    e->set_region_first_ready_seconds(0.25);
    if (ready) {
      e->set_rows_free(ReadinessDaemon::kNumRows);
      e->set_region_ready_bytes(ReadinessDaemon::kRegionBytes);
      e->set_region_fully_ready_seconds(1.5);
    } else {
      e->set_rows_free(ReadinessDaemon::kNumRows - ReadinessDaemon::kNotReadyRows);
      e->set_rows_not_ready(ReadinessDaemon::kNotReadyRows);
      e->set_region_ready_bytes(ReadinessDaemon::kReadyBytes);
      e->set_region_fully_ready_seconds(-1);
    }
    return grpc::Status::OK;
  }

  int64_t calls() const { return calls_.load(); }

 private:
  const std::string engine_id_;
  const int64_t not_ready_answers_;
  std::atomic<int64_t> calls_{0};
};

}  // namespace

struct ReadinessDaemon::Impl {
  std::string dir;
  FakeEngine engine;
  std::unique_ptr<FakeAdmin> admin;
  std::unique_ptr<grpc::Server> data_server;
  std::unique_ptr<grpc::Server> admin_server;
};

absl::StatusOr<std::unique_ptr<ReadinessDaemon>> ReadinessDaemon::Start(
    const std::string& engine_id, int64_t not_ready_answers) {
  auto impl = std::make_unique<Impl>();
  char dir[] = "/tmp/kvo-ready-XXXXXX";  // short: Unix socket paths are limited to 107 bytes
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  impl->dir = dir;
  impl->admin = std::make_unique<FakeAdmin>(engine_id, not_ready_answers);
  auto serve = [&](grpc::Service* service, const char* name) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("unix:", impl->dir, "/", name),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(service);
    return builder.BuildAndStart();
  };
  impl->data_server = serve(&impl->engine, "kvoffload.sock");
  impl->admin_server = serve(impl->admin.get(), "admin.sock");
  if (impl->data_server == nullptr || impl->admin_server == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve on ", impl->dir));
  }
  return std::unique_ptr<ReadinessDaemon>(new ReadinessDaemon(std::move(impl)));
}

ReadinessDaemon::ReadinessDaemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ReadinessDaemon::~ReadinessDaemon() {
  impl_->data_server->Shutdown();
  impl_->admin_server->Shutdown();
  std::error_code ignored;
  std::filesystem::remove_all(impl_->dir, ignored);
}

std::string ReadinessDaemon::data_socket() const { return impl_->dir + "/kvoffload.sock"; }

int64_t ReadinessDaemon::stats_calls() const { return impl_->admin->calls(); }

}  // namespace kvoffload::client::testing
