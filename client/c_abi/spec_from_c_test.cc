// The C struct, the wire and common::EngineSpec agree: kvo_engine_spec_init gives common's
// defaults, every field survives C → common → proto → common unchanged, and the secondary-tier
// list has one rule (the one `kvoffloadctl plan` uses too).
#include "client/c_abi/spec_from_c.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/engine_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/spec_convert.h"

namespace kvoffload::client {
namespace {

TEST(SpecFromCTest, InitGivesCommonDefaults) {
  kvo_engine_spec c;
  kvo_engine_spec_init(&c);
  auto spec = SpecFromC(&c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, common::EngineSpec());
}

TEST(SpecFromCTest, EveryFieldSurvivesTheWire) {
  kvo_engine_spec c;
  kvo_engine_spec_init(&c);
  c.engine_id = "llama-70b";
  c.dp_rank = 3;
  c.world_size = 16;
  c.local_world_size = 8;
  c.tp = 16;
  c.pp = 1;
  c.pcp = 1;
  c.dcp = 2;
  c.executor = KVO_EXECUTOR_RAY;
  c.attention = KVO_ATTENTION_MLA;
  c.num_kv_groups = 2;
  c.num_layers = 61;
  c.blocks_per_row = 4;
  c.page_bytes = 36864;
  c.worker_bytes_per_block = 36864 * 61 + 4096;
  c.budget_bytes = uint64_t{80} << 30;
  c.secondary_tiers = " fs ,obj,, ";
  c.rows_assigned_by_engine = 1;
  c.stores_by_writer_only = 1;
  const uint32_t uids[] = {1001, 1002};
  const uint32_t gids[] = {2001};
  c.member_uids = uids;
  c.num_member_uids = 2;
  c.member_gids = gids;
  c.num_member_gids = 1;
  c.pool = "llama-pool";
  c.model_identity = "llama-70b@main bf16";
  auto spec = SpecFromC(&c);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->stores_by_writer_only);
  EXPECT_EQ(spec->pool, "llama-pool");
  EXPECT_EQ(spec->model_identity, "llama-70b@main bf16");
  EXPECT_EQ(spec->member_uids, (std::vector<uint32_t>{1001, 1002}));
  EXPECT_EQ(spec->member_gids, (std::vector<uint32_t>{2001}));
  EXPECT_EQ(spec->executor, common::Executor::kRay);
  EXPECT_EQ(spec->attention, common::Attention::kMla);
  EXPECT_EQ(spec->secondary_tiers, (std::vector<std::string>{"fs", "obj"}));
  EXPECT_TRUE(spec->rows_assigned_by_engine);
  v1::EngineSpec wire;
  SpecToProto(*spec, &wire);
  auto back = SpecFromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *spec) << back->DebugString() << " vs " << spec->DebugString();
  EXPECT_EQ(back->member_uids, spec->member_uids);  // access lists: not part of operator==
  EXPECT_EQ(back->member_gids, spec->member_gids);
  EXPECT_EQ(back->DebugString(),
            "engine_id=llama-70b dp_rank=3 world_size=16 local_world_size=8 tp=16 pp=1 pcp=1 dcp=2 "
            "executor=ray attention=mla num_kv_groups=2 num_layers=61 page_bytes=36864 "
            "worker_bytes_per_block=2252800 blocks_per_row=4 budget_bytes=85899345920 "
            "secondary_tiers=[fs,obj] rows_assigned_by_engine=1 stores_by_writer_only=1 "
            "pool=llama-pool model_identity=llama-70b@main bf16");
}

// The proto is the schema: every field of v1::EngineSpec, set to a value that is not its default,
// comes back unchanged through common::EngineSpec and the C struct, and DescribeAll names it. A
// field added to the proto but not to common/engine_spec_fields.h is dropped on the way and fails
// here.
TEST(SpecFieldsTest, EveryProtoFieldReachesCAndBack) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = v1::EngineSpec::descriptor();
  const google::protobuf::Reflection* r = v1::EngineSpec::GetReflection();
  v1::EngineSpec wire;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const int n = f->number();
    const bool repeated = f->is_repeated();
    for (int k = 0; k < (repeated ? 2 : 1); ++k) {
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_UINT32:
          repeated ? r->AddUInt32(&wire, f, 1000 * n + k) : r->SetUInt32(&wire, f, 1000 + n);
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          r->SetUInt64(&wire, f, (uint64_t{1} << 40) + n);
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          r->SetBool(&wire, f, true);
          break;
        case FieldDescriptor::CPPTYPE_ENUM:  // the last value: never the default (unset) one
          r->SetEnum(&wire, f, f->enum_type()->value(f->enum_type()->value_count() - 1));
          break;
        case FieldDescriptor::CPPTYPE_STRING:
          repeated ? r->AddString(&wire, f, absl::StrCat("t", n, "-", k))
                   : r->SetString(&wire, f, absl::StrCat("s", n));
          break;
        default:
          FAIL() << "EngineSpec." << f->name() << " has a type no kind of "
                 << "common/engine_spec_fields.h carries";
      }
    }
  }
  auto spec = SpecFromProto(wire);
  ASSERT_TRUE(spec.ok()) << spec.status();
  CEngineSpec c(*spec);
  auto back = SpecFromC(c.get());
  ASSERT_TRUE(back.ok()) << back.status();
  v1::EngineSpec again;
  SpecToProto(*back, &again);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(wire, again))
      << "sent: " << wire.ShortDebugString() << "\ncame back: " << again.ShortDebugString();
  const std::string described = back->DescribeAll();
  for (int i = 0; i < d->field_count(); ++i) {
    EXPECT_THAT(described, ::testing::HasSubstr(absl::StrCat(d->field(i)->name(), "=")));
  }
}

