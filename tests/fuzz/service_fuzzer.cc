// libFuzzer target over the daemon's request handlers: the real EngineService (OpenEngine and the
// index RPCs), WorkerService (register, submit, disconnect) and AdminService (Stats, ListEngines,
// DropEngine, Cleanup), served in-process over gRPC's in-process channel, on the host copy
// backend wrapped in the fault backend (copies fail, run late or are held until the script or
// the end of the input releases them), under a 4 MiB node cap.
//
// Each input is a script of up to 64 steps chosen by FuzzInput. Rows handed out by PrepareStore
// and PrepareLoad are remembered so that submits can name real rows and reach deep states.
// Checked after every step and input, beyond the sanitizers' own checks:
//   - no RPC ends UNKNOWN or INTERNAL (every refusal has a precise code);
//   - every worker session ends within its deadline once its worker hangs up (no hang);
//   - after the input's engines are dropped and their copies end, the node budget is back to 0
//     (no region or reservation leaks) and Stats still answers.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/copy/testing/fault_copy_backend.h"
#include "daemon/copy/testing/shm_memory.h"
#include "daemon/engine/registry.h"
#include "daemon/engine/testing/engine_test_env.h"
#include "daemon/service/admin_service.h"
#include "daemon/service/engine_service.h"
#include "daemon/service/peer_credentials.h"
#include "daemon/service/testing/in_process_callers.h"
#include "daemon/service/worker_service.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace kvoffload::fuzz {
namespace {

using daemon::FaultCopyBackend;
using Fault = FaultCopyBackend::Fault;
using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::DaemonMessage>;

constexpr uint64_t kNodeCap = 4 << 20;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kWorkerBlocks = 8;
constexpr int kMaxSteps = 64;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "service_fuzzer: %s\n", what.c_str());
  std::abort();
}

// KVOFFLOAD_FUZZ_TRACE=1 prints every call and verdict (to check what a seed reaches).
bool Tracing() {
  static const bool trace = std::getenv("KVOFFLOAD_FUZZ_TRACE") != nullptr;
  return trace;
}

void CheckCode(const grpc::Status& status, const char* rpc) {
  if (Tracing()) {
    std::fprintf(stderr, "trace: %s -> %d %s\n", rpc, status.error_code(),
                 status.error_message().c_str());
  }
  if (status.error_code() == grpc::StatusCode::UNKNOWN ||
      status.error_code() == grpc::StatusCode::INTERNAL) {
    Fail(absl::StrCat(rpc, " ended ", status.error_code(), ": ", status.error_message()));
  }
}

// The daemon, built once per process and reset after every input.
struct Node {
  Node() {
    common::SetLogLevel("off").IgnoreError();  // per-input engines would flood the log
    env = std::make_unique<daemon::testing::EngineTestEnv>(kNodeCap);
    daemon::RegistryOptions options;
    options.idle_engine_ttl = absl::ZeroDuration();  // dropped explicitly after each input
    registry = std::make_unique<daemon::EngineRegistry>(env->deps(), options);
    engine_service = std::make_unique<daemon::EngineService>(registry.get(), &peers);
    worker_service = std::make_unique<daemon::WorkerService>(registry.get(), &peers,
                                                             daemon::WorkerServiceOptions{});
    admin_service = std::make_unique<daemon::AdminService>(
        registry.get(), &env->backend(), &env->budget(), &peers, daemon::AccessPolicy{});
    grpc::ServerBuilder builder;
    builder.RegisterService(engine_service.get());
    builder.RegisterService(worker_service.get());
    builder.RegisterService(admin_service.get());
    server = builder.BuildAndStart();
    auto channel = server->InProcessChannel(grpc::ChannelArguments());
    engine = v1::Engine::NewStub(channel);
    worker = v1::Worker::NewStub(channel);
    admin = v1::Admin::NewStub(channel);
    for (uint32_t i = 0; i < 2; ++i) {
      // Two layers of 4 KiB pages, or one of 8 KiB: both add up to 8 KiB per block.
      auto m = daemon::ShmWorkerMemory::Create(2 - i, kWorkerBlocks, kPage * (i + 1), i);
      if (!m.ok()) Fail(m.status().ToString());
      memories.push_back(*std::move(m));
    }
  }

