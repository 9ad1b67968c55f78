// identity_client: one call to kvoffloadd, made by whatever process runs it, printed as one line
// "CODE message" (CODE the gRPC status code; for `register`, "0 registered slot=S" on success).
// identity_test.cc runs it under setpriv as another uid to try, as an attacker would, what issue
// 10 found possible; it speaks the gRPC API directly so that it can send what the client library
// never would (another pid, a named shm object, an unsealed or foreign memfd).
//
//   identity_client --socket=S --action=lookup --engine_id=B --keys=k-0,k-1
//   identity_client --socket=S --action=register --engine_id=B --memory=unsealed
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

ABSL_FLAG(std::string, socket, "", "data socket");
ABSL_FLAG(std::string, admin_socket, "", "admin socket");
ABSL_FLAG(std::string, action, "",
          "open | lookup | prepare_store | complete_store | complete_store_failed | prepare_load "
          "| complete_load | touch | drop | reset | cleanup_idle | list | register");
ABSL_FLAG(std::string, engine_id, "it", "");
ABSL_FLAG(uint32_t, dp_rank, 0, "");
ABSL_FLAG(uint32_t, world_size, 1, "");
ABSL_FLAG(std::string, attention, "mha", "mha | mla");
ABSL_FLAG(uint32_t, num_layers, 4, "");
ABSL_FLAG(uint64_t, page_bytes, 8192, "");
ABSL_FLAG(uint64_t, budget_bytes, 4 << 20, "");
ABSL_FLAG(std::vector<std::string>, member_uids, {}, "EngineSpec.member_uids");
ABSL_FLAG(std::vector<std::string>, keys, {}, "index keys");
ABSL_FLAG(uint32_t, mp_rank, 0, "register: the rank");
ABSL_FLAG(int32_t, pid_delta, 0, "register: declare getpid() + this as the pid");
ABSL_FLAG(std::string, memory, "sealed",
          "register: sealed (a sealed memfd of ours), unsealed (a memfd without F_SEAL_SHRINK), "
          "named:/NAME (a POSIX shm name), open:PATH (a descriptor of ours opened read-only on "
          "PATH, named as memfd:<fd>)");
ABSL_FLAG(bool, truncate_and_store, false,
          "register: after registering, try to ftruncate the memory to 0 and submit a store of "
          "block 0 into row 0; prints the ftruncate errno and the job's code too");

namespace {

namespace v1 = kvoffload::v1;

v1::EngineSpec Spec() {
  v1::EngineSpec spec;
  spec.set_engine_id(absl::GetFlag(FLAGS_engine_id));
  spec.set_dp_rank(absl::GetFlag(FLAGS_dp_rank));
  const uint32_t world = absl::GetFlag(FLAGS_world_size);
  spec.set_world_size(world);
  spec.set_tp(world);
  spec.set_pp(1);
  spec.set_pcp(1);
  spec.set_dcp(1);
  spec.set_executor(v1::EXECUTOR_MP);
  spec.set_attention(absl::GetFlag(FLAGS_attention) == "mla" ? v1::ATTENTION_MLA
                                                             : v1::ATTENTION_MHA);
  spec.set_num_kv_groups(1);
  spec.set_num_layers(absl::GetFlag(FLAGS_num_layers));
  spec.set_page_bytes(absl::GetFlag(FLAGS_page_bytes));
  spec.set_blocks_per_row(1);
  spec.set_budget_bytes(absl::GetFlag(FLAGS_budget_bytes));
  for (const std::string& uid : absl::GetFlag(FLAGS_member_uids)) {
    spec.add_member_uids(static_cast<uint32_t>(std::stoul(uid)));
  }
  return spec;
}

int Print(const grpc::Status& status, const std::string& detail = "") {
  std::printf("%d %s%s\n", static_cast<int>(status.error_code()), status.error_message().c_str(),
              detail.c_str());
  return 0;
}

template <typename Request>
void FillKeys(Request* request) {
  request->set_engine_id(absl::GetFlag(FLAGS_engine_id));
  request->set_dp_rank(absl::GetFlag(FLAGS_dp_rank));
  for (const std::string& k : absl::GetFlag(FLAGS_keys)) request->add_keys(k);
}

// The worker's memory as --memory says; returns the handle and the descriptor (-1 for a name).
std::string MakeMemory(uint64_t bytes, int* fd) {
  const std::string memory = absl::GetFlag(FLAGS_memory);
  *fd = -1;
  if (memory.rfind("named:", 0) == 0) return memory.substr(6);
  if (memory.rfind("open:", 0) == 0) {
    *fd = open(memory.substr(5).c_str(), O_RDONLY);
    return absl::StrCat("memfd:", *fd);
  }
  *fd = memfd_create("identity-client", MFD_ALLOW_SEALING);
  if (ftruncate(*fd, static_cast<off_t>(bytes)) != 0) std::perror("ftruncate");
  if (memory == "sealed") fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK);
  return absl::StrCat("memfd:", *fd);
}

