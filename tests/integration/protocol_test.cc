// The gRPC surface, spoken directly (no client library): requests a well-behaved client never
// sends, each answered with an exact status code.
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {
namespace {

v1::EngineSpec Spec(const std::string& id) {
  v1::EngineSpec spec;
  spec.set_engine_id(id);
  spec.set_world_size(1);
  spec.set_tp(1);
  spec.set_pp(1);
  spec.set_pcp(1);
  spec.set_dcp(1);
  spec.set_executor(v1::EXECUTOR_MP);
  spec.set_attention(v1::ATTENTION_MHA);
  spec.set_num_kv_groups(1);
  spec.set_num_layers(2);
  spec.set_page_bytes(4096);
  spec.set_budget_bytes(1 << 20);
  return spec;
}

class ProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start({"--max_blocks_per_job=1000"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    auto channel = grpc::CreateChannel(absl::StrCat("unix:", daemon_->data_socket()),
                                       grpc::InsecureChannelCredentials());
    engine_ = v1::Engine::NewStub(channel);
    worker_ = v1::Worker::NewStub(channel);
  }

  grpc::StatusCode Open(const v1::EngineSpec& spec) {
    grpc::ClientContext context;
    v1::OpenEngineRequest request;
    *request.mutable_spec() = spec;
    v1::OpenEngineResponse response;
    return engine_->OpenEngine(&context, request, &response).error_code();
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<v1::Engine::Stub> engine_;
  std::unique_ptr<v1::Worker::Stub> worker_;
};

TEST_F(ProtocolTest, OpenEngineValidatesEnumsAndIsIdempotent) {
  v1::EngineSpec spec = Spec("e");
  spec.set_executor(v1::EXECUTOR_UNSPECIFIED);
  EXPECT_EQ(Open(spec), grpc::StatusCode::INVALID_ARGUMENT);
  spec = Spec("e");
  spec.set_attention(static_cast<v1::Attention>(42));
  EXPECT_EQ(Open(spec), grpc::StatusCode::INVALID_ARGUMENT);
  spec = Spec("e");
  spec.set_pp(2);
  EXPECT_EQ(Open(spec), grpc::StatusCode::FAILED_PRECONDITION);
  spec = Spec("bad id with spaces");
  EXPECT_EQ(Open(spec), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Open(Spec("e")), grpc::StatusCode::OK);
  EXPECT_EQ(Open(Spec("e")), grpc::StatusCode::OK);
  auto stats = daemon_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->engines_size(), 1);
}

TEST_F(ProtocolTest, IndexCallsOnUnknownOrEngineAssignedEnginesAreRefused) {
  grpc::ClientContext context;
  v1::KeysRequest request;
  request.set_engine_id("missing");
  request.add_keys("k");
  v1::LookupResponse response;
  EXPECT_EQ(engine_->Lookup(&context, request, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);

  v1::EngineSpec spec = Spec("own-rows");
  spec.set_rows_assigned_by_engine(true);
  ASSERT_EQ(Open(spec), grpc::StatusCode::OK);
  grpc::ClientContext context2;
  request.set_engine_id("own-rows");
  v1::PrepareStoreResponse store;
  EXPECT_EQ(engine_->PrepareStore(&context2, request, &store).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ProtocolTest, SessionMustStartWithRegister) {
  grpc::ClientContext context;
  auto stream = worker_->Session(&context);
  v1::WorkerMessage message;
  message.mutable_submit()->set_job_id(1);
  ASSERT_TRUE(stream->Write(message));
  stream->WritesDone();
  v1::DaemonMessage reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ProtocolTest, RegistrationWithoutTensorsOrWithTensorsPastTheirAllocationIsRefused) {
  {
    grpc::ClientContext context;
    auto stream = worker_->Session(&context);
    v1::WorkerMessage message;
    *message.mutable_register_()->mutable_spec() = Spec("e");
    message.mutable_register_()->set_pid(getpid());  // the connecting process, as required
    ASSERT_TRUE(stream->Write(message));
    v1::DaemonMessage reply;
    EXPECT_FALSE(stream->Read(&reply));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    auto stream = worker_->Session(&context);
    v1::WorkerMessage message;
    v1::RegisterWorker* reg = message.mutable_register_();
    *reg->mutable_spec() = Spec("e");
  reg->set_pid(getpid());
    reg->set_pid(getpid());
    v1::TensorSpec* t = reg->add_tensors();
    t->set_allocation_handle("/kvo-test-does-not-exist");
    t->set_allocation_bytes(1 << 20);
    t->set_num_blocks(16);
    t->set_block_stride_bytes(8192);
    t->set_page_bytes(8192);
    ASSERT_TRUE(stream->Write(message));
    v1::DaemonMessage reply;
    EXPECT_FALSE(stream->Read(&reply));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Nothing of either registration stayed behind: not even the engine was created.
  EXPECT_EQ(daemon_->EngineStats("e").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ProtocolTest, DeviceUuidIsRawBytes) {
  // A CUDA device UUID is 16 arbitrary bytes, rarely valid UTF-8: the field must be `bytes`.
  // The registration then fails on its missing shm object, not on parsing.
  grpc::ClientContext context;
  auto stream = worker_->Session(&context);
  v1::WorkerMessage message;
  v1::RegisterWorker* reg = message.mutable_register_();
  *reg->mutable_spec() = Spec("e");
  reg->set_pid(getpid());
  reg->set_device_uuid(std::string("\xff\xfe\x80\x00\x81\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x90\x28\xbc", 16));
  v1::TensorSpec* t = reg->add_tensors();
  t->set_allocation_handle("/kvo-test-does-not-exist");
  t->set_allocation_bytes(1 << 20);
  t->set_num_blocks(16);
  t->set_block_stride_bytes(8192);
  t->set_page_bytes(8192);
  ASSERT_TRUE(stream->Write(message));
  v1::DaemonMessage reply;
  EXPECT_FALSE(stream->Read(&reply));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("kvo-test-does-not-exist"), std::string::npos)
      << status.error_message();
}

TEST_F(ProtocolTest, EmptyAndOversizedSubmitsAreRefused) {
  auto worker = WorkerProcess::Start(
      daemon_->data_socket(),
      {"--engine_id=e", "--num_layers=2", "--page_bytes=4096", "--budget_bytes=1048576",
       "--rows_assigned_by_engine=false", "--num_blocks=2048"});
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ((*worker)->hello().substr(0, 16), "registered slot=") << (*worker)->hello();
  EXPECT_EQ((*worker)->Command("store 1 - -").substr(0, 13), "finished 1 3 ");  // no rows
  std::string blocks, rows;
  for (int i = 0; i < 1001; ++i) {
    absl::StrAppend(&blocks, i == 0 ? "" : ",", i);
    absl::StrAppend(&rows, i == 0 ? "" : ",", i % 100);
  }
  std::string line = (*worker)->Command(absl::StrCat("store 2 ", blocks, " ", rows));
  EXPECT_EQ(line.substr(0, 13), "finished 2 3 ") << line;
  EXPECT_NE(line.find("exceed the limit of 1000"), std::string::npos) << line;
}

}  // namespace
}  // namespace kvoffload::testing