  // Node outlives every input; it is never destroyed (libFuzzer exits the process).
  std::unique_ptr<daemon::testing::EngineTestEnv> env;
  std::unique_ptr<daemon::EngineRegistry> registry;
  daemon::InProcessCallers peers;  // the in-process channel's calls are this process's
  std::unique_ptr<daemon::EngineService> engine_service;
  std::unique_ptr<daemon::WorkerService> worker_service;
  std::unique_ptr<daemon::AdminService> admin_service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Engine::Stub> engine;
  std::unique_ptr<v1::Worker::Stub> worker;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::vector<std::unique_ptr<daemon::ShmWorkerMemory>> memories;
};

Node& TheNode() {
  static Node* node = new Node();
  return *node;
}

struct Session {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
  bool writes_done = false;
};

class Script {
 public:
  Script(Node& node, FuzzInput& in) : node_(node), in_(in) {}

  void Run() {
    for (int step = 0; step < kMaxSteps && !in_.empty(); ++step) Step();
    EndInput();
  }

 private:
  // Text for the request's byte fields (engine ids, tiers): any bytes, UTF-8 or not.
  std::string Text(size_t max) { return in_.Bytes(max); }

  std::string EngineId() {
    switch (in_.Int(0, 7)) {
      case 0:
        return Text(140);
      case 1:
        return "";
      default:
        return absl::StrCat("e", in_.Int(0, 1));
    }
  }

  void FillSpec(v1::EngineSpec* s) {
    s->set_engine_id(EngineId());
    s->set_dp_rank(in_.Int(0, 1));
    const uint64_t world = in_.Int(0, 7) == 0 ? in_.Int(0, UINT32_MAX) : in_.Int(1, 2);
    s->set_world_size(world);
    s->set_local_world_size(in_.Int(0, 3) == 0 ? in_.Int(0, 4) : 0);
    s->set_tp(in_.Bool() ? world : in_.Int(0, 4));
    s->set_pp(in_.Int(0, 7) == 0 ? in_.Int(0, 2) : 1);
    s->set_pcp(in_.Int(0, 7) == 0 ? in_.Int(0, 2) : 1);
    s->set_dcp(in_.Int(0, 7) == 0 ? in_.Int(0, 2) : 1);
    // Mostly valid enums (MP, MHA), sometimes any value including unspecified and unknown ones.
    s->set_executor(static_cast<v1::Executor>(in_.Int(0, 7) == 0 ? in_.Int(0, 5) : 2));
    s->set_attention(static_cast<v1::Attention>(in_.Int(0, 3) == 0 ? in_.Int(0, 3) : 1));
    s->set_num_kv_groups(in_.Int(0, 7) == 0 ? in_.Int(0, 3) : 1);
    s->set_num_layers(in_.Int(0, 7) == 0 ? in_.Size(4) : 2);
    s->set_page_bytes(in_.Int(0, 7) == 0 ? in_.Size(1 << 16) : kPage);
    s->set_worker_bytes_per_block(in_.Int(0, 7) == 0 ? in_.Size(1 << 16) : 0);
    s->set_blocks_per_row(in_.Int(0, 3));
    // Budgets from nothing to four times the node cap, and any 64-bit value: OpenEngine reserves
    // the whole cost (region + index metadata) before it builds anything, so even 2^64 − 1 is
    // refused in O(1) (tests/fuzz/corpus/service/index_built_before_reservation found the
    // opposite before).
    switch (in_.Int(0, 15)) {
      case 0:
      case 1:
      case 2:
        s->set_budget_bytes(in_.Int(0, 4 * kNodeCap));
        break;
      case 3:
        s->set_budget_bytes(in_.Size(256 << 10));
        break;
      default:
        s->set_budget_bytes(in_.Int(0, 256 << 10));
    }
    if (in_.Int(0, 15) == 0) s->add_secondary_tiers(Text(16));
    s->set_rows_assigned_by_engine(in_.Int(0, 3) == 0);
  }

