// EngineSpec helpers: executor/attention names, the region key, printing and equality.
// The topology rules themselves live in geometry.cc (ValidateTopology).
#include "common/engine_spec.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/engine_spec_fields.h"
#include "common/refusals.h"

namespace kvoffload::common {
namespace {

// Quotes a user-supplied name for an error message; control bytes are escaped so that the
// message stays on one line.
std::string Quoted(absl::string_view name) {
  constexpr size_t kMaxShown = 64;
  std::string shown = absl::CHexEscape(name.substr(0, kMaxShown));
  if (name.size() > kMaxShown) absl::StrAppend(&shown, "...");
  return absl::StrCat("\"", shown, "\"");
}

}  // namespace

absl::StatusOr<Executor> ParseExecutor(absl::string_view name) {
  if (name == "uni") return Executor::kUni;
  if (name == "mp") return Executor::kMp;
  if (name == "ray") return Executor::kRay;
  if (name == "external") return Executor::kExternal;
  return SpecRule(absl::StatusCode::kInvalidArgument, "known_executor",
                  absl::StrCat("unknown executor ", Quoted(name),
                               "; expected one of uni, mp, ray, external"));
}

absl::StatusOr<Attention> ParseAttention(absl::string_view name) {
  if (name == "mha") return Attention::kMha;
  if (name == "mla") return Attention::kMla;
  return SpecRule(absl::StatusCode::kInvalidArgument, "known_attention",
                  absl::StrCat("unknown attention ", Quoted(name), "; expected one of mha, mla"));
}

const char* ExecutorName(Executor e) {
  switch (e) {
    case Executor::kUni:
      return "uni";
    case Executor::kMp:
      return "mp";
    case Executor::kRay:
      return "ray";
    case Executor::kExternal:
      return "external";
  }
  return "unknown";
}

const char* AttentionName(Attention a) {
  switch (a) {
    case Attention::kMha:
      return "mha";
    case Attention::kMla:
      return "mla";
  }
  return "unknown";
}

std::vector<std::string> ParseSecondaryTiers(absl::string_view comma_separated) {
  std::vector<std::string> tiers;
  for (absl::string_view tier : absl::StrSplit(comma_separated, ',')) {
    tier = absl::StripAsciiWhitespace(tier);
    if (!tier.empty()) tiers.emplace_back(tier);
  }
  return tiers;
}

std::string EngineSpec::Key() const { return absl::StrCat(engine_id, "/", dp_rank); }

namespace {

void AppendField(std::string* out, absl::string_view name, absl::string_view value) {
  absl::StrAppend(out, out->empty() ? "" : " ", name, "=", value);
}

const char* EnumName(Executor e) { return ExecutorName(e); }
const char* EnumName(Attention a) { return AttentionName(a); }

std::string Describe(const EngineSpec& s, bool with_access) {
  std::string out;
#define KVO_DESCRIBE_ID(f) AppendField(&out, #f, absl::CHexEscape(s.f));
#define KVO_DESCRIBE_NUMBER(f) AppendField(&out, #f, absl::StrCat(s.f));
#define KVO_DESCRIBE_ENUM(f) AppendField(&out, #f, EnumName(s.f));
#define KVO_DESCRIBE_FLAG(f) AppendField(&out, #f, s.f ? "1" : "0");
#define KVO_DESCRIBE_TIERS(f) \
  AppendField(&out, #f, absl::StrCat("[", absl::CHexEscape(absl::StrJoin(s.f, ",")), "]"));
#define KVO_DESCRIBE_IDS(f) \
  if (with_access) AppendField(&out, #f, absl::StrCat("[", absl::StrJoin(s.f, ","), "]"));
  KVOFFLOAD_ENGINE_SPEC_FIELDS(KVO_DESCRIBE_ID, KVO_DESCRIBE_NUMBER, KVO_DESCRIBE_ENUM,
                               KVO_DESCRIBE_FLAG, KVO_DESCRIBE_TIERS, KVO_DESCRIBE_IDS)
#undef KVO_DESCRIBE_ID
#undef KVO_DESCRIBE_NUMBER
#undef KVO_DESCRIBE_ENUM
#undef KVO_DESCRIBE_FLAG
#undef KVO_DESCRIBE_TIERS
#undef KVO_DESCRIBE_IDS
  return out;
}

}  // namespace

std::string EngineSpec::DebugString() const { return Describe(*this, /*with_access=*/false); }

std::string EngineSpec::DescribeAll() const { return Describe(*this, /*with_access=*/true); }

bool EngineSpec::operator==(const EngineSpec& other) const {
#define KVO_SAME(f) \
  if (f != other.f) return false;
  KVOFFLOAD_ENGINE_SPEC_FIELDS(KVO_SAME, KVO_SAME, KVO_SAME, KVO_SAME, KVO_SAME,
                               KVOFFLOAD_SPEC_FIELD_SKIP)
#undef KVO_SAME
  return true;
}

}  // namespace kvoffload::common
