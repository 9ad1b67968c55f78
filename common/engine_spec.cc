// EngineSpec helpers: executor/attention names, the region key, printing and equality.
// The topology rules themselves live in geometry.cc (ValidateTopology).
#include "common/engine_spec.h"

#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

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
  return absl::InvalidArgumentError(absl::StrCat("rule known_executor: unknown executor ",
                                                 Quoted(name),
                                                 "; expected one of uni, mp, ray, external"));
}

absl::StatusOr<Attention> ParseAttention(absl::string_view name) {
  if (name == "mha") return Attention::kMha;
  if (name == "mla") return Attention::kMla;
  return absl::InvalidArgumentError(absl::StrCat("rule known_attention: unknown attention ",
                                                 Quoted(name), "; expected one of mha, mla"));
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

std::string EngineSpec::DebugString() const {
  return absl::StrCat(
      "engine_id=", absl::CHexEscape(engine_id), " dp_rank=", dp_rank, " world_size=", world_size,
      " local_world_size=", local_world_size, " tp=", tp, " pp=", pp, " pcp=", pcp, " dcp=", dcp,
      " executor=", ExecutorName(executor), " attention=", AttentionName(attention),
      " num_kv_groups=", num_kv_groups, " num_layers=", num_layers, " page_bytes=", page_bytes,
      " worker_bytes_per_block=", worker_bytes_per_block, " blocks_per_row=", blocks_per_row,
      " budget_bytes=", budget_bytes, " secondary_tiers=[", absl::CHexEscape(absl::StrJoin(secondary_tiers, ",")),
      "] rows_assigned_by_engine=", rows_assigned_by_engine ? 1 : 0,
      " stores_by_writer_only=", stores_by_writer_only ? 1 : 0);
}

bool EngineSpec::operator==(const EngineSpec& other) const {
  auto fields = [](const EngineSpec& s) {
    return std::tie(s.engine_id, s.dp_rank, s.world_size, s.local_world_size, s.tp, s.pp, s.pcp,
                    s.dcp, s.executor, s.attention, s.num_kv_groups, s.num_layers, s.page_bytes,
                    s.worker_bytes_per_block, s.blocks_per_row, s.budget_bytes, s.secondary_tiers,
                    s.rows_assigned_by_engine, s.stores_by_writer_only);
  };
  return fields(*this) == fields(other);
}

}  // namespace kvoffload::common