  std::string Key() {
    switch (in_.Int(0, 15)) {
      case 0:
        return "";
      case 1:
        return std::string(257, 'k');
      case 2:
        return in_.Bytes(300);
      default:
        return absl::StrCat("k", in_.Int(0, 7));
    }
  }

  v1::KeysRequest Keys() {
    v1::KeysRequest r;
    r.set_engine_id(EngineId());
    r.set_dp_rank(in_.Int(0, 1));
    const uint64_t n = in_.Int(0, 6);
    for (uint64_t i = 0; i < n; ++i) r.add_keys(Key());
    return r;
  }

  uint64_t Row() {
    if (!rows_.empty() && in_.Int(0, 3) != 0) return rows_[in_.Int(0, rows_.size() - 1)];
    return in_.Size(600);
  }

  void Remember(const google::protobuf::RepeatedField<uint64_t>& rows) {
    for (uint64_t r : rows) {
      if (rows_.size() < 64) rows_.push_back(r);
    }
  }

  void AddFaultRule() {
    FaultCopyBackend::Rule rule;
    rule.fault = static_cast<Fault>(in_.Int(0, 4));
    rule.delay = absl::Microseconds(in_.Int(0, 2000));
    if (in_.Bool()) rule.slot = in_.Int(0, 1);
    node_.env->backend().AddRule(rule);
  }

  void Register() {
    if (sessions_.size() >= 3) return;
    auto s = std::make_unique<Session>();
    s->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    s->stream = node_.worker->Session(&s->context);
    v1::WorkerMessage m;
    if (in_.Int(0, 7) == 0) {
      m.mutable_submit()->set_job_id(in_.Int(0, 3));  // not a registration
    } else {
      v1::RegisterWorker* r = m.mutable_register_();
      FillSpec(r->mutable_spec());
      r->set_mp_rank(in_.Int(0, 7) == 0 ? in_.Int(0, UINT32_MAX) : in_.Int(0, 2));
      r->set_device(in_.Int(0, 3));
      // Mostly this process's pid (the in-process caller's), sometimes another.
      r->set_pid(in_.Int(0, 7) == 0 ? in_.Int(0, UINT32_MAX) : getpid());
      const daemon::ShmWorkerMemory& memory = *node_.memories[in_.Int(0, 1)];
      const daemon::WorkerRegistration reg = memory.Registration();
      const bool mangle = in_.Int(0, 3) == 0;
      for (const daemon::TensorRegistration& t : reg.tensors) {
        v1::TensorSpec* p = r->add_tensors();
        p->set_allocation_handle(mangle && in_.Bool() ? in_.Bytes(40) : t.allocation_handle);
        p->set_allocation_bytes(mangle && in_.Bool() ? in_.Size(1 << 20) : t.allocation_bytes);
        p->set_offset(mangle && in_.Bool() ? in_.Size(1 << 20) : t.offset);
        p->set_num_blocks(mangle && in_.Bool() ? in_.Size(64) : t.num_blocks);
        p->set_block_stride_bytes(mangle && in_.Bool() ? in_.Size(1 << 16) : t.block_stride_bytes);
        p->set_page_bytes(mangle && in_.Bool() ? in_.Size(1 << 16) : t.page_bytes);
      }
      const uint64_t events = in_.Int(0, 3) == 0 ? in_.Int(0, 3) : 0;
      for (uint64_t i = 0; i < events; ++i) r->add_event_handles(in_.Bytes(64));
      r->set_pid(in_.Int(0, 1000));
    }
    s->stream->Write(m);
    // Wait for the answer (Registered, or the end of a refused session), so what follows runs
    // against a known registration and the same input behaves the same way every time.
    v1::DaemonMessage reply;
    if (!s->stream->Read(&reply)) {
      s->writes_done = true;
      s->stream->WritesDone();
    } else if (Tracing()) {
      std::fprintf(stderr, "trace: session got %s\n", reply.ShortDebugString().c_str());
    }
    sessions_.push_back(std::move(s));
  }