int Register(v1::Worker::Stub& stub, v1::Engine::Stub& engine) {
  const uint64_t block = absl::GetFlag(FLAGS_page_bytes) * absl::GetFlag(FLAGS_num_layers);
  const uint64_t blocks = 16;
  int fd = -1;
  const std::string handle = MakeMemory(block * blocks, &fd);
  grpc::ClientContext context;
  auto stream = stub.Session(&context);
  v1::WorkerMessage message;
  v1::RegisterWorker* reg = message.mutable_register_();
  *reg->mutable_spec() = Spec();
  reg->set_mp_rank(absl::GetFlag(FLAGS_mp_rank));
  reg->set_pid(static_cast<uint32_t>(getpid() + absl::GetFlag(FLAGS_pid_delta)));
  v1::TensorSpec* t = reg->add_tensors();
  t->set_allocation_handle(handle);
  t->set_allocation_bytes(block * blocks);
  t->set_num_blocks(blocks);
  t->set_block_stride_bytes(block);
  t->set_page_bytes(block);
  if (!stream->Write(message)) return Print(stream->Finish());
  v1::DaemonMessage reply;
  if (!stream->Read(&reply) || !reply.has_registered()) {
    stream->WritesDone();
    return Print(stream->Finish());
  }
  std::string detail = absl::StrCat(" registered slot=", reply.registered().slot());
  if (absl::GetFlag(FLAGS_truncate_and_store)) {
    // An identity-and-isolation attack: shrink the memory under the daemon, then make it copy from it.
    const int truncated = ftruncate(fd, 0);
    absl::StrAppend(&detail, " ftruncate=", truncated == 0 ? "ok" : strerror(errno));
    // A row from the engine's index, as a scheduler would get it.
    grpc::ClientContext prepare_context;
    v1::KeysRequest prepare;
    prepare.set_engine_id(absl::GetFlag(FLAGS_engine_id));
    prepare.set_dp_rank(absl::GetFlag(FLAGS_dp_rank));
    prepare.add_keys("truncated-0");
    v1::PrepareStoreResponse prepared;
    const grpc::Status p = engine.PrepareStore(&prepare_context, prepare, &prepared);
    if (!p.ok() || prepared.rows_size() != 1) return Print(p, " PrepareStore failed");
    v1::WorkerMessage submit;
    v1::Submit* s = submit.mutable_submit();
    s->set_job_id(1);
    s->set_direction(v1::DIRECTION_STORE);
    s->add_gpu_blocks(0);
    s->add_rows(prepared.rows(0));
    s->set_event_index(-1);
    if (stream->Write(submit) && stream->Read(&reply) && reply.has_finished()) {
      absl::StrAppend(&detail, " job_code=", reply.finished().code());
    } else {
      absl::StrAppend(&detail, " job_code=none");
    }
  }
  stream->WritesDone();
  context.TryCancel();
  (void)stream->Finish();
  return Print(grpc::Status::OK, detail);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string action = absl::GetFlag(FLAGS_action);
  auto data = grpc::CreateChannel(absl::StrCat("unix:", absl::GetFlag(FLAGS_socket)),
                                  grpc::InsecureChannelCredentials());
  auto engine = v1::Engine::NewStub(data);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (action == "open") {
    v1::OpenEngineRequest request;
    *request.mutable_spec() = Spec();
    v1::OpenEngineResponse response;
    grpc::Status s = engine->OpenEngine(&context, request, &response);
    return Print(s, s.ok() ? absl::StrCat("owner=", response.owner_uid()) : "");
  }
  if (action == "lookup") {
    v1::KeysRequest request;
    FillKeys(&request);
    v1::LookupResponse response;
    grpc::Status s = engine->Lookup(&context, request, &response);
    return Print(s, absl::StrCat("states=", absl::StrJoin(response.states(), ",")));
  }
  if (action == "prepare_store") {
    v1::KeysRequest request;
    FillKeys(&request);
    v1::PrepareStoreResponse response;
    grpc::Status s = engine->PrepareStore(&context, request, &response);
    return Print(s, absl::StrCat("rows=", absl::StrJoin(response.rows(), ",")));
  }
  if (action == "complete_store" || action == "complete_store_failed") {
    v1::CompleteStoreRequest request;
    FillKeys(&request);
    request.set_success(action == "complete_store");
    v1::Empty response;
    return Print(engine->CompleteStore(&context, request, &response));
  }
  if (action == "prepare_load") {
    v1::KeysRequest request;
    FillKeys(&request);
    v1::PrepareLoadResponse response;
    grpc::Status s = engine->PrepareLoad(&context, request, &response);
    return Print(s, absl::StrCat("rows=", absl::StrJoin(response.rows(), ",")));
  }
  if (action == "complete_load" || action == "touch") {
    v1::KeysRequest request;
    FillKeys(&request);
    v1::Empty response;
    return Print(action == "touch" ? engine->Touch(&context, request, &response)
                                   : engine->CompleteLoad(&context, request, &response));
  }
  if (action == "register") {
    auto worker = v1::Worker::NewStub(data);
    return Register(*worker, *engine);
  }
  auto admin = v1::Admin::NewStub(
      grpc::CreateChannel(absl::StrCat("unix:", absl::GetFlag(FLAGS_admin_socket)),
                          grpc::InsecureChannelCredentials()));
  if (action == "drop") {
    v1::DropEngineRequest request;
    request.set_engine_id(absl::GetFlag(FLAGS_engine_id));
    request.set_dp_rank(absl::GetFlag(FLAGS_dp_rank));
    request.set_force(true);
    v1::Empty response;
    return Print(admin->DropEngine(&context, request, &response));
  }
  if (action == "reset") {
    v1::CleanupRequest request;
    request.set_reset_engine_id(absl::GetFlag(FLAGS_engine_id));
    request.set_reset_dp_rank(absl::GetFlag(FLAGS_dp_rank));
    v1::CleanupResponse response;
    return Print(admin->Cleanup(&context, request, &response));
  }
  if (action == "cleanup_idle") {
    v1::CleanupRequest request;
    request.set_drop_idle(true);
    v1::CleanupResponse response;
    grpc::Status s = admin->Cleanup(&context, request, &response);
    return Print(s, absl::StrCat("dropped=", absl::StrJoin(response.dropped(), ",")));
  }
  if (action == "list") {
    v1::StatsRequest request;
    v1::StatsResponse response;
    grpc::Status s = admin->Stats(&context, request, &response);
    std::vector<std::string> engines;
    for (const v1::EngineStats& e : response.engines()) {
      engines.push_back(absl::StrCat(e.engine_id(), "/", e.dp_rank()));
    }
    return Print(s, absl::StrCat("engines=", absl::StrJoin(engines, ",")));
  }
  std::fprintf(stderr, "unknown --action=%s\n", action.c_str());
  return 2;
}
