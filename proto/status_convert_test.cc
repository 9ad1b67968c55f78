#include "proto/status_convert.h"

#include <string>

#include "absl/status/status.h"
#include "common/error_info.h"
#include "common/refusals.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.pb.h"

namespace kvoffload {
namespace {

using Metadata = std::map<std::string, std::string>;

TEST(StatusConvertTest, ReasonSurvivesAbslGrpcAbsl) {
  const absl::Status sent = common::CheckRegionEpoch("engine e/0", 0x2b, 0x2c);
  const grpc::Status wire = ToGrpcStatus(sent);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(wire.error_message(), std::string(sent.message()));
  // The details are a google.rpc.Status-shaped RpcStatus with one Any of our type.
  v1::RpcStatus details;
  ASSERT_TRUE(details.ParseFromString(wire.error_details()));
  EXPECT_EQ(details.code(), 9);
  ASSERT_EQ(details.details_size(), 1);
  EXPECT_EQ(details.details(0).type_url(), "type.googleapis.com/kvoffload.v1.ErrorInfo");
  v1::ErrorInfo info;
  ASSERT_TRUE(info.ParseFromString(details.details(0).value()));
  EXPECT_EQ(info.reason(), "region_epoch_mismatch");
  EXPECT_EQ(info.domain(), "kvoffload");

  const absl::Status received = FromGrpcStatus(wire);
  EXPECT_EQ(received.code(), sent.code());
  EXPECT_EQ(received.message(), sent.message());
  const common::ErrorInfo back = common::ErrorInfoOf(received);
  EXPECT_EQ(back.reason, "region_epoch_mismatch");
  EXPECT_EQ(back.metadata, (Metadata{{"planned_epoch", "2b"}, {"region_epoch", "2c"}}));
  EXPECT_EQ(received, sent);  // payloads compare equal too
}

TEST(StatusConvertTest, WithoutReasonNoDetails) {
  const grpc::Status wire = ToGrpcStatus(absl::NotFoundError("x"));
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(wire.error_details().empty());
  EXPECT_EQ(FromGrpcStatus(wire), absl::NotFoundError("x"));
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(StatusConvertTest, ForeignDetailsAreIgnored) {
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::INTERNAL, "x", "\xff\xfe garbage")),
            absl::InternalError("x"));
  v1::RpcStatus other;
  other.add_details()->set_type_url("type.googleapis.com/google.rpc.DebugInfo");
  const grpc::Status foreign(grpc::StatusCode::INTERNAL, "x", other.SerializeAsString());
  EXPECT_EQ(FromGrpcStatus(foreign), absl::InternalError("x"));
}

TEST(StatusConvertTest, SessionMessagesCarryTheReason) {
  v1::JobFinished finished;
  StatusToMessage(common::KeyNotInIndex("load", 1, "key #1 (61)"), &finished);
  EXPECT_EQ(finished.code(), 5);
  EXPECT_EQ(finished.error().reason(), "key_not_in_index");
  const absl::Status back = StatusFromMessage(finished);
  EXPECT_EQ(back.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(back.message(), "load: key #1 (61) is not in the index");
  EXPECT_EQ(common::ErrorReason(back), "key_not_in_index");

  v1::SessionClosed closed;
  StatusToMessage(absl::UnavailableError("stopping"), &closed);
  EXPECT_FALSE(closed.has_error());
  EXPECT_EQ(StatusFromMessage(closed), absl::UnavailableError("stopping"));
  v1::JobFinished ok;
  StatusToMessage(absl::OkStatus(), &ok);
  EXPECT_TRUE(StatusFromMessage(ok).ok());
}

}  // namespace
}  // namespace kvoffload