  void Submit() {
    if (sessions_.empty()) return;
    Session& s = *sessions_[in_.Int(0, sessions_.size() - 1)];
    if (s.writes_done) return;
    v1::WorkerMessage m;
    if (in_.Int(0, 15) == 0) {
      FillSpec(m.mutable_register_()->mutable_spec());  // a second registration
    } else {
      v1::Submit* p = m.mutable_submit();
      p->set_job_id(in_.Int(0, 7) == 0 ? in_.Int(0, UINT64_MAX) : in_.Int(0, 5));
      p->set_direction(static_cast<v1::Direction>(in_.Int(0, 3)));
      const uint64_t rows = in_.Int(0, 4);
      for (uint64_t i = 0; i < rows; ++i) p->add_rows(Row());
      const uint64_t blocks = in_.Int(0, 7) == 0 ? in_.Int(0, 9) : rows * in_.Int(1, 2);
      for (uint64_t i = 0; i < blocks; ++i) p->add_gpu_blocks(in_.Int(0, 7) == 0 ? in_.Size(16) : in_.Int(0, kWorkerBlocks - 1));
      p->set_event_index(static_cast<int32_t>(in_.Int(0, 3)) - 2);
    }
    s.stream->Write(m);
  }

  void HangUp() {
    if (sessions_.empty()) return;
    const size_t i = in_.Int(0, sessions_.size() - 1);
    if (in_.Bool()) {
      sessions_[i]->context.TryCancel();  // the worker dies
    } else if (!sessions_[i]->writes_done) {
      sessions_[i]->stream->WritesDone();  // the worker leaves cleanly
      sessions_[i]->writes_done = true;
    }
  }

  void IndexCall() {
    grpc::ClientContext c;
    switch (in_.Int(0, 5)) {
      case 0: {
        v1::LookupResponse r;
        CheckCode(node_.engine->Lookup(&c, Keys(), &r), "Lookup");
        break;
      }
      case 1: {
        v1::PrepareStoreResponse r;
        CheckCode(node_.engine->PrepareStore(&c, Keys(), &r), "PrepareStore");
        Remember(r.rows());
        break;
      }
      case 2: {
        v1::KeysRequest k = Keys();
        v1::CompleteStoreRequest r;
        r.set_engine_id(k.engine_id());
        r.set_dp_rank(k.dp_rank());
        *r.mutable_keys() = k.keys();
        r.set_success(in_.Bool());
        v1::Empty e;
        CheckCode(node_.engine->CompleteStore(&c, r, &e), "CompleteStore");
        break;
      }
      case 3: {
        v1::PrepareLoadResponse r;
        CheckCode(node_.engine->PrepareLoad(&c, Keys(), &r), "PrepareLoad");
        Remember(r.rows());
        break;
      }
      case 4: {
        v1::Empty e;
        CheckCode(node_.engine->CompleteLoad(&c, Keys(), &e), "CompleteLoad");
        break;
      }
      default: {
        v1::Empty e;
        CheckCode(node_.engine->Touch(&c, Keys(), &e), "Touch");
      }
    }
  }

  void AdminCall() {
    grpc::ClientContext c;
    switch (in_.Int(0, 3)) {
      case 0: {
        v1::StatsResponse r;
        CheckCode(node_.admin->Stats(&c, v1::StatsRequest(), &r), "Stats");
        break;
      }
      case 1: {
        v1::ListEnginesResponse r;
        CheckCode(node_.admin->ListEngines(&c, v1::Empty(), &r), "ListEngines");
        break;
      }
      case 2: {
        v1::DropEngineRequest r;
        r.set_engine_id(EngineId());
        r.set_dp_rank(in_.Int(0, 1));
        r.set_force(in_.Bool());
        v1::Empty e;
        CheckCode(node_.admin->DropEngine(&c, r, &e), "DropEngine");
        break;
      }
      default: {
        v1::CleanupRequest r;
        r.set_drop_idle(in_.Bool());
        if (in_.Bool()) r.set_reset_engine_id(EngineId());
        r.set_reset_dp_rank(in_.Int(0, 1));
        v1::CleanupResponse resp;
        CheckCode(node_.admin->Cleanup(&c, r, &resp), "Cleanup");
      }
    }
  }