TEST(SpecFieldsTest, DescribeGivesEveryFieldOfTheCStruct) {
  common::EngineSpec spec;
  spec.engine_id = "e1";
  spec.member_uids = {1001, 1002};
  spec.secondary_tiers = {"fs"};
  CEngineSpec c(spec);
  char out[1024];
  char err[256];
  ASSERT_EQ(kvo_engine_spec_describe(c.get(), out, sizeof out, err, sizeof err), KVO_OK) << err;
  EXPECT_EQ(std::string(out), spec.DescribeAll());
  EXPECT_THAT(out, ::testing::EndsWith(
                       "secondary_tiers=[fs] rows_assigned_by_engine=0 member_uids=[1001,1002] "
                       "member_gids=[] stores_by_writer_only=0 pool= model_identity="));
  EXPECT_EQ(kvo_engine_spec_describe(nullptr, out, sizeof out, err, sizeof err),
            KVO_INVALID_ARGUMENT);
  EXPECT_STREQ(err, "engine spec is NULL");
  EXPECT_EQ(kvo_engine_spec_describe(c.get(), nullptr, 0, err, sizeof err), KVO_INVALID_ARGUMENT);
  char small[8];
  ASSERT_EQ(kvo_engine_spec_describe(c.get(), small, sizeof small, err, sizeof err), KVO_OK);
  EXPECT_STREQ(small, "engine_");  // truncated, NUL-terminated
}

TEST(SpecFromCTest, RefusesWhatHasNoCommonMeaning) {
  kvo_engine_spec c;
  kvo_engine_spec_init(&c);
  EXPECT_EQ(SpecFromC(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  c.executor = 4;
  EXPECT_EQ(SpecFromC(&c).status(),
            absl::InvalidArgumentError(
                "engine spec: executor is 4, want one of KVO_EXECUTOR_UNI (0), KVO_EXECUTOR_MP "
                "(1), KVO_EXECUTOR_RAY (2), KVO_EXECUTOR_EXTERNAL (3)"));
  kvo_engine_spec_init(&c);
  c.attention = -1;
  EXPECT_EQ(SpecFromC(&c).status().code(), absl::StatusCode::kInvalidArgument);
  kvo_engine_spec_init(&c);
  c.rows_assigned_by_engine = 2;
  EXPECT_EQ(SpecFromC(&c).status(),
            absl::InvalidArgumentError("engine spec: rows_assigned_by_engine is 2, want 0 or 1"));
  kvo_engine_spec_init(&c);
  c.stores_by_writer_only = -1;
  EXPECT_EQ(SpecFromC(&c).status().code(), absl::StatusCode::kInvalidArgument);
  kvo_engine_spec_init(&c);
  c.num_member_uids = 1;  // NULL array
  EXPECT_EQ(SpecFromC(&c).status(),
            absl::InvalidArgumentError("engine spec: member_uids is NULL with num_member_uids 1"));
  kvo_engine_spec_init(&c);
  std::vector<uint32_t> many(1025, 7);
  c.member_gids = many.data();
  c.num_member_gids = many.size();
  EXPECT_EQ(SpecFromC(&c).status().code(), absl::StatusCode::kInvalidArgument);
  kvo_engine_spec_init(&c);
  c.engine_id = nullptr;
  EXPECT_EQ(SpecFromC(&c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseSecondaryTiersTest, StripsAndDropsEmptyNames) {
  EXPECT_TRUE(common::ParseSecondaryTiers("").empty());
  EXPECT_TRUE(common::ParseSecondaryTiers(" , ,").empty());
  EXPECT_EQ(common::ParseSecondaryTiers("fs"), std::vector<std::string>{"fs"});
  EXPECT_EQ(common::ParseSecondaryTiers(" fs ,\tobj"), (std::vector<std::string>{"fs", "obj"}));
}

}  // namespace
}  // namespace kvoffload::client