  void Step() {
    switch (in_.Int(0, 9)) {
      case 0: {
        grpc::ClientContext c;
        v1::OpenEngineRequest r;
        FillSpec(r.mutable_spec());
        v1::OpenEngineResponse resp;
        CheckCode(node_.engine->OpenEngine(&c, r, &resp), "OpenEngine");
        break;
      }
      case 1:
        Register();
        break;
      case 2:
      case 3:
        Submit();
        break;
      case 4:
        HangUp();
        break;
      case 5:
      case 6:
        IndexCall();
        break;
      case 7:
        AdminCall();
        break;
      case 8:
        AddFaultRule();
        break;
      default:
        if (in_.Bool()) {
          node_.env->backend().ReleaseAllHeld();
        } else {
          // Maintenance as if time had passed: job deadlines (30 s) may expire.
          node_.registry->Maintain(absl::Now() + absl::Seconds(in_.Int(0, 60)));
        }
    }
  }

  // Every worker hangs up, every engine goes, every copy ends: the node must be empty again.
  void EndInput() {
    node_.env->backend().ReleaseAllHeld();
    for (auto& s : sessions_) {
      if (!s->writes_done) s->stream->WritesDone();
      v1::DaemonMessage m;
      while (s->stream->Read(&m)) {
        if (Tracing()) std::fprintf(stderr, "trace: session got %s\n", m.ShortDebugString().c_str());
      }
      grpc::Status status = s->stream->Finish();
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        Fail("a worker session did not end within 20 s of its worker hanging up");
      }
      CheckCode(status, "Session");
    }
    sessions_.clear();
    for (const auto& engine : node_.registry->List()) {
      node_.registry->Drop(engine->spec().engine_id, engine->spec().dp_rank, /*force=*/true)
          .IgnoreError();
    }
    FaultCopyBackend::Rule none;
    node_.env->backend().SetDefaultRule(none);
    while (!node_.env->backend().Held().empty() || node_.env->backend().submitted() !=
                                                       node_.env->backend().completed()) {
      node_.env->backend().ReleaseAllHeld();
      node_.env->backend().WaitForCompleted(node_.env->backend().submitted(), absl::Seconds(10));
    }
    // Rules the script queued but no copy used would leak into the next input.
    node_.env->backend().ClearRules();
    if (!node_.env->Settle()) Fail("copies did not end within 10 s");
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (node_.env->budget().reserved() != 0) {
      if (absl::Now() > deadline) {
        Fail(absl::StrCat(node_.env->budget().reserved(),
                          " bytes of the node cap still reserved after every engine was dropped"));
      }
      absl::SleepFor(absl::Microseconds(200));
      node_.env->release().Flush();
    }
    grpc::ClientContext c;
    v1::StatsResponse stats;
    grpc::Status status = node_.admin->Stats(&c, v1::StatsRequest(), &stats);
    if (!status.ok() || stats.engines_size() != 0 || stats.region_bytes() != 0) {
      Fail(absl::StrCat("Stats after the input: ", status.error_message(), " engines=",
                        stats.engines_size(), " region_bytes=", stats.region_bytes()));
    }
  }

  Node& node_;
  FuzzInput& in_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<uint64_t> rows_;
};

}  // namespace
}  // namespace kvoffload::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvoffload::fuzz::FuzzInput in(data, size);
  kvoffload::fuzz::Script(kvoffload::fuzz::TheNode(), in).Run();
  return 0;
}
